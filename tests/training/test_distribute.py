import json
import os
import pathlib

import pytest
import tensorflow as tf

from albert_tf.distribute import configure_logical_cpus, get_strategy, tpu_cluster_resolver
from cli_helpers import run_program, snippet_command

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_default_is_the_current_strategy():
    assert get_strategy("default") is tf.distribute.get_strategy()


def test_unknown_name_lists_valid_names():
    valid = "'default', 'mirrored', 'multi_worker', 'tpu'"
    with pytest.raises(ValueError, match=f"{valid}.*name='gpu'"):
        get_strategy("gpu")


def test_tpu_argument_only_with_tpu():
    with pytest.raises(ValueError, match="name='mirrored', tpu='my-tpu'"):
        get_strategy("mirrored", tpu="my-tpu")


def test_tpu_connects_and_initializes_before_building_strategy(monkeypatch):
    calls = []
    resolver = object()

    def fake_resolver(tpu, zone, project):
        calls.append(("resolve", tpu, zone, project))
        return resolver

    def record(step):
        return lambda resolver: calls.append((step, resolver))

    monkeypatch.setattr(
        tf.distribute.cluster_resolver, "TPUClusterResolver", fake_resolver
    )
    monkeypatch.setattr(tf.config, "experimental_connect_to_cluster", record("connect"))
    monkeypatch.setattr(tf.tpu.experimental, "initialize_tpu_system", record("init"))
    monkeypatch.setattr(tf.distribute, "TPUStrategy", lambda r: ("strategy", r))

    assert get_strategy("tpu", tpu="my-tpu", tpu_zone="us-central2-b", gcp_project="my-project") == (
        "strategy", resolver)
    assert calls == [
        ("resolve", "my-tpu", "us-central2-b", "my-project"),
        ("connect", resolver),
        ("init", resolver),
    ]


def test_the_tpu_resolver_receives_the_name_zone_and_project():
    class Resolver:
        def __init__(self, **kwargs):
            self.received = kwargs

    resolver = tpu_cluster_resolver("my-tpu", "europe-west4-a", "my-project", resolver_class=Resolver)
    assert resolver.received == {"tpu": "my-tpu", "zone": "europe-west4-a", "project": "my-project"}
    assert tpu_cluster_resolver(resolver_class=Resolver).received == {"tpu": None, "zone": None, "project": None}


def test_zone_and_project_only_with_tpu():
    with pytest.raises(ValueError, match="name='mirrored', tpu_zone='us-central2-b'"):
        get_strategy("mirrored", tpu_zone="us-central2-b")
    with pytest.raises(ValueError, match="name='default', gcp_project='p'"):
        get_strategy("default", gcp_project="p")


def test_configure_logical_cpus_validates_count():
    with pytest.raises(ValueError, match="num_devices=0"):
        configure_logical_cpus(0)


def test_configure_logical_cpus_after_initialization_explains():
    tf.constant(0)  # makes sure the runtime is initialized in this process
    count = len(tf.config.list_logical_devices("CPU"))
    with pytest.raises(RuntimeError, match="already initialized"):
        configure_logical_cpus(count + 1)


STRATEGY_SCRIPT = """
import json
from albert_tf.distribute import configure_logical_cpus, get_strategy, tpu_cluster_resolver
configure_logical_cpus(2)
configure_logical_cpus(2)  # same split again is a no-op, not an error
import tensorflow as tf
from albert_tf.accumulation import GradientAccumulator

mirrored = get_strategy("mirrored")
with mirrored.scope():
    accumulator = GradientAccumulator([tf.Variable(tf.zeros([2]))])

@tf.function
def accumulate_twice():
    def replica_fn():
        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
        gradient = tf.fill([2], tf.cast(replica + 1, tf.float32))
        accumulator.accumulate([gradient])
        accumulator.accumulate([2.0 * gradient])
        return accumulator.gradients(2)[0]
    return mirrored.run(replica_fn)

per_replica = mirrored.experimental_local_results(accumulate_twice())
cross_replica_sum = accumulator.variables[0].numpy()
accumulator.reset()
print(json.dumps({
    "mirrored_replicas": mirrored.num_replicas_in_sync,
    "per_replica_average": [t.numpy().tolist() for t in per_replica],
    "cross_replica_sum": cross_replica_sum.tolist(),
    "after_reset": accumulator.variables[0].numpy().tolist(),
    "multi_worker_replicas": get_strategy("multi_worker").num_replicas_in_sync,
}))
"""


@pytest.mark.slow
def test_strategies_on_two_logical_cpus():
    env = dict(
        os.environ,
        PYTHONPATH=str(REPO_ROOT),
        CUDA_VISIBLE_DEVICES="",
        TF_CPP_MIN_LOG_LEVEL="3",
    )
    env.pop("TF_CONFIG", None)  # multi_worker must fall back to one local worker
    # Forked, as `python -c` would run it: the script splits the CPU before its first op.
    result = run_program(snippet_command(STRATEGY_SCRIPT), env=env, cwd=REPO_ROOT, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["mirrored_replicas"] == 2
    # Each replica sums only its own micro-batches: (r + 2r) / 2.
    assert report["per_replica_average"] == [[1.5, 1.5], [3.0, 3.0]]
    assert report["cross_replica_sum"] == [9.0, 9.0]
    assert report["after_reset"] == [0.0, 0.0]
    assert report["multi_worker_replicas"] == 1
