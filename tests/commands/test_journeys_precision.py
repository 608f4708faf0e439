"""Each command says which precision and XLA setting it chose, and the choice follows the rule on this machine.

The rule (albert_tf.precision): mixed_bfloat16 without XLA on a CPU with
bfloat16 units for H >= 512, float32 otherwise. The expectation here reads
/proc/cpuinfo with its own parser, and a model of H 512 (one layer) runs the
bfloat16 branch wherever the CPU has the units.
"""

import json
import re
from pathlib import Path

import numpy as np
import pytest

from albert_tf.precision import onednn_enabled
from cli_helpers import run_cli
from input_pipeline import movie_reviews
from journey_fixtures import STDIN_TEXTS, write_sentences_corpus, write_sst2

pytestmark = pytest.mark.slow

WIDE_MODEL = ["--embedding-size", "32", "--hidden-size", "512", "--num-layers", "1", "--num-heads", "8",
              "--intermediate-size", "512"]
CHOICE = re.compile(r"Precision: (\w+) \((.*?)\); XLA: (\w+)")


def has_bf16_units():
    """Whether /proc/cpuinfo lists avx512_bf16 or amx_bf16 on a flags line."""
    path = Path("/proc/cpuinfo")
    text = path.read_text() if path.exists() else ""
    words = {word for line in text.splitlines() if line.startswith("flags") for word in line.split()}
    return bool(words & {"avx512_bf16", "amx_bf16"})


def expected(hidden_size, xla_default):
    """(precision, XLA) that "auto" gives on this machine for a model of `hidden_size`."""
    if has_bf16_units() and hidden_size >= 512:
        return "mixed_bfloat16", "none"
    return "float32", xla_default


def chosen(output):
    """(precision, XLA) of the one "Precision: ..." line in `output`."""
    found = CHOICE.findall(output)
    assert len(found) == 1, output[-3000:]
    return found[0][0], found[0][2]


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    """A tour directory with an H 512 model pretrained for 2 steps under "auto", and the pretrain output."""
    root = tmp_path_factory.mktemp("precision")
    write_sentences_corpus(root / "corpus", movie_reviews.imdb_documents("pretrain", limit=200))
    sentences = movie_reviews.rotten_tomatoes_sentences()[:64]
    write_sst2(str(root / "SST-2" / "train.tsv"), sentences[:48])
    write_sst2(str(root / "SST-2" / "dev.tsv"), sentences[48:])
    run_cli("train-tokenizer", "--input", "corpus/", "--vocab-size", "400", "--out", "tok/", cwd=root)
    run_cli("create-data", "--input", "corpus/", "--tokenizer", "tok/", "--out", "data/",
            "--max-seq-length", "64", "--dupe-factor", "1", cwd=root)
    done = run_cli("pretrain", *WIDE_MODEL, "--data", "data/", "--out", "runs/wide", "--batch-size", "4",
                   "--steps", "2", cwd=root)
    return root, done.stdout


def test_pretrain_prints_and_records_its_choice(wide):
    root, stdout = wide
    assert chosen(stdout) == expected(512, "whole")
    run = json.loads((root / "runs" / "wide" / "training_config.json").read_text())
    assert run["trainer"]["mixed_precision"] == "auto"
    assert (run["resolved"]["mixed_precision"], run["resolved"]["compile_step"]) == expected(512, "whole")
    # The saved model is float32 whatever trained it: the loading run chooses.
    saved = json.loads((root / "runs" / "wide" / "final" / "albert_tf.json").read_text())
    assert saved["config"]["backbone"]["config"]["dtype"]["config"]["name"] == "float32"


def test_explicit_float32_gives_float32(wide):
    root, _ = wide
    done = run_cli("pretrain", *WIDE_MODEL, "--data", "data/", "--out", "runs/wide32", "--batch-size", "4",
                   "--steps", "1", "--mixed-precision", "float32", cwd=root)
    assert chosen(done.stdout) == ("float32", "whole")
    assert "(requested)" in done.stdout


def test_finetune_then_predict_and_export_print_and_keep_their_choice(wide):
    root, _ = wide
    done = run_cli("finetune", "--task", "sst2", "--model", "runs/wide/final", "--train", "SST-2/train.tsv",
                   "--eval", "SST-2/dev.tsv", "--out", "runs/sst2", "--batch-size", "16", "--epochs", "1",
                   "--max-seq-length", "64", "--truncate", cwd=root)
    assert chosen(done.stdout) == expected(512, "none")
    run = json.loads((root / "runs" / "sst2" / "finetune.json").read_text())
    assert run["config"]["mixed_precision"] == expected(512, "none")[0]
    saved = json.loads((root / "runs" / "sst2" / "best" / "albert_tf.json").read_text())
    assert saved["config"]["backbone"]["config"]["dtype"]["config"]["name"] == "float32"

    texts = "\n".join(STDIN_TEXTS) + "\n"
    auto = run_cli("predict", "--model", "runs/sst2", cwd=root, input=texts)
    # float32 predictions compile their forward pass where TensorFlow runs Eigen, not oneDNN (AVX2-only CPUs).
    float32_compile = "none" if onednn_enabled() else "forward"
    assert chosen(auto.stderr) == expected(512, float32_compile)
    weights = "frozen" if chosen(auto.stderr)[1] == "none" else "variables, compiled by XLA per shape bucket"
    assert f"; weights: {weights}" in auto.stderr
    float32 = run_cli("predict", "--model", "runs/sst2", "--mixed-precision", "float32", cwd=root, input=texts)
    assert chosen(float32.stderr) == ("float32", float32_compile)
    rows = [[json.loads(line) for line in done.stdout.splitlines()] for done in (auto, float32)]
    assert [r.get("label") for r in rows[0]] == [r.get("label") for r in rows[1]]
    for a, b in zip(*rows):
        if "probabilities" in a:
            np.testing.assert_allclose(a["probabilities"], b["probabilities"], atol=0.02)

    # The export follows the same rule (weights frozen in mixed_bfloat16), and names it the same.
    done = run_cli("export", "--model", "runs/sst2/best", "--format", "saved_model", "--out", "exported", cwd=root)
    exported = expected(512, "none")[0]
    assert f"Precision: {exported} (auto: " in done.stdout
    recorded = json.loads((root / "exported" / "1" / "assets.extra" / "albert_tf_export.json").read_text())
    assert recorded["precision"] == exported


def test_demo_prints_its_choice(wide):
    root, _ = wide
    # The demo's model is narrow (float32 on any CPU) and its step compiles forward.
    done = run_cli("demo", "--out", "runs/demo", "--steps", "2", "--vocab-size", "2000", "--hidden-size", "64",
                   "--intermediate-size", "256", "--tokenizer-documents", "1500", "--documents", "300",
                   "--heldout-documents", "60", "--eval-examples", "40", "--baseline-batches", "2", cwd=root)
    assert chosen(done.stdout) == ("float32", "forward")
    assert "auto: " in done.stdout
