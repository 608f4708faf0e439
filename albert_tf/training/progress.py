"""Training progress: terminal lines, TensorBoard summaries and a JSON-lines log.

Every `log_every` steps the metrics averaged over the steps since the last
line are printed, written to TensorBoard (RUN_DIR/tensorboard) and appended
to RUN_DIR/train_log.jsonl (which the demo's loss curve is drawn from).
A held-out evaluation made at a reporting step joins its line and record.

train_log.jsonl is append-only: a line once written is never rewritten, so
a kill at any moment leaves every earlier line whole. A resumed run appends
a resume record, `{"step": STEP, "resumed": true}`: the lines after STEP
written before it come from steps the run lost (it went back to its
checkpoint at STEP), and `read_log` drops them.
"""

import datetime
import json
import os
import time

import tensorflow as tf
from tensorflow.core.framework import summary_pb2

from albert_tf.utils import files
from albert_tf.utils.layout import TENSORBOARD_DIR, TRAIN_LOG_FILE

RESUMED = "resumed"  # the key of a resume record
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
        self.log_path = os.path.join(run_dir, TRAIN_LOG_FILE)
        self._writer = tf.summary.create_file_writer(os.path.join(run_dir, TENSORBOARD_DIR)) if enabled else None
        self._reset_window()

    def start(self, step):
        """Begins reporting at `step`; on resume, marks the log lines after it as lost (see the module docstring)."""
        self._reset_window()
        if self.enabled and files.isfile(self.log_path):
            # After a line a kill cut short, on a line of its own.
            cut = not files.read_bytes(self.log_path).endswith(b"\n")
            self._append({"step": step, RESUMED: True}, cut)

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
        self._append(record)

    def _append(self, record, new_line=False):
        # Appending to an object (gs://) rewrites it whole: fine at one line per `log_every` steps.
        with files.open_file(self.log_path, "a") as f:
            f.write("\n" * new_line + json.dumps(record) + "\n")

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
    """The records of RUN_DIR/train_log.jsonl, oldest first: those of the steps the run kept.

    A resume record drops the records after its step written before it, and
    is not returned itself. A last line cut short by a kill is skipped.
    """
    path = os.path.join(run_dir, TRAIN_LOG_FILE)
    if not files.isfile(path):
        return []
    records = []
    with files.open_file(path) as f:
        for line in f:
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line a kill cut short
            if record.get(RESUMED):
                records = [r for r in records if r["step"] <= record["step"]]
            else:
                records.append(record)
    return records
