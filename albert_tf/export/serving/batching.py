"""Server-side batching as TF-Serving does it: its `batching_parameters` file, and a batcher over a signature.

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

`Batcher` merges concurrent requests to one signature (same shapes past the
batch; with pad_variable_length_inputs, padded with zeros to the longest)
into one call of at most max_batch_size rows, waiting at most
batch_timeout_micros for a batch to fill, on num_batch_threads threads;
a batch is padded to the next allowed size with copies of its first row,
and each request gets its own rows back. A request joining a queue that
already holds max_enqueued_batches full batches is refused (503), as
TF-Serving does. No TensorFlow here: the batcher calls the function it is given.
"""

import dataclasses
import os
import re
import threading
import time
from http import HTTPStatus

from albert_tf.export.serving.codec import RequestError
from albert_tf.utils.errors import UserError

# The file `export` writes beside the version directories: a suggestion for TF-Serving and `albert-tf serve`.
SUGGESTED_FILE = "batching_parameters.txt"


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
    if allowed and (any(b <= a for a, b in zip(allowed, allowed[1:])) or allowed[0] < 1
                    or allowed[-1] != params.max_batch_size):
        raise UserError(f"{path}: allowed_batch_sizes must increase, from >= 1, and end with max_batch_size="
                        f"{params.max_batch_size} (as TF-Serving requires). Received: {allowed}")
    return params


class _Task:
    def __init__(self, arrays, rows):
        self.arrays, self.rows, self.enqueued = arrays, rows, time.monotonic()
        self.done, self.outputs, self.error = threading.Event(), None, None


class Batcher:
    """Merges concurrent calls of `call(signature_name, arrays) -> outputs` into batches.

    Args:
        call: runs a signature on numpy inputs (batch first) and returns numpy outputs (batch first).
        params: `BatchingParameters`.
    """

    def __init__(self, call, params):
        self._call, self.params = call, params
        self._queues = {}  # batching key -> [_Task], oldest first
        self._condition = threading.Condition()
        self._closed = False
        self._threads = [threading.Thread(target=self._work, name=f"albert-tf-batch-{i}", daemon=True)
                         for i in range(params.num_batch_threads)]
        for thread in self._threads:
            thread.start()

    def run(self, signature_name, arrays):
        """Runs `signature_name` on `arrays` within a batch; returns this request's rows of the outputs."""
        rows = next(iter(arrays.values())).shape[0]
        if rows > self.params.max_batch_size:
            raise RequestError(f"Task size {rows} is larger than maximum input batch size "
                               f"{self.params.max_batch_size} (max_batch_size of the batching parameters).")
        task = _Task(arrays, rows)
        with self._condition:
            queue = self._queues.setdefault(self._key(signature_name, arrays), [])
            queued_rows = sum(t.rows for t in queue)
            if queued_rows + rows > self.params.max_enqueued_batches * self.params.max_batch_size:
                raise RequestError("The batch scheduling queue to which this task was submitted is full "
                                   f"(max_enqueued_batches={self.params.max_enqueued_batches}).",
                                   HTTPStatus.SERVICE_UNAVAILABLE)
            queue.append(task)
            self._condition.notify()
        task.done.wait()
        if task.error is not None:
            raise task.error
        return task.outputs

    def close(self):
        with self._condition:
            self._closed = True
            self._condition.notify_all()
        for thread in self._threads:
            thread.join(timeout=10)

    def _key(self, signature_name, arrays):
        shapes = tuple((n, a.dtype.str, a.ndim if self.params.pad_variable_length_inputs else a.shape[1:])
                       for n, a in sorted(arrays.items()))
        return signature_name, shapes

    def _work(self):
        while True:
            with self._condition:
                batch = self._next_batch()
                while batch is None:
                    if self._closed:
                        return
                    self._condition.wait(self._wait_time())
                    batch = self._next_batch()
            key, tasks = batch
            self._run(key[0], tasks)

    def _next_batch(self):
        """(key, tasks) of a batch that is full or whose oldest request waited the timeout; None if none is."""
        timeout = self.params.batch_timeout_micros / 1e6
        now = time.monotonic()
        for key, queue in self._queues.items():
            if not queue:
                continue
            full = sum(t.rows for t in queue) >= self.params.max_batch_size
            if full or now - queue[0].enqueued >= timeout:
                tasks, rows = [], 0
                while queue and rows + queue[0].rows <= self.params.max_batch_size:
                    rows += queue[0].rows
                    tasks.append(queue.pop(0))
                return key, tasks
        return None

    def _wait_time(self):
        oldest = [q[0].enqueued for q in self._queues.values() if q]
        if not oldest:
            return None
        return max(0.0, min(oldest) + self.params.batch_timeout_micros / 1e6 - time.monotonic())

    def _run(self, signature_name, tasks):
        try:
            outputs = self._call(signature_name, self._merge(tasks))
            start = 0
            for task in tasks:
                task.outputs = {n: v[start:start + task.rows] for n, v in outputs.items()}
                start += task.rows
        except RequestError as error:
            if len(tasks) == 1:
                tasks[0].error = error
            else:  # one bad request must not fail the others batched with it: each alone
                for task in tasks:
                    self._run(signature_name, [task])
                return
        except Exception as error:  # noqa: BLE001 - handed to the request's thread, which answers 500
            for task in tasks:
                task.error = error
        for task in tasks:
            task.done.set()

    def _merge(self, tasks):
        import numpy as np

        rows = sum(t.rows for t in tasks)
        target = next((size for size in self.params.allowed_batch_sizes if size >= rows), rows)
        merged = {}
        for name in tasks[0].arrays:
            parts = [t.arrays[name] for t in tasks]
            if self.params.pad_variable_length_inputs:
                longest = np.max([p.shape for p in parts], axis=0)[1:]
                parts = [np.pad(p, [(0, 0)] + [(0, int(m - s)) for m, s in zip(longest, p.shape[1:])],
                                constant_values=b"" if p.dtype == object else 0) for p in parts]
            array = np.concatenate(parts)
            if target > rows:  # TF-Serving pads a batch to an allowed size with copies of its first row
                array = np.concatenate([array, np.repeat(array[:1], target - rows, axis=0)])
            merged[name] = array
        return merged


# What `export` suggests: the batching row of bench/results/serving_batching.md with the most requests/s and the
# lowest p99 at 4 and 16 clients (1.04x and 1.12x no batching's requests/s there, 0.86x at one client, on 2 cores;
# docs/deployment.md#batching).
SUGGESTED = BatchingParameters(max_batch_size=4, batch_timeout_micros=1000, num_batch_threads=2,
                               max_enqueued_batches=64, allowed_batch_sizes=(), pad_variable_length_inputs=False)
