"""Training progress: terminal lines, TensorBoard summaries and a JSON-lines log.

Every `log_every` steps the metrics averaged over the steps since the last
line are printed, written to TensorBoard (RUN_DIR/tensorboard) and appended
to RUN_DIR/train_log.jsonl (which the demo's loss curve is drawn from).
A held-out evaluation made at a reporting step joins its line and record.
"""

import datetime
import json
import os
import time

import tensorflow as tf
from tensorflow.core.framework import summary_pb2

from albert_tf.utils import files

LOG_FILE = "train_log.jsonl"
TENSORBOARD_DIR = "tensorboard"
# Printed in this order; every one is also a TensorBoard scalar.
METRICS = ("loss", "mlm_loss", "sop_loss", "mlm_accuracy", "sop_accuracy", "grad_norm")


class ProgressLogger:
    """Reports a run's progress.

    Args:
        run_dir: the run directory (gets `train_log.jsonl` and `tensorboard/`).
        num_steps: the run's last step, for the ETA.
        examples_per_step: global batch size, for examples/s.
        log_every: steps between reports.
        enabled: False on non-chief workers: they report nothing.
        print_fn: where progress lines go.
    """

    def __init__(self, run_dir, num_steps, examples_per_step, log_every, enabled=True, print_fn=print):
        self.num_steps = num_steps
        self.examples_per_step = examples_per_step
        self.log_every = log_every
        self.enabled = enabled
        self.print_fn = print_fn
        self.log_path = os.path.join(run_dir, LOG_FILE)
        self._writer = tf.summary.create_file_writer(os.path.join(run_dir, TENSORBOARD_DIR)) if enabled else None
        self._reset_window()

    def start(self, step):
        """Begins reporting at `step`, dropping log lines after it (written before a crash)."""
        self._reset_window()
        if not self.enabled or not files.isfile(self.log_path):
            return
        with files.open_file(self.log_path) as f:
            kept = [line for line in f if line.strip() and json.loads(line)["step"] <= step]
        files.write_text(self.log_path, "".join(kept))

    def update(self, step, metrics, learning_rate, num_steps=1, evaluation=None):
        """Adds the mean metrics (dict of floats) of the `num_steps` steps up to `step`; reports every `log_every` steps.

        `evaluation`: optional held-out metrics at `step` (dict of floats,
        `Trainer.evaluate`), reported with it; `step` must then be a reporting step.
        """
        for name in METRICS:
            self._sums[name] += metrics[name] * num_steps
        self._count += num_steps
        if step % self.log_every and step != self.num_steps:
            return
        now = time.perf_counter()
        seconds_per_step = (now - self._window_start) / self._count
        record = {"step": step, **{name: self._sums[name] / self._count for name in METRICS}}
        record["learning_rate"] = learning_rate
        record["examples_per_second"] = self.examples_per_step / seconds_per_step
        record.update(evaluation or {})
        self._reset_window()
        if not self.enabled:
            return
        eta = datetime.timedelta(seconds=round(seconds_per_step * (self.num_steps - step)))
        self.print_fn(
            f"step {step:>{len(str(self.num_steps))}}/{self.num_steps} | loss {record['loss']:.4f} "
            f"(mlm {record['mlm_loss']:.4f}, sop {record['sop_loss']:.4f}) | "
            f"mlm_acc {record['mlm_accuracy']:.4f} | sop_acc {record['sop_accuracy']:.4f} | "
            f"lr {learning_rate:.3e} | {record['examples_per_second']:.1f} ex/s | ETA {eta}"
            + (f" | eval mlm_acc {evaluation['eval_mlm_accuracy']:.4f} sop_acc {evaluation['eval_sop_accuracy']:.4f} "
               f"mlm_loss {evaluation['eval_mlm_loss']:.4f}" if evaluation else ""),
        )
        with self._writer.as_default():
            for name, value in record.items():
                if name != "step":
                    _write_scalar(name, value, step)
        self._writer.flush()
        # Appending to an object (gs://) rewrites it whole: fine at one line per `log_every` steps.
        with files.open_file(self.log_path, "a") as f:
            f.write(json.dumps(record) + "\n")

    def close(self):
        if self._writer is not None:
            self._writer.close()

    def _reset_window(self):
        self._sums = dict.fromkeys(METRICS, 0.0)
        self._count = 0
        self._window_start = time.perf_counter()


# TensorBoard's scalar plugin marker. `tf.summary.scalar` lives in the
# tensorboard package; writing the event through core `tf.summary.write` with
# this metadata gives the same record without depending on it.
_SCALAR_METADATA = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
)


def _write_scalar(name, value, step):
    tf.summary.write(name, tf.constant(value, tf.float32), step=step, metadata=_SCALAR_METADATA)


def read_log(run_dir):
    """The records of RUN_DIR/train_log.jsonl, oldest first."""
    path = os.path.join(run_dir, LOG_FILE)
    if not files.isfile(path):
        return []
    with files.open_file(path) as f:
        return [json.loads(line) for line in f if line.strip()]
