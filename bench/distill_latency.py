"""Batch-1 latency of a teacher and its students, as `albert-tf distill`'s report measures them, on this machine.

For run directories that bench/distill.py (or `finetune` and `distill`) wrote,
or with `--shape base` for ALBERT-base untrained (`--preset`'s shape, its
weights moved off their initial values: latency does not depend on their
values, but an all-ones LayerNorm gamma or all-zero bias would let the graph
optimizer drop ops a trained model runs) and its `--student-size` student:
each model exported once in each of `--forms`, then each form timed at batch
1 and the run's max_seq_length (`--seq` with --shape), in `--rounds` rounds
taken in turns so that a change in the machine's load falls on every model
and form alike. Forms:
- saved_model: the SavedModel `export` writes (its precision chosen for this CPU);
- saved_model_xla: the one `export --xla` writes (float32, its forward pass
  compiled by XLA on the first call);
- saved_model_keras_ln: saved_model with Keras' own LayerNorm (ten
  element-wise ops) in place of the fused batch-norm form `export` traces;
- tflite_float32, tflite_int8: TFLite float32 and dynamic-range int8.
Prints one table: each form's median over the rounds (of a round's median of
`--runs` calls), its [min, max] over the rounds, and the teacher's time over
the student's. Timings mean something on a quiet machine only; the header
names the CPU and the flags that decide matmul speed.

    python bench/distill_latency.py --teacher runs/distill_bench/rt/teacher_seed0 \\
        --student tiny=runs/distill_bench/rt/distilled_and_unlabeled_tiny_seed0 \\
        [--student quarter=...] [--forms saved_model saved_model_xla ...] [--rounds 5] [--runs 50] [--write FILE]
    python bench/distill_latency.py --shape base [--seq 128] [--student-size tiny] [--precision float32] [--forms ...]
"""

import argparse
import contextlib
import os
import statistics
import tempfile
from unittest import mock

from distill import best_dev
from benchlib.machine import cpu_flags, cpu_name
from benchlib.output import emit_table

from albert_tf.recipes.distill_config import STUDENT_SIZES

FORMS = {"saved_model": "SavedModel", "saved_model_xla": "SavedModel --xla",
         "saved_model_keras_ln": "SavedModel, Keras LayerNorm", "tflite_float32": "TFLite float32",
         "tflite_int8": "TFLite int8"}
DEFAULT_FORMS = ("saved_model", "tflite_float32", "tflite_int8")


def table(args, models, measured):
    """The Markdown table of `measured` ({name: {form: [a round's ms]}}), the teacher first."""
    teacher = {form: statistics.median(measured["teacher"][form]) for form in args.forms}
    precisions = ", ".join(f"{name} {precision}" for name, _, _, precision in models)
    lines = [f"Batch 1, max_seq_length from each run, median over {args.rounds} rounds in turns of a round's median "
             f"of {args.runs} calls [min, max over rounds]; x: the teacher's median over this one's. "
             f"SavedModel precision (saved_model, saved_model_keras_ln): {precisions}. {cpu_name()}, "
             f"{os.cpu_count()} cores; flags: {' '.join(cpu_flags()) or 'none'}.", "",
             "| model | run | dev accuracy | " + " | ".join(f"{FORMS[f]} ms | x" for f in args.forms) + " |",
             "|---|---|---:|" + "---:|---:|" * len(args.forms)]
    for name, run, score, _ in models:
        cells = []
        for form in args.forms:
            values = measured[name][form]
            median = statistics.median(values)
            cells.append(f"{median:.2f} [{min(values):.2f}, {max(values):.2f}] | {teacher[form] / median:.1f}")
        score = "-" if score is None else f"{score:.4f}"
        lines.append(f"| {name} | {run} | {score} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def calls(model, length, forms, scratch, precision="auto"):
    """{form: a zero-argument batch-1 call of `model` exported in that form under `scratch`}, and the precision
    of its SavedModel (`precision`, "auto" resolved as `export` resolves it; `export --xla`'s is float32)."""
    from albert_tf import inference
    from albert_tf.commands.distill_report import saved_model_call, tflite_call
    from albert_tf.export import export_saved_model, export_tflite
    from albert_tf.export.saved_model import resolve_export_precision

    vocab_size = model.backbone.config.vocab_size
    precision, _ = resolve_export_precision(precision, model.backbone.config.hidden_size)
    result = {}
    for form in forms:
        path = os.path.join(scratch, form)
        if form.startswith("saved_model"):
            keras_ln = form == "saved_model_keras_ln"
            with mock.patch.object(inference, "layer_norm_as_fused_batch_norm", None) if keras_ln \
                    else contextlib.nullcontext():
                saved = export_saved_model(model, path, max_length=length, xla=form == "saved_model_xla",
                                           precision="float32" if form == "saved_model_xla" else precision)
            result[form] = saved_model_call(saved, length, vocab_size)
        else:
            quantize = "none" if form == "tflite_float32" else "dynamic"
            result[form] = tflite_call(export_tflite(model, path, max_length=length, quantize=quantize,
                                                     metadata=False), vocab_size)
    return result, precision


def synthetic_models(preset, student_size):
    """[(name, a description, untrained classifier)]: `preset`'s shape and its `student_size` student, their
    weights moved off their initial values."""
    from albert_tf import AlbertBackbone, AlbertConfig
    from albert_tf.models.classifier import AlbertClassifier
    from albert_tf.recipes.distill import describe, student_config
    from albert_tf.recipes.distill_config import DistillConfig
    from benchlib.synthetic import move_off_initial_values

    teacher = AlbertConfig.from_preset(preset)
    models = []
    student = student_config(teacher, DistillConfig(student=student_size))
    for name, shape in (("teacher", teacher), (student_size, student)):
        model = AlbertClassifier(AlbertBackbone(shape), num_classes=2)
        move_off_initial_values(model)
        models.append((name, f"untrained {preset}: {describe(shape)}", model))
    return models


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teacher", metavar="RUN", help="The teacher's run directory.")
    parser.add_argument("--student", action="append", metavar="NAME=RUN",
                        help="A student's name and run directory; repeat for more.")
    parser.add_argument("--shape", metavar="PRESET",
                        help="Instead of runs: an untrained model of this preset's shape (e.g. base) and its student.")
    parser.add_argument("--student-size", default="tiny", choices=tuple(STUDENT_SIZES),
                        help="With --shape: the student's size (distill's --student).")
    parser.add_argument("--seq", type=int, default=128, help="With --shape: the sequence length.")
    parser.add_argument("--forms", nargs="+", default=list(DEFAULT_FORMS), choices=tuple(FORMS))
    parser.add_argument("--precision", default="auto", choices=("auto", "float32"),
                        help="The SavedModel's precision (saved_model, saved_model_keras_ln); auto: as `export` "
                             "chooses it for this CPU.")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=50, help="Timed calls per form and round.")
    parser.add_argument("--write", help="Also write the table to this Markdown file.")
    args = parser.parse_args()
    if args.shape and (args.teacher or args.student):
        parser.error("--shape: give it without --teacher and --student")
    if not args.shape and not (args.teacher and args.student):
        parser.error("--teacher and --student: give both, or --shape")
    runs = [("teacher", args.teacher)] if args.teacher else []
    for given in args.student or ():
        name, sep, run_dir = given.partition("=")
        if not sep or not name or name == "teacher":
            parser.error(f"--student {given}: give NAME=RUN, NAME not 'teacher'")
        runs.append((name, run_dir))
    for name, run_dir in runs:
        if not os.path.isfile(os.path.join(run_dir, "finetune.json")):
            parser.error(f"--{'teacher' if name == 'teacher' else 'student'} {run_dir}: no finetune.json there")

    from albert_tf.recipes.finetune import load_run

    if args.shape:
        loaded = [(name, run, None, model, args.seq) for name, run, model in synthetic_models(args.shape,
                                                                                              args.student_size)]
    else:
        loaded = []
        for name, run_dir in runs:
            config, model, _, _ = load_run(run_dir)
            loaded.append((name, run_dir, best_dev(run_dir), model, config.max_seq_length))
    with tempfile.TemporaryDirectory(prefix="albert-tf-distill-latency-") as scratch:
        models, prepared = [], {}
        for name, run, score, model, length in loaded:
            prepared[name], precision = calls(model, length, args.forms, os.path.join(scratch, name),
                                                 args.precision)
            models.append((name, run, score, precision))
        from albert_tf.commands.distill_report import median_ms

        measured = {name: {form: [] for form in args.forms} for name in prepared}
        for _ in range(args.rounds):
            for name, forms in prepared.items():
                for form, call in forms.items():
                    measured[name][form].append(median_ms(call, args.runs))
    emit_table(table(args, models, measured), args.write)


if __name__ == "__main__":
    main()
