"""`finetune --strategy`: fixed-shape batches, mirrored and multi-worker runs equal to one device, the flag errors.

The mirrored and multi-worker runs are new processes (tests/cli_helpers.run_cli
starts them so): --logical-cpus splits the CPU, which TensorFlow allows once
per process, before it initializes, and each worker of a multi-worker cluster
is its own process with its own TF_CONFIG. The other runs are in the test process.
"""

import concurrent.futures
import csv
import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from albert_tf import AlbertBackbone
from albert_tf.distribute import clip_after_all_reduce
from albert_tf.models import AlbertClassifier, AlbertTagger
from albert_tf.optimizers import build_optimizer
from albert_tf.recipes import load_run, predict_examples
from albert_tf.recipes.custom_loop import CustomLoop, _replica_rows
from cli_helpers import free_ports, run_cli, user_environment
from data_fixtures import VOCAB_SIZE, small_tokenizer
from helpers import tiny_config
from input_pipeline import features, movie_reviews
from input_pipeline.finetuning import make_dataset

MAX_SEQ_LENGTH = 16
# Distributed runs against the one-process run: both measured 6e-8 apart at most (float32 rounding).
TOLERANCE = 1e-5


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


@pytest.mark.slow
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


def finetune(data, out, *flags, expect_rc=0, env=None):
    return run_cli("finetune", "--task", "classification", "--model", "model/final", "--train", "train.csv",
                   "--eval", "eval.csv", "--out", out, "--batch-size", "8", "--epochs", "2", "--max-seq-length",
                   "64", "--truncate", "--learning-rate", "1e-2", "--dropout", "0", *flags, cwd=data,
                   expect_rc=expect_rc, env=env)


@pytest.fixture(scope="module")
def one_device(data):
    """The one-process run the distributed runs must equal: the same fixed-shape global batches."""
    finetune(data, "one", "--fixed-shapes")
    return load_run(str(data / "one"))


@pytest.mark.slow
def test_mirrored_finetune_on_two_logical_cpus_matches_one_device_then_predicts(data, one_device):
    mirrored = finetune(data, "mirrored", "--strategy", "mirrored", "--logical-cpus", "2")
    assert "on 2 replicas (mirrored)" in mirrored.stdout and "fixed shapes: batches of (8, 64)" in mirrored.stdout
    # 29 examples in batches of 8: 3 steps an epoch, the partial fourth batch dropped.
    assert "3 steps" in mirrored.stdout
    _, one, _, one_run = one_device
    _, two, _, two_run = load_run(str(data / "mirrored"))
    assert two_run["config"]["fixed_shapes"] is True
    start = AlbertBackbone.from_pretrained(str(data / "model" / "final"))
    # Two epochs moved the weights: equality is not two runs that did nothing.
    assert max(float(np.abs(a.numpy() - b.numpy()).max()) for a, b in zip(one.backbone.weights, start.weights)) > 1e-3
    for a, b in zip(one.trainable_variables, two.trainable_variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=TOLERANCE, err_msg=a.path)
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
    line = error("--strategy", "multi_worker", "--no-fixed-shapes")
    assert "`fixed_shapes` must be on" in line, line
    assert not (data / "never").exists()
    help_text = " ".join(run_cli("finetune", "--help", cwd=data).stdout.split())
    assert "TF_CONFIG naming the cluster" in help_text and "--fixed-shapes" in help_text


@pytest.mark.slow
def test_custom_loop_takes_the_steps_fit_takes_on_one_device():
    def model_and_dataset():
        keras.utils.set_random_seed(0)
        model = AlbertClassifier(AlbertBackbone(tiny_config(hidden_dropout=0.0, attention_dropout=0.0)), 2,
                                 dropout=0.0)
        # A learning rate that makes the gradient norm pass 1.0, so clipping is exercised.
        optimizer = build_optimizer("adamw", learning_rate=5e-2, warmup_steps=1, total_steps=3, weight_decay=0.01,
                                    clip_norm=1.0)
        clip_after_all_reduce(optimizer)
        model.compile(optimizer=optimizer, jit_compile=False)
        inputs = examples([3, 9, 5, 16, 4, 7, 2, 11, 6, 8, 12, 1])
        return model, lambda: make_dataset(inputs, [i % 2 for i in range(12)], batch_size=4, shuffle=True,
                                           pad_to=MAX_SEQ_LENGTH, remainder="drop")

    fitted, dataset_fn = model_and_dataset()
    history = fitted.fit(dataset_fn(), epochs=1, verbose=0).history
    looped, dataset_fn = model_and_dataset()
    loop = CustomLoop(looped, tf.distribute.get_strategy(), global_batch_size=4)
    loss, _ = loop.train_epoch(dataset_fn)
    assert int(looped.optimizer.iterations.numpy()) == 3
    assert loss == pytest.approx(history["loss"][-1], abs=1e-5)
    for a, b in zip(fitted.weights, looped.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-5, err_msg=a.path)
    # local_model: the same weights, in a copy evaluated outside any strategy.
    local = loop.local_model()
    for a, b in zip(looped.weights, local.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())



def test_each_worker_takes_its_replicas_rows_of_every_global_batch():
    rows = tf.data.Dataset.range(16).batch(8).map(lambda x: ({"ids": x}, -x))  # two global batches of 8
    # The second of two workers, each with two replicas: rows 4-5 and 6-7 of each global batch.
    context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=4)
    taken = [(x["ids"].numpy().tolist(), y.numpy().tolist()) for x, y in _replica_rows(rows, context, 8)]
    assert taken == [([4, 5], [-4, -5]), ([6, 7], [-6, -7]), ([12, 13], [-12, -13]), ([14, 15], [-14, -15])]


@pytest.mark.slow
def test_multi_worker_finetune_on_two_processes_matches_one_device_then_predicts(data, one_device):
    cluster = {"worker": [f"localhost:{port}" for port in free_ports(2)]}

    def worker(index):
        tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        # Each worker its own --out, as on machines of their own: only the chief's is written.
        return finetune(data, f"multi{index}", "--strategy", "multi_worker", env=user_environment(TF_CONFIG=tf_config))

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        chief, other = pool.map(worker, range(2))
    assert "on 2 replicas (multi_worker)" in chief.stdout and "fixed shapes: batches of (8, 64)" in chief.stdout
    assert "3 steps" in chief.stdout
    assert not (data / "multi1").exists() and not list(data.glob(".multi1*"))

    def epoch_lines(done):  # without their timings
        return [line.split(" (")[0] for line in done.stdout.splitlines() if line.startswith("epoch ")]

    # Every worker scored the same weights alike and picked the same best epoch.
    assert len(epoch_lines(chief)) == 2 and epoch_lines(chief) == epoch_lines(other)
    assert "the chief saved it" in other.stdout
    _, one, _, one_run = one_device
    _, multi, _, multi_run = load_run(str(data / "multi0"))
    assert multi_run["config"]["fixed_shapes"] is True
    for a, b in zip(one.trainable_variables, multi.trainable_variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=TOLERANCE, err_msg=a.path)
    assert [r["accuracy"] for r in one_run["history"]] == [r["accuracy"] for r in multi_run["history"]]
    done = run_cli("predict", "--model", "multi0", "--input", "eval.csv", cwd=data)
    assert len(done.stdout.splitlines()) == 16
