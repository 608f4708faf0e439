"""`albert-tf export --format web`: the site's files, its errors, and the page in headless Chromium.

The browser test (slow) drives the page with tests/browser/drive_page.mjs: Debian's chromium and the npm
packages of tests/browser/package-lock.json, which `.ci/run browser-deps` installs.
"""

import csv
import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from albert_tf import AlbertBackbone
from albert_tf.export import web_site
from albert_tf.models import AlbertClassifier, AlbertRegressor
from albert_tf.utils.errors import UserError
from cli_helpers import run_cli, start_program
from export_fixtures import VOCAB_SIZE, tokenizer
from helpers import tiny_config
from journey_fixtures import assert_one_line_error, strict_json_lines

REPO = pathlib.Path(__file__).parents[2]
BROWSER = REPO / "tests" / "browser"
PACKAGE = BROWSER / "node_modules" / "@mediapipe" / "tasks-text"
CHROMIUM = "/usr/bin/chromium"
LABELS = ["négatif", "positif"]
# Capitals, accents, full-width letters and spaces, digit-commas: what the tokenizer's
# preprocessing (inside the zipped spiece.model) must give MediaPipe as albert-tf reads it.
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
