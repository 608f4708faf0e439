"""TF-Serving's batching parameters: its text file, what `export` suggests, and the batch sizes tied to them.

The file is TF-Serving's `BatchingParameters` text proto (what
`tensorflow_model_server --enable_batching --batching_parameters_file=F`
reads), e.g.

    max_batch_size { value: 32 }
    batch_timeout_micros { value: 2000 }
    num_batch_threads { value: 2 }
    max_enqueued_batches { value: 64 }
    allowed_batch_sizes: 8
    allowed_batch_sizes: 32
    pad_variable_length_inputs: false

Every number that stands for "how many rows one call may hold" is stated
here, once: TF-Serving's defaults, the suggestion `export` writes beside the
versions, the batch sizes of the warmup records it writes into each version,
and `albert-tf serve`'s own row limit without batching. No TensorFlow here:
`export` and `serve` read them before it loads.
"""

import dataclasses
import os
import re

from albert_tf.utils.errors import UserError


@dataclasses.dataclass(frozen=True)
class BatchingParameters:
    """TF-Serving's BatchingParameters, with its defaults (session_bundle_config.proto)."""

    max_batch_size: int = 1000
    batch_timeout_micros: int = 0
    num_batch_threads: int = dataclasses.field(default_factory=lambda: os.cpu_count() or 1)
    max_enqueued_batches: int = 10
    allowed_batch_sizes: tuple = ()
    pad_variable_length_inputs: bool = False

    def to_text(self):
        """The text proto TF-Serving's --batching_parameters_file reads."""
        lines = [f"{name} {{ value: {getattr(self, name)} }}" for name in _WRAPPED]
        lines += [f"allowed_batch_sizes: {size}" for size in self.allowed_batch_sizes]
        lines.append(f"pad_variable_length_inputs: {str(self.pad_variable_length_inputs).lower()}")
        return "\n".join(lines) + "\n"


# Fields TF-Serving wraps in google.protobuf.Int64Value ("name { value: N }").
_WRAPPED = ("max_batch_size", "batch_timeout_micros", "num_batch_threads", "max_enqueued_batches")
_TOKEN = re.compile(r'\s*(?:#[^\n]*|([A-Za-z_][A-Za-z_0-9]*|-?\d+|[{}:]|"[^"\n]*"))')


def parse_batching_parameters(text, path="--batching-parameters-file"):
    """TF-Serving's batching parameters text -> `BatchingParameters`.

    Raises:
        UserError: naming `path`, for a field TF-Serving does not know (or this
            server does not: thread pool and batch splitting options) or a bad value.
    """
    tokens, position = [], 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if not match or match.end() == position:
            if text[position:].strip() == "":
                break
            raise UserError(f"{path}: cannot read {text[position:position + 30]!r} (a text proto: "
                            "`max_batch_size { value: 32 }`, `allowed_batch_sizes: 8`).")
        position = match.end()
        if match.group(1):
            tokens.append(match.group(1))
    values, allowed, i = {}, [], 0

    def expect(token):
        nonlocal i
        if i >= len(tokens) or tokens[i] != token:
            got = tokens[i] if i < len(tokens) else "the end of the file"
            raise UserError(f"{path}: expected {token!r} after {tokens[i - 1]!r}, found {got!r}.")
        i += 1

    def integer(name):
        nonlocal i
        if i >= len(tokens) or not re.fullmatch(r"-?\d+", tokens[i]):
            raise UserError(f"{path}: {name} needs an integer value.")
        i += 1
        return int(tokens[i - 1])

    while i < len(tokens):
        name = tokens[i]
        i += 1
        if name in _WRAPPED:
            if i < len(tokens) and tokens[i] == ":":
                i += 1
            expect("{")
            expect("value")
            expect(":")
            values[name] = integer(name)
            expect("}")
        elif name == "allowed_batch_sizes":
            expect(":")
            allowed.append(integer(name))
        elif name == "pad_variable_length_inputs":
            expect(":")
            if i >= len(tokens) or tokens[i] not in ("true", "false"):
                raise UserError(f"{path}: pad_variable_length_inputs must be true or false.")
            values[name] = tokens[i] == "true"
            i += 1
        else:
            raise UserError(f"{path}: unknown field {name!r}; this server reads {', '.join(_WRAPPED)}, "
                            "allowed_batch_sizes and pad_variable_length_inputs.")
    params = BatchingParameters(**values, allowed_batch_sizes=tuple(allowed))
    for name in _WRAPPED:
        if getattr(params, name) < (0 if name == "batch_timeout_micros" else 1):
            raise UserError(f"{path}: {name} must be {'>= 0' if name == 'batch_timeout_micros' else '>= 1'}. "
                            f"Received: {getattr(params, name)}")
    # tensorflow_serving/batching/batching_session.cc (CreateBasicBatchingSession): the last allowed size must be
    # max_batch_size, or the model does not load.
    if allowed and (any(b <= a for a, b in zip(allowed, allowed[1:])) or allowed[0] < 1
                    or allowed[-1] != params.max_batch_size):
        raise UserError(f"{path}: allowed_batch_sizes must increase, from >= 1, and end with max_batch_size="
                        f"{params.max_batch_size} (as TF-Serving requires). Received: {allowed}")
    return params


# What `export` suggests: the batching row of bench/results/serving_batching.md with the most requests/s and the
# lowest p99 at 4 and 16 clients (1.04x and 1.12x no batching's requests/s there, 0.86x at one client, on 2 cores;
# docs/deployment.md#batching).
SUGGESTED = BatchingParameters(max_batch_size=4, batch_timeout_micros=1000, num_batch_threads=2,
                               max_enqueued_batches=64, allowed_batch_sizes=(), pad_variable_length_inputs=False)


# TF-Serving wraps a version's session for batching before it replays the warmup records
# (tensorflow_serving/servables/tensorflow/saved_model_bundle_factory.cc: WrapSessionForBatching, then
# RunSavedModelWarmup), so every record goes through the batch queue, which refuses a task of more rows than
# max_batch_size (`task_too_large`), and one failed record fails the load. The warmup records' largest batch is
# therefore the suggested max_batch_size itself: the largest batch a client may send, and the one the batcher
# builds under load.
WARMUP_BATCH_SIZES = (1, SUGGESTED.max_batch_size)

# Most rows one request may hold in `albert-tf serve` without batching. TF-Serving has no such limit there (a
# request runs whole); with batching the limit is the batching parameters' max_batch_size, as in TF-Serving.
DEFAULT_MAX_BATCH_SIZE = 256


def task_too_large(rows, max_batch_size):
    """TF-Serving's answer to a request of more rows than its batch queue takes (InvalidArgument: HTTP 400).

    The text of tensorflow/core/kernels/batching_util/shared_batch_scheduler.h
    (`Queue::ValidateBatchTaskQueueCapacity`), which TF-Serving's batching session
    (tensorflow_serving/batching/batching_session.cc) schedules on; its large-batch
    splitting is off unless enable_large_batch_splitting, which this server does not read.
    """
    return f"Task size {rows} is larger than maximum input batch size {max_batch_size}"
