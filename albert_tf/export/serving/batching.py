"""Server-side batching as TF-Serving does it: a batcher over a signature.

`Batcher` merges concurrent requests to one signature (same shapes past the
batch; with pad_variable_length_inputs, padded with zeros to the longest)
into one call of at most max_batch_size rows, waiting at most
batch_timeout_micros for a batch to fill, on num_batch_threads threads;
a batch is padded to the next allowed size with copies of the first row of
its last request, and each request gets its own rows back. A request of
more than max_batch_size rows is refused (400), and one joining a queue that
already holds max_enqueued_batches full batches too (503), as TF-Serving
does (tensorflow_serving/batching/batching_session.cc, over TensorFlow's
shared_batch_scheduler.h). The parameters are
`albert_tf.export.batching_parameters`'. No TensorFlow here: the batcher
calls the function it is given.
"""

import threading
import time
from http import HTTPStatus

from albert_tf.export.batching_parameters import task_too_large
from albert_tf.export.serving.codec import RequestError


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
            raise RequestError(task_too_large(rows, self.params.max_batch_size))
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
        # tensorflow_serving/batching/batching_util.cc: RoundToLowestAllowedBatchSize.
        target = next((size for size in self.params.allowed_batch_sizes if size >= rows), rows)
        merged = {}
        for name in tasks[0].arrays:
            parts = [t.arrays[name] for t in tasks]
            if self.params.pad_variable_length_inputs:
                longest = np.max([p.shape for p in parts], axis=0)[1:]
                parts = [np.pad(p, [(0, 0)] + [(0, int(m - s)) for m, s in zip(longest, p.shape[1:])],
                                constant_values=b"" if p.dtype == object else 0) for p in parts]
            array = np.concatenate(parts)
            if target > rows:
                # batching_session.cc (MergeInputTensors) pads to the lowest allowed batch size with copies of the
                # last task's first row: a row some request sent, so valid for the model.
                last = parts[-1][:1]
                array = np.concatenate([array, np.repeat(last, target - rows, axis=0)])
            merged[name] = array
        return merged
