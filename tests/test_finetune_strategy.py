"""`finetune --strategy`: fixed-shape batches, mirrored runs equal to one device, and the flag errors.

The CLI runs are fresh processes: --logical-cpus splits the CPU, which
TensorFlow allows once per process, before it initializes.
"""

import csv

import numpy as np
import pytest

from albert_tf import AlbertBackbone
from albert_tf.models import AlbertTagger
from albert_tf.tasks import load_run, predict_examples
from cli_helpers import run_cli
from data_fixtures import VOCAB_SIZE, small_tokenizer
from helpers import tiny_config
from input_pipeline import features, movie_reviews
from input_pipeline.finetuning import make_dataset

MAX_SEQ_LENGTH = 16


def examples(lengths):
    rng = np.random.default_rng(0)
    return [{features.TOKEN_IDS: rng.integers(5, 100, n).astype("int32"),
             features.SEGMENT_IDS: np.zeros(n, "int32"), features.PADDING_MASK: np.ones(n, "int32")}
            for n in lengths]


def test_fixed_shape_batches_are_static_and_drop_or_pad_the_remainder():
    inputs, labels = examples([3, 9, 5, 16, 4, 7, 2]), [0, 1, 0, 1, 0, 1, 0]
    train = make_dataset(inputs, labels, batch_size=3, shuffle=True, pad_to=MAX_SEQ_LENGTH, remainder="drop")
    assert train.element_spec[0][features.TOKEN_IDS].shape == (3, MAX_SEQ_LENGTH)
    assert train.element_spec[1].shape == (3,)
    assert len(list(train)) == 2  # 7 examples: two full batches, the partial third dropped
    evaluation = make_dataset(inputs, batch_size=3, pad_to=MAX_SEQ_LENGTH, remainder="pad")
    assert evaluation.element_spec[features.TOKEN_IDS].shape == (3, MAX_SEQ_LENGTH)
    batches = list(evaluation)
    # Every example is in a batch; the last batch is filled with all-padding rows.
    assert len(batches) == 3 and batches[-1][features.PADDING_MASK].numpy()[1:].sum() == 0
    assert batches[-1][features.TOKEN_IDS].numpy()[0, :2].tolist() == inputs[-1][features.TOKEN_IDS].tolist()
    with pytest.raises(ValueError, match="needs `pad_to`"):
        make_dataset(inputs, batch_size=3, remainder="pad")


def test_fixed_shape_prediction_scores_every_example_as_per_batch_padding_does():
    inputs = examples([3, 9, 5, 16, 4, 7, 2])
    model = AlbertTagger(AlbertBackbone(tiny_config(vocab_size=120)), 3)
    padded = predict_examples(model, inputs, batch_size=3)
    fixed = predict_examples(model, inputs, batch_size=3, pad_to=MAX_SEQ_LENGTH)
    assert len(fixed) == len(inputs)
    for one, other, x in zip(padded, fixed, inputs):
        assert one["logits"].shape == other["logits"].shape == (len(x[features.TOKEN_IDS]), 3)
        np.testing.assert_allclose(one["logits"], other["logits"], atol=1e-5)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A dropout-free tiny model (so runs are deterministic) and 29 training / 16 evaluation rows."""
    root = tmp_path_factory.mktemp("strategy")
    config = tiny_config(vocab_size=VOCAB_SIZE, hidden_dropout=0.0, attention_dropout=0.0)
    AlbertBackbone(config).save_pretrained(str(root / "model" / "final"))
    small_tokenizer().save(str(root / "model" / "tokenizer"))
    everything = movie_reviews.rotten_tomatoes_sentences()
    sentences = [everything[i] for i in np.random.default_rng(0).permutation(len(everything))[:45]]
    for name, rows in (("train.csv", sentences[:29]), ("eval.csv", sentences[29:])):
        with open(root / name, "w", newline="", encoding="utf-8") as f:
            csv.writer(f).writerows([("text", "label")] + [(t, "pos" if y else "neg") for t, y in rows])
    return root


def finetune(data, out, *flags, expect_rc=0):
    return run_cli("finetune", "--task", "classification", "--model", "model/final", "--train", "train.csv",
                   "--eval", "eval.csv", "--out", out, "--batch-size", "8", "--epochs", "2", "--max-seq-length",
                   "64", "--truncate", "--learning-rate", "1e-2", "--dropout", "0", *flags, cwd=data,
                   expect_rc=expect_rc)


@pytest.mark.slow
def test_mirrored_finetune_on_two_logical_cpus_matches_one_device_then_predicts(data):
    mirrored = finetune(data, "mirrored", "--strategy", "mirrored", "--logical-cpus", "2")
    assert "on 2 replicas (mirrored)" in mirrored.stdout and "fixed shapes: batches of (8, 64)" in mirrored.stdout
    # 29 examples in batches of 8: 3 steps an epoch, the partial fourth batch dropped.
    assert "3 steps" in mirrored.stdout
    finetune(data, "one", "--fixed-shapes")
    _, one, _, one_run = load_run(str(data / "one"))
    _, two, _, two_run = load_run(str(data / "mirrored"))
    assert two_run["config"]["fixed_shapes"] is True
    start = AlbertBackbone.from_pretrained(str(data / "model" / "final"))
    # Two epochs moved the weights: equality is not two runs that did nothing.
    assert max(float(np.abs(a.numpy() - b.numpy()).max()) for a, b in zip(one.backbone.weights, start.weights)) > 1e-3
    for a, b in zip(one.trainable_variables, two.trainable_variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-5, err_msg=a.path)
    # The same 16 evaluation examples were scored under both: the last batch of 64 was mostly padding rows.
    assert two_run["data"]["eval"][0].startswith("16 examples")
    assert [r["accuracy"] for r in one_run["history"]] == [r["accuracy"] for r in two_run["history"]]
    done = run_cli("predict", "--model", "mirrored", "--input", "eval.csv", cwd=data)
    assert len(done.stdout.splitlines()) == 16


@pytest.mark.slow
def test_strategy_flag_errors_are_one_line(data):
    def error(*flags):
        done = finetune(data, "never", *flags, expect_rc=2)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
        return lines[0]

    assert "--tpu (none: this machine): No TPU answers" in error("--strategy", "tpu")
    assert "--tpu local: No TPU answers" in error("--tpu", "local")
    line = error("--tpu", "my-tpu", "--strategy", "mirrored")
    assert "--tpu my-tpu" in line and "--strategy mirrored" in line, line
    line = error("--strategy", "multi_worker")
    assert "--strategy multi_worker" in line and "MultiWorkerMirroredStrategy" in line, line
    assert not (data / "never").exists()
    help_text = " ".join(run_cli("finetune", "--help", cwd=data).stdout.split())
    assert "multi_worker is refused" in help_text and "--fixed-shapes" in help_text
