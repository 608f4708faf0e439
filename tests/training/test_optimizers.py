import importlib.util
import json
import os
import pathlib
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from albert_tf.accumulation import GradientAccumulator
from albert_tf.optimizers import AdamW, Lamb
from albert_tf.schedules import WarmupLinearDecay
from cli_helpers import run_program, snippet_command

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
NUM_STEPS = 6
EXCLUDE = ("LayerNorm", "layer_norm", "bias")


def make_problem():
    """Initial weights and per-step gradients, keyed by variable path."""
    rng = np.random.default_rng(0)
    weights = {
        "encoder/layer_norm/gamma": 1.0 + 0.1 * rng.standard_normal(4),
        "cls/LayerNorm/beta": 0.1 * rng.standard_normal(4),
        "encoder/dense/bias": 0.1 * rng.standard_normal(4),
        "encoder/dense/kernel": rng.standard_normal((3, 4)),
        # ||w|| == 0 on the first step: trust ratio falls back to 1.
        "encoder/zero_dense/kernel": np.zeros((3, 4)),
    }
    grads = [
        {path: rng.standard_normal(w.shape) for path, w in weights.items()}
        for _ in range(NUM_STEPS)
    ]
    return weights, grads


def reference_lamb(weights, grads, learning_rates, clip_norm=None, rate_factors=None):
    """ALBERT's lamb_optimizer.py, step by step, in float64 NumPy.

    `rate_factors` ({path: factor}, not in the original) multiplies the rate of those paths.
    """
    rate_factors = rate_factors or {}
    beta_1, beta_2, epsilon, decay = 0.9, 0.999, 1e-6, 0.01
    weights = {path: w.copy() for path, w in weights.items()}
    m = {path: np.zeros_like(w) for path, w in weights.items()}
    v = {path: np.zeros_like(w) for path, w in weights.items()}
    for step_grads, lr in zip(grads, learning_rates):
        if clip_norm is not None:
            norm = np.sqrt(sum(np.sum(g**2) for g in step_grads.values()))
            step_grads = {
                p: g * clip_norm / max(norm, clip_norm) for p, g in step_grads.items()
            }
        for path, g in step_grads.items():
            w = weights[path]
            excluded = any(name in path for name in EXCLUDE)
            m[path] = beta_1 * m[path] + (1 - beta_1) * g
            v[path] = beta_2 * v[path] + (1 - beta_2) * g**2
            update = m[path] / (np.sqrt(v[path]) + epsilon)
            ratio = 1.0
            if not excluded:
                update = update + decay * w
                w_norm, u_norm = np.linalg.norm(w), np.linalg.norm(update)
                if w_norm > 0 and u_norm > 0:
                    ratio = w_norm / u_norm
            weights[path] = w - lr * rate_factors.get(path, 1.0) * ratio * update
    return weights


def make_variables(weights):
    variables = []
    for path, value in weights.items():
        *scopes, name = path.split("/")
        scope_stack = [keras.name_scope(scope) for scope in scopes]
        for scope in scope_stack:
            scope.__enter__()
        variables.append(keras.Variable(value.astype("float32"), name=name))
        for scope in reversed(scope_stack):
            scope.__exit__(None, None, None)
    return variables


def run_optimizer(optimizer, weights, grads, before_build=None):
    """The weights after the steps; `before_build(optimizer, variables)`, if given, runs before the build."""
    variables = make_variables(weights)
    assert [v.path for v in variables] == list(weights)
    if before_build is not None:
        before_build(optimizer, variables)
    optimizer.build(variables)

    @tf.function
    def train_step(step_grads):
        optimizer.apply(step_grads, variables)

    for step_grads in grads:
        train_step([tf.constant(g, "float32") for g in step_grads.values()])
    return {v.path: v.numpy() for v in variables}


def assert_weights_close(actual, expected, atol=1e-6):
    for path, value in expected.items():
        np.testing.assert_allclose(actual[path], value, atol=atol, err_msg=path)


@pytest.mark.parametrize("use_schedule", [False, True])
@pytest.mark.parametrize("clip_norm", [None, 1.0])
def test_lamb_matches_original_update_rule(use_schedule, clip_norm):
    weights, grads = make_problem()
    if use_schedule:
        learning_rate = WarmupLinearDecay(0.05, warmup_steps=2, total_steps=8)
        # Written out from the original's formula: warmup, then decay from 0.
        learning_rates = [0.0, 0.025] + [0.05 * (8 - s) / 8 for s in range(2, 6)]
    else:
        learning_rate = 0.01
        learning_rates = [0.01] * NUM_STEPS
    optimizer = Lamb(learning_rate=learning_rate, global_clipnorm=clip_norm)
    actual = run_optimizer(optimizer, weights, grads)
    expected = reference_lamb(weights, grads, learning_rates, clip_norm)
    assert_weights_close(actual, expected)


@pytest.mark.parametrize("optimizer_class", [Lamb, AdamW])
# 0.1 clips every step: the clipping norm must be the dense one too.
@pytest.mark.parametrize("global_clipnorm", [None, 0.1])
def test_sparse_embedding_gradient_matches_dense(optimizer_class, global_clipnorm):
    rng = np.random.default_rng(2)
    table = rng.standard_normal((10, 4)).astype("float32")
    embedding = keras.layers.Embedding(10, 4, name="word_embeddings")
    embedding.build(None)
    embedding.embeddings.assign(table)
    dense_table = keras.Variable(table, name="dense_table")
    sparse_optimizer = optimizer_class(learning_rate=0.01, global_clipnorm=global_clipnorm)
    dense_optimizer = optimizer_class(learning_rate=0.01, global_clipnorm=global_clipnorm)

    @tf.function
    def train_step():
        with tf.GradientTape() as tape:
            # Token 2 repeats: its rows must be summed before squaring.
            outputs = embedding(tf.constant([1, 2, 2]))
            loss = tf.reduce_sum(outputs * tf.range(4.0))
        (gradient,) = tape.gradient(loss, embedding.trainable_variables)
        sparse_optimizer.apply([gradient], [embedding.embeddings])
        dense_optimizer.apply([tf.convert_to_tensor(gradient)], [dense_table])
        return isinstance(gradient, tf.IndexedSlices)

    for _ in range(3):
        assert train_step()
    np.testing.assert_allclose(
        embedding.embeddings.numpy(), dense_table.numpy(), atol=1e-7
    )


def test_keras_lamb_differs_from_original():
    weights, grads = make_problem()
    actual = run_optimizer(keras.optimizers.Lamb(learning_rate=0.01), weights, grads)
    expected = reference_lamb(weights, grads, [0.01] * NUM_STEPS)
    max_difference = max(
        np.max(np.abs(actual[path] - expected[path])) for path in expected
    )
    assert max_difference > 1e-3


def test_lamb_under_loss_scale_optimizer_matches_plain_lamb():
    weights, grads = make_problem()
    scale = 1024.0
    scaled_grads = [{p: g * scale for p, g in step.items()} for step in grads]
    wrapped = keras.optimizers.LossScaleOptimizer(
        Lamb(learning_rate=0.01), initial_scale=scale
    )
    actual = run_optimizer(wrapped, weights, scaled_grads)
    expected = run_optimizer(Lamb(learning_rate=0.01), weights, grads)
    assert_weights_close(actual, expected)


def test_lamb_learning_rate_multipliers_scale_the_matching_variables_steps():
    weights, grads = make_problem()
    learning_rate = WarmupLinearDecay(0.05, warmup_steps=2, total_steps=8)
    learning_rates = [0.0, 0.025] + [0.05 * (8 - s) / 8 for s in range(2, 6)]
    # First matching pattern wins: "dense/kernel$" before the broader "kernel".
    multipliers = {"encoder/dense/kernel$": 0.5, "kernel": 3.0, "layer_norm/gamma": 0.0}
    optimizer = Lamb(learning_rate=learning_rate, learning_rate_multipliers=multipliers)
    actual = run_optimizer(optimizer, weights, grads)
    factors = {"encoder/dense/kernel": 0.5, "encoder/zero_dense/kernel": 3.0, "encoder/layer_norm/gamma": 0.0}
    assert_weights_close(actual, reference_lamb(weights, grads, learning_rates, rate_factors=factors))
    np.testing.assert_array_equal(actual["encoder/layer_norm/gamma"], weights["encoder/layer_norm/gamma"].astype("float32"))


def test_adamw_learning_rate_multipliers_scale_the_adam_step():
    weights, grads = make_problem()
    scaled = run_optimizer(
        AdamW(learning_rate=0.02, weight_decay=0.0, learning_rate_multipliers={"dense/kernel$": 0.5}), weights, grads
    )
    full = run_optimizer(AdamW(learning_rate=0.02, weight_decay=0.0), weights, grads)
    half = run_optimizer(AdamW(learning_rate=0.01, weight_decay=0.0), weights, grads)
    for path in weights:
        expected = half if path.endswith("dense/kernel") else full
        np.testing.assert_allclose(scaled[path], expected[path], atol=1e-7, err_msg=path)
    assert not np.allclose(half["encoder/dense/kernel"], full["encoder/dense/kernel"])


@pytest.mark.parametrize("optimizer_class", [Lamb, AdamW])
def test_learning_rate_multipliers_reject_negative_or_non_numeric_factors(optimizer_class):
    for factor in (-0.5, "0.5", None):
        with pytest.raises(ValueError, match="learning_rate_multipliers"):
            optimizer_class(learning_rate_multipliers={"kernel": factor})


def test_lamb_config_round_trip():
    optimizer = Lamb(
        learning_rate=WarmupLinearDecay(0.00176, 3125, 125_000),
        weight_decay_rate=0.02,
        exclude_from_weight_decay=["bias"],
        exclude_from_layer_adaptation=["LayerNorm"],
        learning_rate_multipliers={"word_embeddings/embeddings$": 0.5},
        global_clipnorm=1.0,
    )
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert isinstance(restored, Lamb)
    assert restored.get_config() == optimizer.get_config()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(weight_decay=0.01), "weight_decay=0.01"),
        (dict(weight_decay_rate=-0.1), "weight_decay_rate=-0.1"),
        (dict(exclude_from_weight_decay="bias"), "exclude_from_weight_decay='bias'"),
    ],
)
def test_lamb_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Lamb(**kwargs)


def test_adamw_does_not_decay_layer_norm_or_bias():
    weights, grads = make_problem()
    # Zero gradients keep Adam's own step at 0, isolating the decay.
    zero_grads = [{p: np.zeros_like(g) for p, g in step.items()} for step in grads]
    optimizer = AdamW(learning_rate=0.1, weight_decay=0.01)
    actual = run_optimizer(optimizer, weights, zero_grads)
    for path, initial in weights.items():
        decayed = not any(name in path for name in EXCLUDE)
        factor = (1 - 0.1 * 0.01) ** NUM_STEPS if decayed else 1.0
        np.testing.assert_allclose(
            actual[path], initial * factor, atol=1e-6, err_msg=path
        )


@pytest.mark.parametrize("learning_rate", [0.01, WarmupLinearDecay(0.05, warmup_steps=2, total_steps=8)])
def test_adamw_steps_are_keras_adamw_bit_for_bit(learning_rate):
    # The step's shared terms are made once per step, not once per variable: the same arithmetic as Keras'
    # AdamW, which decays every variable but the excluded ones, then takes the Adam step.
    weights, grads = make_problem()
    reference = run_optimizer(
        keras.optimizers.AdamW(learning_rate=learning_rate, weight_decay=0.01, epsilon=1e-6, global_clipnorm=1.0),
        weights, grads,
        before_build=lambda optimizer, variables: optimizer.exclude_from_weight_decay(
            var_list=[v for v in variables if any(name in v.path for name in EXCLUDE)]),
    )
    actual = run_optimizer(AdamW(learning_rate=learning_rate, weight_decay=0.01, global_clipnorm=1.0), weights, grads)
    for path, value in reference.items():
        np.testing.assert_array_equal(actual[path], value, err_msg=path)
    assert not np.array_equal(actual["encoder/dense/kernel"], weights["encoder/dense/kernel"].astype("float32"))


def test_adamw_config_round_trip():
    optimizer = AdamW(learning_rate=3e-5, exclude_from_weight_decay=["LayerNorm"],
                      learning_rate_multipliers={"word_embeddings/embeddings$": 0.5})
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert isinstance(restored, AdamW)
    assert restored.get_config() == optimizer.get_config()


def test_accumulated_micro_batches_equal_full_batch_gradient():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    rng = np.random.default_rng(1)
    x = rng.standard_normal((8, 3)).astype("float32")
    y = rng.standard_normal((8, 2)).astype("float32")

    def gradients(x, y):
        with tf.GradientTape() as tape:
            loss = keras.losses.mean_squared_error(y, model(x))
            loss = tf.reduce_mean(loss)
        return tape.gradient(loss, model.trainable_variables)

    accumulator = GradientAccumulator(model.trainable_variables)
    num_micro_batches = 4
    for x_micro, y_micro in zip(np.split(x, 4), np.split(y, 4)):
        accumulator.accumulate(gradients(x_micro, y_micro))
    averaged = accumulator.gradients(num_micro_batches)
    for accumulated, full in zip(averaged, gradients(x, y)):
        np.testing.assert_allclose(accumulated, full, atol=1e-6)

    accumulator.reset()
    assert all(np.all(v.numpy() == 0) for v in accumulator.variables)
    with pytest.raises(ValueError, match="num_micro_batches=0"):
        accumulator.gradients(0)
    with pytest.raises(ValueError, match="len\\(gradients\\)=1"):
        accumulator.accumulate([None])


# Scripts run in a process of their own: one splits the CPU before TF initializes (forked, as
# tests/snippet_worker.py runs a snippet), the other selects the JAX backend before Keras is imported
# (a fresh Python).
SCRIPT_PRELUDE = """
import json, sys
import numpy as np

def load_problem():
    import keras
    problem = json.load(sys.stdin)
    variables = []
    for path, value in problem["weights"].items():
        scope, sub_scope, name = path.split("/")
        with keras.name_scope(scope), keras.name_scope(sub_scope):
            variables.append(keras.Variable(np.array(value, "float32"), name=name))
    grads = [[np.array(g, "float32") for g in step] for step in problem["grads"]]
    return variables, grads

def dump(variables):
    print(json.dumps({v.path: np.asarray(v).tolist() for v in variables}))
"""

MIRRORED_SCRIPT = SCRIPT_PRELUDE + """
from albert_tf.distribute import configure_logical_cpus, get_strategy
configure_logical_cpus(2)
import tensorflow as tf
from albert_tf.optimizers import Lamb

strategy = get_strategy("mirrored")
assert strategy.num_replicas_in_sync == 2
with strategy.scope():
    variables, grads = load_problem()
    optimizer = Lamb(learning_rate=0.01)
    optimizer.build(variables)

@tf.function
def train_step(step_grads):
    def replica_step():
        # Keras sums gradients across replicas: each brings half.
        optimizer.apply([g / 2 for g in step_grads], variables)
    strategy.run(replica_step)

for step_grads in grads:
    train_step([tf.constant(g) for g in step_grads])
dump(variables)
"""

JAX_SCRIPT = SCRIPT_PRELUDE + """
import os
os.environ["KERAS_BACKEND"] = "jax"
import jax, keras
from albert_tf.optimizers import Lamb

assert keras.backend.backend() == "jax"
variables, grads = load_problem()
optimizer = Lamb(learning_rate=0.01, global_clipnorm=1.0)
optimizer.build(variables)
apply = jax.jit(optimizer.stateless_apply)
trainable = [v.value for v in variables]
optimizer_state = [v.value for v in optimizer.variables]
for step_grads in grads:
    trainable, optimizer_state = apply(optimizer_state, step_grads, trainable)
for variable, value in zip(variables, trainable):
    variable.assign(value)
dump(variables)
"""


def run_script(script, weights, grads, fresh=True):
    """Runs `script` on the problem in a fresh Python, or forked where not `fresh`; returns its weights."""
    problem = {
        "weights": {path: w.tolist() for path, w in weights.items()},
        "grads": [[g.tolist() for g in step.values()] for step in grads],
    }
    env = dict(
        os.environ,
        PYTHONPATH=str(REPO_ROOT),
        CUDA_VISIBLE_DEVICES="",
        TF_CPP_MIN_LOG_LEVEL="3",
    )
    command = [sys.executable, "-c", script] if fresh else snippet_command(script)  # `python -c` is never forked
    result = run_program(command, input=json.dumps(problem), env=env, cwd=REPO_ROOT, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    output = json.loads(result.stdout.strip().splitlines()[-1])
    return {path: np.array(value) for path, value in output.items()}


@pytest.mark.slow
def test_lamb_under_mirrored_strategy_matches_original():
    weights, grads = make_problem()
    actual = run_script(MIRRORED_SCRIPT, weights, grads, fresh=False)
    expected = reference_lamb(weights, grads, [0.01] * NUM_STEPS)
    assert_weights_close(actual, expected)


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("jax") is None, reason="JAX is not installed"
)
def test_lamb_on_jax_backend_matches_original():
    weights, grads = make_problem()
    actual = run_script(JAX_SCRIPT, weights, grads)
    expected = reference_lamb(weights, grads, [0.01] * NUM_STEPS, clip_norm=1.0)
    assert_weights_close(actual, expected)
