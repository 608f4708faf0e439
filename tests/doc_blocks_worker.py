"""Runs one page's code blocks in order, in this one process, for tests/project/test_docs.py.

    python tests/doc_blocks_worker.py < blocks.json     # [{"line": 63, "language": "python", "script": "block_63.py"}]

A ```python block runs here, in a namespace of its own as a script does (`__name__ == "__main__"`), so
the page's later Python blocks reuse the TensorFlow and Keras this process has loaded rather than each
loading them again; one that imports MediaPipe runs as `python block.py` (MediaPipe carries its own
TFLite runtime and absl, which should not meet TensorFlow's in one process). A ```bash or ```sh block runs as the user's shell runs it: `bash -e -o pipefail`,
its commands (`albert-tf ...`) each a program of their own. The first block that fails ends the page:
its line and exit status are the last line on stderr, `FAILED LINE STATUS`, and this process exits 1.
"""

import json
import os
import re
import runpy
import subprocess
import sys
import traceback

BLOCK_TIMEOUT_S = 600
OWN_PROCESS = re.compile(r"^\s*(from|import) mediapipe\b", re.M)


def run_block(block):
    """The block's exit status: 0, a bash block's own, or 1 for a Python block that raised."""
    with open(block["script"], encoding="utf-8") as f:
        own_process = OWN_PROCESS.search(f.read())
    if block["language"] != "python" or own_process:
        program = [sys.executable] if block["language"] == "python" else ["bash", "-e", "-o", "pipefail"]
        try:
            return subprocess.run(program + [block["script"]], timeout=BLOCK_TIMEOUT_S).returncode
        except subprocess.TimeoutExpired:
            print(f"ran past {BLOCK_TIMEOUT_S} s", file=sys.stderr)
            return 124
    try:
        runpy.run_path(block["script"], run_name="__main__")
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


def main():
    sys.path[0] = os.getcwd()  # as for `python block.py` in the page's directory: not tests/ first
    for block in json.load(sys.stdin):
        for stream in (sys.stdout, sys.stderr):
            print(f"--- block at line {block['line']} ---", file=stream, flush=True)
        status = run_block(block)
        sys.stdout.flush()
        if status != 0:
            print(f"FAILED {block['line']} {status}", file=sys.stderr, flush=True)
            sys.exit(1)


if __name__ == "__main__":
    main()
