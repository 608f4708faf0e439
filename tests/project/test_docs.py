"""Every code block in README.md and docs/ runs as written, or says right above it why it cannot.

A page's ```python blocks run with this environment's Python and its ```bash / ```sh blocks with
bash (`-e -o pipefail`, this environment's bin/ first on PATH), in order, in one working directory
and one process per page (tests/doc_blocks_worker.py), which also runs the shell blocks' `albert-tf`
commands (each as its own process would: its descriptors, directory, environment, umask, exit
status). A block that cannot run here carries `<!-- not run: REASON -->` on the line above it.
Every other fence names its language (`text` for output), so no command hides in an unnamed block.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cli_helpers import run_program, user_environment

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"

# ---- The one place where the docs' runs are made small ---------------------------------------
# The README's main job pretrains for 3,000 steps on 19,928 reviews (minutes). Here it pretrains a
# tiny model for 20 steps on 300 reviews (its tokenizer trained on the same 300), without XLA (whose
# compile takes longer than the steps); every block that reads `runs/demo` reads that run. Each
# line that equals a key is run as its value, and a key no block uses is an error, so the list
# cannot go stale.
TINY_DEMO = (
    "--steps 20 --vocab-size 2000 --hidden-size 64 --intermediate-size 256 --tokenizer-documents 300 "
    "--documents 300 --heldout-documents 60 --eval-examples 40 --baseline-batches 2 --compile-step none"
)
SUBSTITUTIONS = {
    "albert-tf demo --out runs/demo": f"albert-tf demo --out runs/demo {TINY_DEMO}",
    # pretraining.md's smoke run, as small as the tour's and without XLA (whose compile the tests of XLA pay).
    "albert-tf demo --out runs/tiny --steps 20 --vocab-size 2000 --hidden-size 64 --intermediate-size 256 \\":
        "albert-tf demo --out runs/tiny --steps 20 --vocab-size 2000 --hidden-size 64 --intermediate-size 256 "
        "--compile-step none \\",
    "--tokenizer-documents 1500 --documents 300 --heldout-documents 60 --eval-examples 40":
        "--tokenizer-documents 300 --documents 300 --heldout-documents 60 --eval-examples 40",
    # The fine-tuning tour's CSVs: 400 and 100 rows instead of 2,000 and 500.
    'for name, part in (("train.csv", rows[:2000]), ("dev.csv", rows[2000:2500])):':
        'for name, part in (("train.csv", rows[:400]), ("dev.csv", rows[2000:2100])):',
}
# README.md runs first, in an empty directory; every page under docs/ then starts in a copy of
# the directory the README's tour leaves (runs/demo, runs/sentiment, saved_models/sentiment, ...).
FIRST_PAGE = "README.md"
# A page's blocks together; each block alone has tests/doc_blocks_worker.py's 600 s.
PAGE_TIMEOUT_S = 1200
# -----------------------------------------------------------------------------------------------

RUN_LANGUAGES = {"python", "bash", "sh"}
NOT_RUN = re.compile(r"^<!-- not run: (\S.*?) -->$")
FENCE = re.compile(r"^(\s*)```(.*)$")


def pages():
    return [FIRST_PAGE] + sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").rglob("*.md"))


def blocks(page):
    """The fenced blocks of `page` as dicts: language, line (1-based, of the fence), code, reason.

    `reason` is the text of a `<!-- not run: ... -->` marker on the line above the fence, else None.
    """
    lines = (REPO / page).read_text(encoding="utf-8").split("\n")
    found, i = [], 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, language = match.group(1), match.group(2).strip()
        end = i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        code = "\n".join(line[len(indent):] for line in lines[i + 1:end]) + "\n"
        marker = NOT_RUN.match(lines[i - 1].strip()) if i else None
        found.append({"language": language, "line": i + 1, "code": code,
                      "reason": marker.group(1) if marker else None})
        i = end + 1
    return found


def substituted(code, used):
    out = []
    for line in code.split("\n"):
        if line.strip() in SUBSTITUTIONS:
            used.add(line.strip())
            line = line.replace(line.strip(), SUBSTITUTIONS[line.strip()])
        out.append(line)
    return "\n".join(out)


def run_page(page, workdir):
    """Runs `page`'s runnable blocks in `workdir`; returns a failure message or None.

    The blocks run as a user runs them, with the installed `albert-tf`, in one process per page
    (tests/doc_blocks_worker.py): its Python blocks in that process, its shell blocks in bash, their
    `albert-tf` commands in that process unless one must be a process of its own.
    """
    bin_dir = str(Path(sys.executable).parent)
    path = bin_dir + os.pathsep + os.environ.get("PATH", "")
    env = user_environment(PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2", PATH=path)
    runnable, codes = [], {}
    for block in blocks(page):
        if block["language"] not in RUN_LANGUAGES or block["reason"]:
            continue
        codes[block["line"]] = code = substituted(block["code"], set())
        script = workdir / f"block_{block['line']}.{'py' if block['language'] == 'python' else 'sh'}"
        script.write_text(code, encoding="utf-8")
        runnable.append({"line": block["line"], "language": block["language"], "script": script.name})
    command = [sys.executable, str(TESTS / "doc_blocks_worker.py")]
    try:
        done = run_program(command, input=json.dumps(runnable), cwd=workdir, env=env, timeout=PAGE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"{page}: its blocks ran past {PAGE_TIMEOUT_S} s"
    if done.returncode == 0:
        return None
    failed = re.search(r"^FAILED (\d+) (-?\d+)$", done.stderr, re.M)
    if not failed:
        return f"{page}: the blocks' process exited {done.returncode}\n{done.stderr[-3000:]}"
    line, status = int(failed.group(1)), failed.group(2)
    language = next(b["language"] for b in runnable if b["line"] == line)
    return (f"{page}:{line}: the {language} block exited {status}\n"
            f"--- block ---\n{codes[line]}--- stdout ---\n{_from_block(done.stdout, line)[-3000:]}\n"
            f"--- stderr ---\n{_from_block(done.stderr, line)[-3000:]}")


def _from_block(output, line):
    """What the worker printed from the block at `line` on."""
    return output[output.rfind(f"--- block at line {line} ---"):]


@pytest.fixture(scope="module")
def tour(build_once):
    """The README's directory after its blocks ran, and the failure message (None when all ran); once per run."""
    return build_once("readme", lambda workdir: run_page(FIRST_PAGE, workdir))


def test_every_block_names_its_language_and_runs_or_says_why_not():
    problems = []
    for page in pages():
        for block in blocks(page):
            where = f"{page}:{block['line']}"
            if not block["language"]:
                problems.append(f"{where}: a fence without a language (```text for output)")
            elif block["reason"] and block["language"] not in RUN_LANGUAGES:
                problems.append(f"{where}: a not-run marker on a {block['language']} block, which never runs")
    assert not problems, "\n".join(problems)


def test_the_readme_names_the_test_command_that_ci_runs():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    commands = re.findall(r"^pip install -e \"\.\[test\]\" && (python -m pytest -q)$", readme, re.M)
    assert commands, "README.md lacks its test command"
    assert f".venv/bin/{commands[0]}" in (REPO / ".ci" / "run").read_text(encoding="utf-8")


@pytest.mark.slow
@pytest.mark.timeout(600)  # a long journey (tests/README.md)
def test_readme_blocks_run_as_written(tour):
    assert tour[1] is None, tour[1]


@pytest.mark.slow
@pytest.mark.timeout(900)  # a long journey, which may wait for the README's tour (tests/README.md)
@pytest.mark.parametrize("page", pages()[1:])
def test_docs_blocks_run_as_written(page, tour, tmp_path):
    readme_dir, failure = tour
    assert failure is None, f"the README's tour failed, so {page} has nothing to start from"
    workdir = tmp_path / "page"
    shutil.copytree(readme_dir, workdir, symlinks=True)
    failure = run_page(page, workdir)
    assert failure is None, failure


def test_a_shell_blocks_albert_tf_commands_run_in_the_page_process_as_programs_of_their_own_would(tmp_path):
    """Through the worker's stand-in `albert-tf`: pipes, redirections, `$?` and `set -e` see each command's
    own status and output; a `&` job is a process of its own; a failing command fails its block."""
    (tmp_path / "block_1.sh").write_text(
        "albert-tf --help | head -1 > first.txt\n"
        "albert-tf no-such-command 2> err.txt || echo \"exit $?\" > status.txt\n"
        "albert-tf no-such-command 2> /dev/null & wait $! || echo \"background $?\" >> status.txt\n")
    (tmp_path / "block_2.sh").write_text("albert-tf no-such-command\necho not reached\n")
    runnable = [{"line": line, "language": "bash", "script": f"block_{line}.sh"} for line in (1, 2)]
    done = run_program([sys.executable, str(TESTS / "doc_blocks_worker.py")], input=json.dumps(runnable),
                       cwd=tmp_path, env=user_environment(PYTHONPATH=str(REPO)), timeout=120)
    assert done.returncode == 1 and done.stderr.endswith("FAILED 2 2\n"), done.stderr[-3000:]
    assert "not reached" not in done.stdout
    assert (tmp_path / "first.txt").read_text().startswith("usage: albert-tf")
    assert "unknown command 'no-such-command'" in (tmp_path / "err.txt").read_text()
    assert (tmp_path / "status.txt").read_text() == "exit 2\nbackground 2\n"
    ran = re.findall(r"^--- block at line (\d+) took [\d.]+ s, (\d+) albert-tf commands in this process ---$",
                     done.stderr, re.M)
    assert ran == [("1", "2"), ("2", "1")], done.stderr[-3000:]


def test_every_substitution_is_used():
    used = set()
    for page in pages():
        for block in blocks(page):
            if block["language"] in RUN_LANGUAGES and not block["reason"]:
                substituted(block["code"], used)
    unused = set(SUBSTITUTIONS) - used
    assert not unused, f"substitutions no runnable block uses: {sorted(unused)}"
