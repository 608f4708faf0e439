"""Where the test suite's time goes, from a pytest JUnit XML file: the slowest tests, the test files
by their total, and what each pays for.

    python -m pytest -q -p no:cacheprovider --durations=0 --junitxml=durations.xml
    python bench/test_durations.py durations.xml [--before OLD.xml] [--slowest 60] [--write FILE]

A test's time is its set-up, call and tear-down (pytest's JUnit `time`). With `--before`, the
files' table gives both runs side by side. The sum over tests is the CPU-bound work a run spreads
over its processes (pytest-xdist, one per core); a run's wall time is about that sum over the cores.
"""

import argparse
import collections
import os
import sys
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib.machine import cpu_flags  # noqa: E402
from benchlib.output import emit_table  # noqa: E402

# What a test file's time is spent on, read from what its tests run.
PAYS_FOR = {
    "commands/test_kill.py": "a forked process per kill (34), model training, reruns",
    "project/test_docs.py": "every docs block: the tiny demo, fine-tuning, exports, serve, MediaPipe",
    "commands/test_journeys.py": "fine-tuning, exports, serve in a fresh process",
    "training/test_distributed_training.py": "2 forked worker processes per test, each training",
    "training/test_training_loop.py": "whole-step XLA compiles, kill-and-resume",
    "training/test_faults.py": "forked processes killed mid-write, reruns",
    "commands/test_distill.py": "a teacher and students, six exports",
    "commands/test_demo.py": "tiny demos, a Ctrl-C in a forked process",
    "export/test_export_saved_model.py": "SavedModel exports and loads",
    "commands/test_journeys_errors.py": "fresh processes (start-up noise, serve)",
    "export/test_export_tflite.py": "TFLite conversion, MediaPipe and the Task Library in venvs",
    "export/test_tf_serving_versions.py": "the TensorFlow 2.20 venv (pip, first run), loading exports there",
    "recipes/test_finetune_strategy.py": "fine-tuning under mirrored and 2 forked worker processes",
    "commands/test_hub_cli.py": "HF weights, fine-tuning, a fresh process",
    "training/test_preemption.py": "SIGTERM in forked processes, reruns",
    "commands/test_quick_journey.py": "every command in a fresh process",
    "commands/test_cloud_storage.py": "every command on ram:// in one fresh process",
    "commands/test_fork_server.py": "probes forked and in new processes (no TensorFlow)",
    "training/test_training.py": "tiny trainings in the test process",
    "commands/test_input_problems.py": "create-data, then damaged inputs refused before a run starts",
}


def durations(path):
    """{test id: seconds} of a JUnit XML file."""
    found = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        module = case.get("classname", "").replace(".", "/") + ".py"
        found[f"{module.removeprefix('tests/')}::{case.get('name')}"] = float(case.get("time") or 0)
    return found


def by_file(times):
    totals = collections.Counter()
    for test, seconds in times.items():
        totals[test.split("::")[0]] += seconds
    return totals


def tables(after, before=None, slowest=60, files=25):
    lines = [f"CPU flags: {' '.join(cpu_flags()) or 'unknown'}", ""]
    for label, times in (("before", before), ("after" if before else "this run", after)):
        if times is not None:
            lines.append(f"- {label}: {len(times):,} tests, {sum(times.values()):,.0f} s summed over tests")
    lines += ["", f"The {slowest} slowest tests:", "", "| # | test | s | pays for |", "|---:|---|---:|---|"]
    for rank, (test, seconds) in enumerate(sorted(after.items(), key=lambda kv: -kv[1])[:slowest], 1):
        name = test if len(test) <= 110 else test[:107] + "..."
        lines.append(f"| {rank} | `{name}` | {seconds:.1f} | {PAYS_FOR.get(test.split('::')[0], '')} |")
    totals_after = by_file(after)
    totals_before = by_file(before) if before else None
    head = "| file | before s | after s | pays for |" if before else "| file | s | pays for |"
    lines += ["", f"The {files} test files that take longest:", "", head,
              "|---|---:|---:|---|" if before else "|---|---:|---|"]
    order = totals_before if before else totals_after
    for name, _ in order.most_common(files):
        cells = [f"{totals_before[name]:.0f}", f"{totals_after.get(name, 0):.0f}"] if before else \
            [f"{totals_after[name]:.0f}"]
        lines.append(f"| `{name}` | {' | '.join(cells)} | {PAYS_FOR.get(name, '')} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("xml", help="pytest --junitxml file of the run to describe")
    parser.add_argument("--before", help="an earlier run's --junitxml file, compared file by file")
    parser.add_argument("--slowest", type=int, default=60)
    parser.add_argument("--write", help="also write the tables to this Markdown file")
    args = parser.parse_args(argv)
    before = durations(args.before) if args.before else None
    emit_table(tables(durations(args.xml), before, args.slowest), args.write)


if __name__ == "__main__":
    main()
