"""tf.distribute strategies by name, and a CPU splitter for testing them."""

import socket
import urllib.parse

import tensorflow as tf

from albert_tf.strategy_names import STRATEGY_NAMES
from albert_tf.utils.errors import UserError


def get_strategy(name, tpu=None, cluster_resolver=None, tpu_zone=None, gcp_project=None):
    """Returns the `tf.distribute.Strategy` called `name`.

    Args:
        name: one of `STRATEGY_NAMES`:
            "default": the current (by default no-op) strategy.
            "mirrored": `MirroredStrategy` over every local GPU, or over every
                local (logical) CPU when there is no GPU.
            "multi_worker": `MultiWorkerMirroredStrategy`. Without
                `cluster_resolver`, TensorFlow's own `TFConfigClusterResolver`
                reads the cluster from the `TF_CONFIG` environment variable;
                with no `TF_CONFIG` it runs as a single local worker.
            "tpu": connects to and initializes the TPU system, then returns a
                `TPUStrategy`.
        tpu: str or None, passed to `TPUClusterResolver(tpu=...)` for "tpu":
            a TPU name, a `grpc://` address, "local", or None to let the
            resolver find the TPU of a Cloud TPU VM.
        cluster_resolver: optional `tf.distribute.cluster_resolver.
            ClusterResolver` for "multi_worker".
        tpu_zone, gcp_project: str or None, for "tpu": the Cloud zone and
            project of a TPU named from another machine (the original's
            --tpu_zone and --gcp_project); None lets the resolver read them
            from the machine's metadata.

    Returns:
        A `tf.distribute.Strategy`. Build models and optimizers under its
        `scope()`.

    Raises:
        ValueError: for "tpu", when no TPU answers at `tpu` (an unknown name,
            an unreachable address, or "local" on a machine without a TPU).
    """
    if name not in STRATEGY_NAMES:
        raise ValueError(
            f"`name` must be one of {list(STRATEGY_NAMES)}. Received: "
            f"name={name!r}"
        )
    if tpu is not None and name != "tpu":
        raise ValueError(
            f"`tpu` is only used with name='tpu'. Received: name={name!r}, "
            f"tpu={tpu!r}"
        )
    for argument, value in (("tpu_zone", tpu_zone), ("gcp_project", gcp_project)):
        if value is not None and name != "tpu":
            raise ValueError(
                f"`{argument}` is only used with name='tpu'. Received: name={name!r}, {argument}={value!r}"
            )
    if cluster_resolver is not None and name != "multi_worker":
        raise ValueError(
            "`cluster_resolver` is only used with name='multi_worker'. "
            f"Received: name={name!r}, cluster_resolver={cluster_resolver!r}"
        )

    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        devices = tf.config.list_logical_devices("GPU") or (
            tf.config.list_logical_devices("CPU")
        )
        # Named explicitly: MirroredStrategy() alone would use only CPU:0
        # when there is no GPU, ignoring logical CPUs.
        return tf.distribute.MirroredStrategy(
            devices=[device.name for device in devices]
        )
    if name == "multi_worker":
        return tf.distribute.MultiWorkerMirroredStrategy(
            cluster_resolver=cluster_resolver
        )
    return tf.distribute.TPUStrategy(_connect_tpu(tpu, tpu_zone, gcp_project))


def is_chief(strategy):
    """False only on the workers of a multi-worker cluster that are not its chief.

    The chief is the "chief" task when the cluster has one, else worker 0;
    it alone writes a run's outputs.
    """
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or resolver.task_type is None:
        return True
    jobs = resolver.cluster_spec().as_dict()
    if "chief" in jobs:
        return resolver.task_type == "chief"
    return resolver.task_type != "worker" or resolver.task_id == 0


def num_workers(strategy):
    """The processes that run `strategy`'s replicas: the chief and workers of a multi-worker cluster, else 1.

    A TPU's hosts are driven by this one client process, so TPUStrategy counts 1.
    """
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or resolver.task_type is None or isinstance(strategy, tf.distribute.TPUStrategy):
        return 1
    jobs = resolver.cluster_spec().as_dict()
    return max(1, sum(len(jobs.get(job, ())) for job in ("chief", "worker")))


def any_worker(strategy, flag):
    """Whether `flag` is True on any worker of `strategy`'s cluster (`flag` itself on one worker).

    A stop request (SIGTERM) may reach one worker, and every worker must stop
    at the same step: every worker calls this at the same point of its loop,
    and each call is one scalar all-reduce.
    """
    if num_workers(strategy) == 1:
        return flag
    asked = strategy.run(lambda: tf.constant(1.0 if flag else 0.0))
    return bool(strategy.reduce(tf.distribute.ReduceOp.SUM, asked, axis=None) > 0)


# Seconds to wait for a grpc:// TPU address to accept a connection: TensorFlow
# itself waits without end on an address where nothing listens.
TPU_CONNECT_TIMEOUT = 10


def tpu_cluster_resolver(tpu=None, zone=None, project=None, resolver_class=None):
    """The cluster resolver of the TPU `tpu`, in Cloud `zone` and `project` (None: this machine's).

    Args:
        tpu, zone, project: passed to the resolver (see `get_strategy`).
        resolver_class: what builds it; `tf.distribute.cluster_resolver.
            TPUClusterResolver` when None (tests pass a stand-in).

    Returns:
        The resolver, not yet connected.
    """
    resolver_class = resolver_class or tf.distribute.cluster_resolver.TPUClusterResolver
    return resolver_class(tpu=tpu, zone=zone, project=project)


def _connect_tpu(tpu, zone=None, project=None):
    """Resolves, connects to and initializes the TPU system at `tpu`; returns its resolver."""
    where = f"tpu={tpu!r}" if tpu is not None else "tpu=None (this machine's TPU)"
    where += "".join(f", {name}={value!r}" for name, value in (("zone", zone), ("project", project)) if value)
    address = urllib.parse.urlparse(tpu) if tpu and tpu.startswith("grpc://") else None
    if address is not None:
        try:
            socket.create_connection((address.hostname, address.port), timeout=TPU_CONNECT_TIMEOUT).close()
        except (OSError, ValueError) as error:
            raise UserError(f"No TPU answers at {where}: {error}.") from error
    try:
        resolver = tpu_cluster_resolver(tpu, zone, project)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, OSError, tf.errors.OpError) as error:
        # The resolver looks a name up in Cloud TPU's API (URLError when there
        # is none) and "local" fails in ConfigureDistributedTPU without a TPU;
        # the first sentence of TensorFlow's message is the one that says why.
        message = str(getattr(error, "message", error)).strip()
        reason = message.splitlines()[0].split(". ")[0] if message else ""
        raise UserError(f"No TPU answers at {where}: {type(error).__name__}: {reason}") from error
    return resolver


def configure_logical_cpus(num_devices):
    """Splits the first physical CPU into `num_devices` logical CPUs.

    Lets a CPU-only machine run `MirroredStrategy` with several replicas, so
    tests exercise the cross-replica code paths. TensorFlow fixes its devices
    when the runtime first initializes (creating a tensor, listing logical
    devices, ...), so call this at program start.

    Args:
        num_devices: int >= 1, the number of logical CPUs wanted.

    Raises:
        ValueError: `num_devices` is not a positive integer.
        RuntimeError: the runtime is already initialized with a different
            number of logical CPUs.
    """
    if not isinstance(num_devices, int) or num_devices < 1:
        raise UserError(
            "`num_devices` must be a positive integer. Received: "
            f"num_devices={num_devices!r}"
        )
    cpu = tf.config.list_physical_devices("CPU")[0]
    current = tf.config.get_logical_device_configuration(cpu)
    if current is not None and len(current) == num_devices:
        return
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * num_devices
        )
    except RuntimeError as error:
        raise RuntimeError(
            f"Cannot split the CPU into num_devices={num_devices} logical "
            "devices: TensorFlow is already initialized with "
            f"{len(tf.config.list_logical_devices('CPU'))} logical CPU(s). "
            "Call configure_logical_cpus() before any other TensorFlow op, "
            "e.g. in a fresh process."
        ) from error


def skip_optimizer_all_reduce(optimizer):
    """Stops Keras from all-reducing gradients that the caller already all-reduced.

    Patches a private Keras attribute, so it lives here with the other
    distribution code, next to the strategies it is needed for.

    Keras' TF optimizer sums gradients across replicas inside `apply()`,
    after its own (per-replica) clipping. The trainer all-reduces first so it
    can clip by the global norm; a second sum would multiply the gradient by
    the number of replicas, so the optimizer's reduction becomes the identity.
    The Trainer's tests check mirrored and multi-worker runs against one device.
    """
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    if not hasattr(inner, "_all_reduce_sum_gradients"):
        raise ValueError(
            f"{type(inner).__name__} has no `_all_reduce_sum_gradients`: this Keras version "
            "reduces gradients differently; the Trainer cannot control the all-reduce."
        )
    inner._all_reduce_sum_gradients = lambda grads_and_vars: list(grads_and_vars)


def clip_after_all_reduce(optimizer):
    """Makes a Keras optimizer clip the all-reduced gradient, as on one device.

    Keras' TF optimizer clips (`clipnorm`, `global_clipnorm`) each replica's
    gradient inside `apply()` and sums across replicas afterwards, so with
    several replicas it clips each replica's share of the gradient, not the
    gradient the update uses. This sums first, in the clipping hook, and makes
    the later sum the identity (`skip_optimizer_all_reduce`). `model.fit`
    under a strategy then takes the steps one device takes.

    Args:
        optimizer: the Keras optimizer `model.compile` gets, before any step.
    """
    skip_optimizer_all_reduce(optimizer)
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    clip = inner._clip_gradients

    def all_reduce_then_clip(grads):
        context = tf.distribute.get_replica_context()
        if context is not None and context.num_replicas_in_sync > 1:
            present = [index for index, grad in enumerate(grads) if grad is not None]
            reduced = context.all_reduce(tf.distribute.ReduceOp.SUM, [grads[index] for index in present])
            grads = list(grads)
            for index, grad in zip(present, reduced):
                grads[index] = grad
        return clip(grads)

    inner._clip_gradients = all_reduce_then_clip
