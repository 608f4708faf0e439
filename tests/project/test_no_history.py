"""The project speaks of itself, not of how it was made: no numbered sessions, issues or rounds.

Results are cited by file, date and commit instead. The examples below are built at run time so
that this file does not match its own pattern.
"""

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# A numbered session, issue or round, in any of the forms below; not a flag such as `--rounds 3`.
HISTORY = re.compile(r"(?i)(?<!--)\b(sessions?|issues?|rounds?)[\s-]+[0-9]")


def tracked_text_files():
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in listed.decode().split("\0"):
        path = REPO / name
        if not name or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:  # binary
            continue
        yield name, data.decode("utf-8", errors="replace")


def test_no_tracked_file_cites_the_projects_development_history():
    hits = [
        f"{name}:{number}: {line.strip()[:120]}"
        for name, text in tracked_text_files()
        for number, line in enumerate(text.split("\n"), 1)
        if HISTORY.search(line)
    ]
    assert not hits, f"{len(hits)} lines cite development history:\n" + "\n".join(hits)


def test_the_pattern_catches_every_form_and_spares_flags():
    for word in ("session", "sessions", "issue", "Issue", "round"):
        for tail in (" 19", " 8-12", " 19's", "-18"):
            assert HISTORY.search(f"as in {word}{tail} we saw"), word + tail
    assert not HISTORY.search("python bench/model_speed.py --rounds 3")
    assert not HISTORY.search("a session of work")
