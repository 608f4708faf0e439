"""Batch-1 latency of a teacher and its students, as `albert-tf distill`'s report measures them, on this machine.

For run directories that bench/distill.py (or `finetune` and `distill`) wrote:
each model exported as the SavedModel `export` writes (its precision chosen
for this CPU), TFLite float32 and TFLite dynamic-range int8, each timed at
batch 1 and the run's max_seq_length (`albert_tf.commands.distill_report`),
in `--rounds` rounds taken in turns so that a change in the machine's load
falls on every model alike. Prints one table: each form's median over the
rounds (of a round's median of `--runs` calls), its [min, max] over the
rounds, and the teacher's time over the student's. Timings mean something on
a quiet machine only; the header names the CPU and the flags that decide
matmul speed.

    python bench/distill_latency.py --teacher runs/distill_bench/rt/teacher_seed0 \\
        --student tiny=runs/distill_bench/rt/distilled_and_unlabeled_tiny_seed0 \\
        [--student quarter=...] [--rounds 5] [--runs 50] [--write FILE]
"""

import argparse
import os
import statistics

from distill import best_dev
from benchlib.machine import cpu_flags, cpu_name
from benchlib.output import emit_table

FORMS = (("saved_model_ms", "SavedModel"), ("tflite_float32_ms", "TFLite float32"), ("tflite_int8_ms", "TFLite int8"))


def table(args, models, measured):
    """The Markdown table of `measured` ({name: [a round's row]}), the teacher first."""
    teacher = {key: statistics.median(r[key] for r in measured["teacher"]) for key, _ in FORMS}
    first = measured["teacher"][0]
    lines = [f"Batch 1, max_seq_length from each run, median over {args.rounds} rounds in turns of a round's median "
             f"of {args.runs} calls [min, max over rounds]; x: the teacher's median over this one's. "
             f"SavedModel precision: {first['saved_model_precision']}. {cpu_name()}, {os.cpu_count()} cores; "
             f"flags: {' '.join(cpu_flags()) or 'none'}.", "",
             "| model | run | dev accuracy | " + " | ".join(f"{label} ms | x" for _, label in FORMS) + " |",
             "|---|---|---:|" + "---:|---:|" * len(FORMS)]
    for name, run_dir in models:
        rows = measured[name]
        cells = []
        for key, _ in FORMS:
            values = [r[key] for r in rows]
            median = statistics.median(values)
            cells.append(f"{median:.2f} [{min(values):.2f}, {max(values):.2f}] | {teacher[key] / median:.1f}")
        lines.append(f"| {name} | {run_dir} | {rows[0]['score']:.4f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teacher", required=True, metavar="RUN", help="The teacher's run directory.")
    parser.add_argument("--student", required=True, action="append", metavar="NAME=RUN",
                        help="A student's name and run directory; repeat for more.")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=50, help="Timed calls per form and round.")
    parser.add_argument("--write", help="Also write the table to this Markdown file.")
    args = parser.parse_args()
    models = [("teacher", args.teacher)]
    for given in args.student:
        name, sep, run_dir = given.partition("=")
        if not sep or not name or name == "teacher":
            parser.error(f"--student {given}: give NAME=RUN, NAME not 'teacher'")
        models.append((name, run_dir))
    for name, run_dir in models:
        if not os.path.isfile(os.path.join(run_dir, "finetune.json")):
            parser.error(f"--{'teacher' if name == 'teacher' else 'student'} {run_dir}: no finetune.json there")

    from albert_tf.commands.distill_report import measure

    measured = {name: [] for name, _ in models}
    for _ in range(args.rounds):
        for name, run_dir in models:
            measured[name].append(measure(name, run_dir, best_dev(run_dir), runs=args.runs))
    emit_table(table(args, models, measured), args.write)


if __name__ == "__main__":
    main()
