"""The project speaks of itself, not of how it was made: no "session 19", "issue 13", "round 4"."""

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# "session 19", "sessions 8-12", "session 19's", "session-18"; not a flag such as `--rounds 3`.
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
