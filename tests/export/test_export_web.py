"""`albert-tf export --format web`: the site's files, its errors, and the page in headless Chromium.

The browser test (slow) drives the page with tests/browser/drive_page.mjs: Debian's chromium and the npm
packages of tests/browser/package-lock.json, which `.ci/run browser-deps` installs.
"""

import fcntl
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import threading
import zipfile

import numpy as np
import pytest

from albert_tf import AlbertBackbone
from albert_tf.export import web_site
from albert_tf.models import AlbertClassifier, AlbertRegressor
from albert_tf.utils.errors import UserError
from cli_helpers import run_cli, start_program
from export_fixtures import VOCAB_SIZE, assert_spread, tokenizer, write_synthetic_reviews
from helpers import tiny_config
from journey_fixtures import assert_one_line_error, strict_json_lines
import multilabel_fixtures

REPO = pathlib.Path(__file__).parents[2]
BROWSER = REPO / "tests" / "browser"
PACKAGE = BROWSER / "node_modules" / "@mediapipe" / "tasks-text"
INSTALLING = BROWSER / ".installing"
CHROMIUM = "/usr/bin/chromium"
# Markup in a label must show as text (the page never parses a label as HTML).
LABELS = ["<b>négatif</b>", "<b>positif</b>"]  # in the same order as without the markup
# Capitals, accents, full-width letters and spaces, digit-commas: what the tokenizer's
# preprocessing (inside the zipped spiece.model) must give MediaPipe as albert-tf reads it.
MULTILABEL_TEXTS = ["pizza and cheese today", "a song on the piano", "football goal with bread", "drums"]
SENTENCES = [
    "a great film", "THE SCRIPT WAS DULL", "Such A Charming, Brilliant Cast", "a bland , tedious plot",
    "Café crème: a naïve, DÉLIGHTFUL film", "ＡＷＦＵＬ　ａｎｄ　ｂｏｒｉｎｇ", "ｗｏｎｄｅｒｆｕｌ ＭＯＶＩＥ",
    "it cost 10,000 dollars, and 2,500 more: STUPID", "Ｔｈｅ ｅｎｄｉｎｇ ｗａｓ ｍｏｖｉｎｇ",
]


def write_package(directory, name="@mediapipe/tasks-text", files=web_site.MEDIAPIPE_FILES):
    """A stand-in npm package: package.json and a few bytes for each file the page loads."""
    directory.mkdir(parents=True)
    (directory / "package.json").write_text(json.dumps({"name": name, "version": web_site.MEDIAPIPE_VERSION}))
    for f in files:
        (directory / f).parent.mkdir(parents=True, exist_ok=True)
        (directory / f).write_bytes(f.encode())
    return directory


def test_site_files_declare_utf8_and_carry_mediapipe(tmp_path):
    package = write_package(tmp_path / "node_modules" / "@mediapipe" / "tasks-text")
    found, version = web_site.find_mediapipe(search=(str(tmp_path),))
    assert (found, version) == (str(package), web_site.MEDIAPIPE_VERSION)
    site = tmp_path / "site"
    site.mkdir()
    web_site.write_page(str(site), found)
    assert sorted(str(p.relative_to(site)) for p in site.rglob("*") if p.is_file()) == sorted(
        ["index.html", "classify.js"] + [f"mediapipe/{f}" for f in web_site.MEDIAPIPE_FILES])
    assert all((site / "mediapipe" / f).read_bytes() == f.encode() for f in web_site.MEDIAPIPE_FILES)
    page = (site / "index.html").read_bytes()
    # Declared within the first 1024 bytes, before any non-ASCII byte, as the HTML prescan needs.
    head = page[: page.index(b"\xc3")]
    assert re.search(rb'<meta charset="utf-8">', head[:1024]) and b"Caf\xc3\xa9" in page
    text = page.decode()
    assert f"@mediapipe/tasks-text@{web_site.MEDIAPIPE_VERSION}`" in text and "%MEDIAPIPE_VERSION%" not in text
    assert "file:" in text and 'onerror="showError(MISSING_MEDIAPIPE)"' in text
    # The page is tested with the version tests/browser pins.
    pinned = json.loads((BROWSER / "package.json").read_text())["dependencies"]["@mediapipe/tasks-text"]
    assert pinned == web_site.MEDIAPIPE_VERSION


def test_docs_javascript_is_the_pages_script():
    script = (REPO / "albert_tf" / "export" / "web_page" / "classify.js").read_text()
    part = script.split("// docs/deployment.md: begin\n")[1].split("// docs/deployment.md: end\n")[0]
    docs = (REPO / "docs" / "deployment.md").read_text()
    blocks = re.findall(r"```javascript\n(.*?)```", docs, re.S)
    assert blocks == [part]


def test_mediapipe_package_problems_are_one_line_errors(tmp_path, monkeypatch):
    monkeypatch.setattr(web_site.shutil, "which", lambda name: None)  # no global npm root to find
    assert web_site.find_mediapipe(search=(str(tmp_path),)) == (None, None)
    with pytest.raises(UserError, match=r"--mediapipe .*not an npm package"):
        web_site.find_mediapipe(str(tmp_path))
    with pytest.raises(UserError, match=r"names 'left-pad', not @mediapipe/tasks-text"):
        web_site.find_mediapipe(str(write_package(tmp_path / "other", name="left-pad")))
    partial = write_package(tmp_path / "partial", files=web_site.MEDIAPIPE_FILES[:1])
    with pytest.raises(UserError, match=r"lacks wasm/text_wasm_internal.js, .*npm install @mediapipe/tasks-text@"):
        web_site.find_mediapipe(str(partial))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """(classifier, regressor) model directories, untrained, with the export tests' tokenizer."""
    root = tmp_path_factory.mktemp("web_models")
    for name, model in [("classifier", AlbertClassifier(AlbertBackbone(tiny_config(vocab_size=VOCAB_SIZE)), 2,
                                                        label_names=LABELS)),
                        ("regressor", AlbertRegressor(AlbertBackbone(tiny_config(vocab_size=VOCAB_SIZE))))]:
        model.save_pretrained(str(root / name))
        tokenizer().save(str(root / name))
    return root


def test_flag_refusals_come_before_the_model_loads(tmp_path):
    out, model = str(tmp_path / "site"), tmp_path / "model"
    model.mkdir()
    for name in ("config.json", "albert_tf.json"):  # what the command's early checks look for, never read here
        (model / name).write_text("{}")
    for argv, fragments in [
        (["--format", "web", "--mediapipe", str(tmp_path)], ("--mediapipe", "not an npm package")),
        (["--format", "web", "--no-metadata"], ("--no-metadata",)),
        (["--format", "tflite", "--mediapipe", str(tmp_path)], ("--mediapipe", "--format web")),
    ]:  # each is refused before the model is read
        assert_one_line_error(run_cli("export", "--model", str(model), *argv, "--out", out, expect_rc=2), *fragments)
        assert not os.path.exists(out)


@pytest.mark.slow
def test_a_regressor_is_refused_and_a_site_without_mediapipe_says_how_to_get_it(models, tmp_path, monkeypatch):
    monkeypatch.setattr(web_site.shutil, "which", lambda name: None)
    out = str(tmp_path / "site")
    done = run_cli("export", "--model", str(models / "regressor"), "--format", "web", "--out", out, expect_rc=2)
    assert_one_line_error(done, "--format web", "regressor")
    done = run_cli("export", "--model", str(models / "classifier"), "--format", "web", "--out", out,
                   "--max-length", "16", cwd=tmp_path)
    (notice,) = [line for line in done.stdout.splitlines() if line.startswith("Notice:")]
    assert f"npm install @mediapipe/tasks-text@{web_site.MEDIAPIPE_VERSION}, then export again with --mediapipe" in notice
    assert sorted(os.listdir(out)) == ["classify.js", "index.html", "model"]
    with zipfile.ZipFile(os.path.join(out, "model", "model.tflite")) as bundle:  # the files zipped after the flatbuffer
        assert bundle.read("labels.txt").decode("utf-8").split() == LABELS


def require_browser():
    """node, chromium and tests/browser's npm packages, or a failure that says how to install them.

    Under `.ci/run` they may still be installing beside the tests: this first waits for them.
    """
    wait_for_browser_installs(INSTALLING)
    missing = [what for what, present in [
        ("node", shutil.which("node")), (CHROMIUM, os.path.exists(CHROMIUM)),
        (str(PACKAGE), PACKAGE.is_dir()), ("puppeteer-core", (BROWSER / "node_modules" / "puppeteer-core").is_dir()),
    ] if not present]
    if missing:
        pytest.fail(f"the browser test needs {', '.join(missing)}: run `.ci/run browser-deps` (CI runs it).")


def wait_for_browser_installs(lock):
    """Returns once no process holds the lock file `lock` (`.ci/run`'s installs hold it while they run)."""
    if lock.exists():
        with open(lock) as held:
            fcntl.flock(held, fcntl.LOCK_SH)


def test_the_browser_test_waits_for_the_installs_that_hold_the_lock(tmp_path):
    lock = tmp_path / ".installing"
    wait_for_browser_installs(lock)  # no lock file: nothing installs, nothing to wait for
    # `.ci/run` holds the lock as `flock` does: on the open file, until the installs end.
    installs = subprocess.Popen(["flock", str(lock), "sh", "-c", "echo held; read line"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
    try:
        assert installs.stdout.readline() == "held\n"
        waiter = threading.Thread(target=wait_for_browser_installs, args=(lock,), daemon=True)
        waiter.start()
        waiter.join(1)
        assert waiter.is_alive(), "returned while the installs held the lock"
        installs.communicate("done\n", timeout=30)
        waiter.join(30)
        assert not waiter.is_alive(), "still waiting after the installs ended"
    finally:
        installs.kill()
        installs.wait()


@pytest.fixture(scope="module")
def finetuned(tmp_path_factory):
    """A classifier fine-tuned with `albert-tf finetune` on labels négatif/positif: its run directory."""
    root = tmp_path_factory.mktemp("web_finetuned")
    import keras

    # Seeded: the start must not depend on which tests this process ran before (one start fell short of
    # assert_spread's 0.1 by 0.004).
    keras.utils.set_random_seed(0)
    AlbertBackbone(tiny_config(vocab_size=VOCAB_SIZE)).save_pretrained(str(root / "pretrained" / "final"))
    tokenizer().save(str(root / "pretrained" / "tokenizer"))
    write_synthetic_reviews(root, LABELS)
    run_cli("finetune", "--task", "classification", "--model", "pretrained/final", "--train", "train.csv",
            "--eval", "eval.csv", "--out", "run", "--max-seq-length", "32", "--batch-size", "8", "--epochs", "4",
            "--learning-rate", "3e-3", "--dropout", "0", "--seed", "0", cwd=root)
    return root / "run"


def serve(directory):
    """`python -m http.server` on 127.0.0.1, a free port: (process, base URL)."""
    process = start_program([sys.executable, "-u", "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory",
                             str(directory)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = process.stdout.readline()
    match = re.search(r"port (\d+)", line)
    if not match:
        process.kill()
        raise AssertionError(f"http.server did not start: {line!r}")
    return process, f"http://127.0.0.1:{match.group(1)}/"


def broken_sites(root, site):
    """Sites with a part missing or wrong, sharing the good one's files through links."""
    def page(name, links):
        (root / name).mkdir()
        for f in ("index.html", "classify.js"):
            shutil.copy(site / f, root / name / f)
        for link, target in links.items():
            (root / name / link).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(target, root / name / link)

    page("no_mediapipe", {"model": site / "model"})  # what the export writes without the npm package
    page("no_wasm", {"model": site / "model", "mediapipe/text_bundle.mjs": site / "mediapipe" / "text_bundle.mjs"})
    page("not_classifier", {"mediapipe": site / "mediapipe", "model/model.tflite": site / "model" / "spiece.model"})


def assert_shows(bars, expected, text):
    assert [b["label"] for b in bars] == LABELS, text
    assert max(abs(float(b["shown"]) - p) for b, p in zip(bars, expected["probabilities"])) <= 1e-4, text
    (top,) = [b["label"] for b in bars if b["top"]]
    assert top == expected["label"], text


@pytest.mark.slow
@pytest.mark.timeout(300)  # may wait for `.ci/run`'s Chromium and npm installs (tests/README.md)
def test_the_page_in_headless_chromium_shows_predicts_probabilities(finetuned, tmp_path):
    require_browser()
    root = tmp_path / "www"
    run_cli("export", "--model", str(finetuned), "--format", "web", "--out", str(root / "site"),
            "--mediapipe", str(PACKAGE))
    site = root / "site"
    broken_sites(root, site)
    examples = re.findall(r'<button class="example" type="button" disabled>(.*?)</button>',
                          (site / "index.html").read_text(encoding="utf-8"))
    (tmp_path / "lines.txt").write_text("".join(s + "\n" for s in SENTENCES), encoding="utf-8")
    texts = SENTENCES + examples
    predicted = dict(zip(texts, strict_json_lines(
        run_cli("predict", "--model", str(finetuned), input="".join(t + "\n" for t in texts)).stdout)))
    assert_spread([predicted[s]["probabilities"][0] for s in SENTENCES], SENTENCES)
    # A multilabel model's page, in the same browser: independent bars, each with its threshold marked.
    multilabel = multilabel_fixtures.finetuned()[0]
    run_cli("export", "--model", multilabel, "--format", "web", "--out", str(root / "multilabel"),
            "--mediapipe", str(PACKAGE), "--max-length", "48")
    tagged = strict_json_lines(run_cli("predict", "--model", multilabel,
                                       input="".join(t + "\n" for t in MULTILABEL_TEXTS)).stdout)

    server, url = serve(root)
    try:
        job = {"chromium": CHROMIUM, "userDataDir": str(tmp_path / "profile"), "visits": [
            {"url": url + "site/", "sentences": SENTENCES, "file": str(tmp_path / "lines.txt"),
             "screenshot": str(tmp_path / "web_page.png")},
            {"url": url + "no_mediapipe/"}, {"url": url + "no_wasm/"}, {"url": url + "not_classifier/"},
            {"url": (site / "index.html").as_uri()},
            {"url": url + "multilabel/", "sentences": MULTILABEL_TEXTS},
        ]}
        done = subprocess.run(["node", str(BROWSER / "drive_page.mjs")], input=json.dumps(job), capture_output=True,
                              text=True, timeout=600, cwd=BROWSER)
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert done.returncode == 0, done.stderr[-4000:]
    page, no_mediapipe, no_wasm, not_classifier, from_file, multilabel_page = json.loads(done.stdout)

    assert page["error"] is None and page["charset"] == "UTF-8", page
    assert page["labels"] == ", ".join(LABELS)
    for typed in page["typed"]:
        assert_shows(typed["bars"], predicted[typed["text"]], typed["text"])
    # The examples written in the page: read as UTF-8, they are the sentences predict reads.
    assert [e["text"] for e in page["examples"]] == examples
    for example in page["examples"]:
        assert_shows(example["bars"], predicted[example["text"]], example["text"])
    header, *rows = page["table"]
    assert header == ["text", *LABELS, "label"] and [row[0] for row in rows] == SENTENCES
    for text, *shown, label in rows:
        assert max(abs(float(s) - p) for s, p in zip(shown, predicted[text]["probabilities"])) <= 1e-4, text
        assert label == predicted[text]["label"], text

    thresholds = json.loads((root / "multilabel" / "model" / "export.json").read_text())["thresholds"]
    assert multilabel_page["error"] is None, multilabel_page
    for typed, expected in zip(multilabel_page["typed"], tagged):
        bars = typed["bars"]
        assert [b["label"] for b in bars] == list(expected["probabilities"]) and not any(b["top"] for b in bars)
        assert max(abs(float(b["shown"]) - expected["probabilities"][b["label"]]) for b in bars) <= 1e-4
        assert [float(b["threshold"]) for b in bars] == pytest.approx(thresholds, abs=1e-9)
        assert [b["label"] for b in bars if b["over"]] == expected["labels"], typed["text"]

    for broken in (no_mediapipe, no_wasm):
        assert f"npm install @mediapipe/tasks-text@{web_site.MEDIAPIPE_VERSION}" in (broken["error"] or ""), broken
    assert "is not a text classifier" in (not_classifier["error"] or ""), not_classifier
    assert "python -m http.server" in (from_file["error"] or ""), from_file

    from PIL import Image

    shot = np.asarray(Image.open(tmp_path / "web_page.png").convert("RGB"))
    print(f"screenshot: {tmp_path / 'web_page.png'}")
    # Not blank: text and bars, the top label's bar in its own colour (#d9822b).
    assert len(np.unique(shot.reshape(-1, 3), axis=0)) > 50
    assert (np.abs(shot.astype(int) - (0xd9, 0x82, 0x2b)).sum(-1) == 0).sum() > 500
