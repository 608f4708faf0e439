"""`hf://` handles on the command line: finetune (in a fresh process), convert, pretrain --init-from, and the
errors, against the loopback stand-in of the Hub (tests/hub_stand_in.py)."""

import csv
import json
import pathlib
import random
import re
import sys
import time

import pytest

from albert_tf import load_pretrained
from albert_tf.cli import main
from albert_tf.hub import SOURCE_FILE
from cli_helpers import albert_tf_command, run_program, user_environment
from hub_fixtures import ALBERT, PUBLISHED, assert_matches_transformers, hub_env, hub_models, hub_repos, stand_in  # noqa: F401
from hub_stand_in import commit_sha
from input_pipeline import movie_reviews
from journey_fixtures import write_sentences_corpus


def readme_blocks(language):
    """The README's blocks that need the Hub, run here against the stand-in (their marker names this file)."""
    text = (pathlib.Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    marked = re.findall(r"<!-- not run: [^\n]*tests/commands/test_hub_cli.py[^\n]* -->\n```(\w+)\n(.*?)```", text, re.S)
    return [code for lang, code in marked if lang == language]


# A README block, so a fresh process; in the quick loop, test_convert_from_a_pinned_hf_handle_records_it
# and tests/models/test_hub.py guard the handle, the recorded commit and the offline cache in-process.
@pytest.mark.slow
def test_the_readme_fine_tunes_the_published_weights_in_a_fresh_process_then_converts_offline(stand_in, tmp_path):
    (command,) = readme_blocks("bash")
    sentences = movie_reviews.rotten_tomatoes_sentences()
    random.Random(0).shuffle(sentences)  # as the README's tour writes train.csv and dev.csv, smaller
    sentences = sentences[:48]
    for name, rows in (("train.csv", sentences[:32]), ("dev.csv", sentences[32:])):
        with open(tmp_path / name, "w", newline="") as f:
            csv.writer(f).writerows([("text", "label"), *rows])
    env = user_environment(HF_ENDPOINT=stand_in.endpoint, HF_HOME=str(tmp_path / "hf"))
    env["PATH"] = f"{pathlib.Path(sys.executable).parent}:{env['PATH']}"  # the installed albert-tf
    started = time.perf_counter()
    done = run_program(["bash", "-c", command], cwd=tmp_path, env=env, fresh=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    print(f"README's finetune --model hf://{PUBLISHED} in a fresh process: {time.perf_counter() - started:.1f} s")

    source = json.loads((tmp_path / "runs" / "published" / SOURCE_FILE).read_text())
    assert (source["model"], source["repo"], source["commit"]) == (
        f"hf://{PUBLISHED}", PUBLISHED, commit_sha("published"))
    assert any(path.endswith("/model.safetensors") for _, path in stand_in.routes)
    # Then with the Hub gone and HF_HUB_OFFLINE=1 as the variable (read at import): from the cache.
    stand_in.stop()
    env["HF_HUB_OFFLINE"] = "1"
    done = run_program([*albert_tf_command(), "convert", "--from", "hf", "--model", f"hf://{PUBLISHED}",
                        "--out", "converted"], cwd=tmp_path, env=env, fresh=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    assert json.loads((tmp_path / "converted" / SOURCE_FILE).read_text())["commit"] == commit_sha("published")


def test_the_readme_fine_tunes_the_published_weights_in_keras(hub_env, stand_in, hub_models):
    (code,) = readme_blocks("python")
    names = {}
    exec(compile(code, "README.md", "exec"), names)

    # The classifier the block fine-tuned is the stand-in's published model, one step on from it.
    classifier, published = names["classifier"], hub_models["published"]
    assert f"/{PUBLISHED}/resolve/{commit_sha('published')}/model.safetensors" in {p for _, p in stand_in.routes}
    assert classifier.backbone.config.hidden_size == published.config.hidden_size
    assert classifier.backbone.config.vocab_size == published.config.vocab_size
    assert int(classifier.optimizer.iterations.numpy()) == 1
    assert classifier.predict(["a gorgeous, witty film"], verbose=0)["logits"].shape == (1, 2)


def test_convert_from_a_pinned_hf_handle_records_it(hub_env, hub_models, tmp_path):
    assert main(["convert", "--from", "hf", "--model", f"hf://{ALBERT}@v1", "--out", str(tmp_path / "out")]) == 0

    source = json.loads((tmp_path / "out" / SOURCE_FILE).read_text())
    # What identifies the model, and no path of this machine (the cache's names the home directory).
    assert source == {"model": f"hf://{ALBERT}@v1", "hub": "hf", "repo": ALBERT, "revision": "v1",
                      "commit": commit_sha("v1")}
    assert_matches_transformers(load_pretrained(str(tmp_path / "out")), hub_models["v1"])


@pytest.mark.parametrize("spec, words", [
    ("hf://org/missing", "no repository org/missing"),
    ("hf://google-bert/bert-base-uncased", "not an ALBERT repository"),
    (f"hf://{ALBERT}@v9", "has no revision 'v9'"),
    # Refused before any request (tests/models/test_hub.py checks the stand-in's log).
    ("hf://albert/albert base", "'albert/albert base' is not a Hub repository name"),
    ("kaggle://keras/../keras/albert_base_en_uncased", "'..' is not a Kaggle name"),
])
@pytest.mark.parametrize("command", ["finetune", "export", "convert"])
def test_a_bad_handle_is_one_line_and_writes_no_output(command, spec, words, hub_env, tmp_path, capsys):
    out = tmp_path / "out"
    argv = {
        "finetune": ["finetune", "--task", "sst2", "--train", __file__, "--eval", __file__],
        "export": ["export", "--format", "tflite"],
        "convert": ["convert", "--from", "hf"],
    }[command]
    assert main([*argv, "--model", spec, "--out", str(out)]) == 2

    error = capsys.readouterr().err.strip()
    assert words in error and spec in error and len(error.splitlines()) == 1, error
    assert not out.exists()


def pretrain(tmp_path, *extra):
    text = write_sentences_corpus(str(tmp_path / "text"), movie_reviews.imdb_documents("pretrain", limit=40))
    return main(["pretrain", "--init-from", f"hf://{ALBERT}", "--data", text, "--out", str(tmp_path / "run"),
                 "--max-seq-length", "64", "--batch-size", "4", "--steps", "2", "--compile-step", "none", *extra])


def test_pretrain_init_from_a_hf_handle_starts_from_its_weights_and_heads(hub_env, hub_models, tmp_path):
    # Learning rate 0: the final model is the published one, heads included, if the run started from it.
    assert pretrain(tmp_path, "--learning-rate", "0") == 0

    run = tmp_path / "run"
    assert_matches_transformers(load_pretrained(str(run / "final")), hub_models["main"])
    init = json.loads((run / "training_config.json").read_text())["init_from"]
    assert (init["model"], init["commit"]) == (f"hf://{ALBERT}", commit_sha("main"))
    # Rerun: resumes from the run's checkpoint (and its tokenizer and config pass the resume checks).
    assert pretrain(tmp_path, "--learning-rate", "0", "--steps", "3") == 0
    assert_matches_transformers(load_pretrained(str(run / "final")), hub_models["main"])


@pytest.mark.parametrize("extra, words", [
    (["--hidden-size", "128"], "--hidden-size 128: --init-from hf://org/tiny-albert has hidden_size=64"),
    (["--preset", "large"], "not allowed with argument"),
    (["--embedding-init", "ppmi-svd"], "--embedding-init ppmi-svd starts fresh embeddings"),
])
def test_pretrain_init_from_refuses_what_disagrees_with_the_model(extra, words, hub_env, tmp_path, capsys):
    try:
        code = pretrain(tmp_path, *extra)
    except SystemExit as e:  # argparse's own refusal
        code = e.code
    assert code == 2
    error = capsys.readouterr().err.strip()
    assert words in error and len(error.splitlines()) == 1, error
    assert not (tmp_path / "run").exists()


def test_pretrain_init_from_refuses_another_tokenizer(hub_env, tmp_path, capsys):
    from data_fixtures import small_tokenizer

    small_tokenizer().save(str(tmp_path / "tok"))
    assert pretrain(tmp_path, "--tokenizer", str(tmp_path / "tok")) == 2
    error = capsys.readouterr().err.strip()
    assert "differs from the tokenizer of --init-from hf://org/tiny-albert" in error, error
    assert not (tmp_path / "run").exists()
