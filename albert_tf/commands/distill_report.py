"""`albert-tf distill`'s report: the teacher and its student side by side, measured on this machine.

One table: the dev metric (both on the student's --eval file, from
distill.json), parameters, the TFLite float32 and dynamic-range int8 files'
sizes, and batch-1 latency at the run's max_seq_length of the SavedModel as
`export` writes it (its precision chosen for this CPU), TFLite float32 and
TFLite int8. The exports are made here, in a temporary directory, by the
export code itself; the models take token ids (no tokenizer inside, which
would add the same few hundred kilobytes to both). Latency is the median of a
few calls after a warm-up: a figure for this machine as loaded as it is now.
"""

import json
import os
import statistics
import tempfile
import time

import numpy as np
import tensorflow as tf
from ai_edge_litert.interpreter import Interpreter

from albert_tf.export import export_saved_model, export_tflite
from albert_tf.export.saved_model import resolve_export_precision
from albert_tf.recipes.finetune import load_run
from albert_tf.utils import files
from albert_tf.utils.layout import DISTILL_REPORT_FILE, DISTILL_RUN_FILE

# Timed calls per form, after `_WARMUP` untimed ones: enough for a median on a quiet machine, cheap on a busy one.
_RUNS, _WARMUP = 10, 2


def report(teacher_dir, student_dir, log=print):
    """Measures both models, logs the table and writes it to `student_dir/DISTILL_REPORT_FILE`; returns the rows.

    Args:
        teacher_dir: the teacher's run directory (or its best/).
        student_dir: the distilled run directory (with its distill.json).
    """
    record = json.loads(files.read_text(os.path.join(student_dir, DISTILL_RUN_FILE)))
    best = next(r for r in record["history"] if r["epoch"] == record["best_epoch"])
    metric = record["metric"]
    rows = [measure("teacher", teacher_dir, record["teacher_eval"][metric]),
            measure("student", student_dir, best[metric])]
    table = _table(rows, metric)
    log(table)
    files.write_text(os.path.join(student_dir, DISTILL_REPORT_FILE), table + "\n")
    return rows


def measure(name, run_dir, score, runs=_RUNS):
    """{"name", "score", "parameters", sizes in bytes and latencies in ms (median of `runs` calls)} of the run's
    best model."""
    config, model, _, _ = load_run(run_dir)
    length = config.max_seq_length
    row = {"name": name, "score": score, "parameters": model.count_params()}
    with tempfile.TemporaryDirectory(prefix="albert-tf-distill-report-") as scratch:
        precision, _ = resolve_export_precision("auto", model.backbone.config.hidden_size)
        saved = export_saved_model(model, os.path.join(scratch, "saved_model"), max_length=length,
                                   precision=precision)
        row["saved_model_ms"] = median_ms(saved_model_call(saved, length, model.backbone.config.vocab_size), runs)
        row["saved_model_precision"] = precision
        for quantize, key in (("none", "float32"), ("dynamic", "int8")):
            path = export_tflite(model, os.path.join(scratch, f"tflite-{quantize}"), max_length=length,
                                 quantize=quantize, metadata=False)
            row[f"tflite_{key}_bytes"] = os.path.getsize(path)
            row[f"tflite_{key}_ms"] = median_ms(tflite_call(path, model.backbone.config.vocab_size), runs)
    return row


def _ids(shape, dtype, name, vocab_size):
    """Batch-1 inputs: random token ids, every position real, one segment."""
    if name.endswith("token_ids"):
        return np.random.default_rng(0).integers(5, vocab_size, shape).astype(dtype)
    return (np.ones if name.endswith("padding_mask") else np.zeros)(shape, dtype)


def median_ms(call, runs):
    """Milliseconds: the median of `runs` timed calls of `call`, after `_WARMUP` untimed ones."""
    for _ in range(_WARMUP):
        call()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def saved_model_call(path, length, vocab_size):
    """A zero-argument call of the SavedModel's serving_default on one row of `length` token ids."""
    function = tf.saved_model.load(path).signatures["serving_default"]
    specs = function.structured_input_signature[1]
    inputs = {k: tf.constant(_ids((1, length), s.dtype.as_numpy_dtype, k, vocab_size)) for k, s in specs.items()}
    return lambda: function(**inputs)


def tflite_call(path, vocab_size):
    """A zero-argument call of the TFLite model at `path` on one row of token ids (its fixed shape)."""
    interpreter = Interpreter(model_path=path)
    interpreter.allocate_tensors()
    for detail in interpreter.get_input_details():
        interpreter.set_tensor(detail["index"], _ids(detail["shape"], detail["dtype"], detail["name"], vocab_size))
    return interpreter.invoke


def _table(rows, metric):
    lines = [f"| model | dev {metric} | parameters | TFLite float32 | TFLite int8 | SavedModel ms | "
             "TFLite float32 ms | TFLite int8 ms |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['name']} | {r['score']:.4f} | {r['parameters']:,} "
                     f"| {r['tflite_float32_bytes'] / 1e6:.2f} MB | {r['tflite_int8_bytes'] / 1e6:.2f} MB "
                     f"| {r['saved_model_ms']:.2f} ({r['saved_model_precision']}) "
                     f"| {r['tflite_float32_ms']:.2f} | {r['tflite_int8_ms']:.2f} |")
    teacher, student = rows
    lines.append(f"\nThe student: {student['score'] / teacher['score']:.1%} of the teacher's dev {metric}, "
                 f"{teacher['saved_model_ms'] / student['saved_model_ms']:.1f}x faster as a SavedModel, "
                 f"{teacher['tflite_float32_ms'] / student['tflite_float32_ms']:.1f}x as TFLite float32 "
                 f"(batch 1, this machine, median of {_RUNS} calls).")
    return "\n".join(lines)
