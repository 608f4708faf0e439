"""What a reader of bench/ relies on: every script and every results table is indexed, every table the
README and docs cite exists and is indexed, and each names the commit it measured and, for speed and
memory, the CPU. What the scripts compute is tests/benchmarks/test_bench_scripts.py's.
"""

import glob
import os
import re

BENCH_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench")
RESULTS_DIR = os.path.join(BENCH_DIR, "results")
RESULTS_INDEX = os.path.join(RESULTS_DIR, "README.md")
REPO = os.path.dirname(BENCH_DIR)
PAGES = [os.path.join(REPO, "README.md"), *glob.glob(os.path.join(REPO, "docs", "**", "*.md"), recursive=True)]


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def _index_rows(index_path):
    """{normalized path beside the README: its table row} for the first-column links of its tables."""
    folder = os.path.dirname(index_path)
    return {os.path.normpath(os.path.join(folder, match.group(1))): match.group(0)
            for match in re.finditer(r"^\| \[[^\]]+\]\(([^)]+)\).*$", _read(index_path), re.MULTILINE)}


def test_scripts_index_lists_every_script_and_only_existing_ones():
    """bench/README.md has a row for every bench/*.py script, and each row's link resolves."""
    linked = set(_index_rows(os.path.join(BENCH_DIR, "README.md")))
    on_disk = {os.path.normpath(p) for p in glob.glob(os.path.join(BENCH_DIR, "*.py"))}
    assert sorted(linked - on_disk) == [] and sorted(on_disk - linked) == []


def test_results_index_lists_every_results_file_and_only_existing_ones():
    """bench/results/README.md links every results file, and each link resolves; none lie beside the scripts."""
    linked = set(_index_rows(RESULTS_INDEX))
    on_disk = {os.path.normpath(p) for p in glob.glob(os.path.join(RESULTS_DIR, "*.md")) if p != RESULTS_INDEX}
    assert sorted(linked - on_disk) == [] and sorted(on_disk - linked) == []
    assert [os.path.basename(p) for p in glob.glob(os.path.join(BENCH_DIR, "*.md"))] == ["README.md"]


def test_every_results_row_names_its_date_commit_and_status():
    """Each row: `taken` as `DATE, commit SHA`; a status of `current`, `superseded by [file](file): why` with an
    indexed file other than itself, or `superseded: why`."""
    rows = _index_rows(RESULTS_INDEX)
    assert rows
    taken = re.compile(r"\| \d{4}-\d{2}-\d{2}, commits? [0-9a-f]{7,40}\b[^|]*\|[^|]*\|$")
    status = re.compile(r"\| (current( \([^|]+\))?|superseded by \[[^\]]+\]\(([^)]+)\): [^|]+|superseded: [^|]+) \|$")
    for path, row in rows.items():
        assert taken.search(row), f"no `DATE, commit SHA` in the taken column of: {row[:80]}"
        match = status.search(row)
        assert match, f"no status at the end of: {row[:80]}"
        if match.group(3):
            target = os.path.normpath(os.path.join(RESULTS_DIR, match.group(3)))
            assert target in rows and target != path, f"{row[:60]}: superseded by itself or by a file the index lacks"


def test_every_speed_and_memory_table_names_the_cpu():
    """Machines differ between runs: a table made by a script under bench/README.md's speed and memory heading
    says which CPU it ran on."""
    section = _read(os.path.join(BENCH_DIR, "README.md")).split("## Speed and memory benchmarks", 1)[1]
    scripts = re.findall(r"^\| \[[^\]]+\]\(([^)]+\.py)\)", section.split("\n## ", 1)[0], re.MULTILINE)
    assert len(scripts) >= 10, scripts
    tables = [path for path, row in _index_rows(RESULTS_INDEX).items()
              if any(f"bench/{script}" in row.split("|")[3] for script in scripts)]
    assert len(tables) >= 10, tables
    silent = [os.path.basename(p) for p in tables if not re.search(r"\b(AVX\S*|CPU|EPYC|Xeon)\b", _read(p))]
    assert not silent, f"speed and memory tables that name no CPU: {silent}"


def _cited_results():
    """{page: the results files its links point to} for README.md and every page under docs/."""
    return {os.path.relpath(page, REPO): [os.path.normpath(os.path.join(os.path.dirname(page), target))
                                          for target in re.findall(r"\]\(([^)#\s]*bench/results/[^)#\s]*)\)", _read(page))]
            for page in PAGES}


def test_every_link_from_the_readme_and_docs_to_results_resolves():
    cited = _cited_results()
    broken = [f"{page}: {path}" for page, paths in cited.items() for path in paths if not os.path.exists(path)]
    assert sum(map(len, cited.values())) >= 10 and not broken, broken


def test_the_results_index_holds_only_what_the_readme_and_docs_cite():
    """A results file nothing links to any longer leaves the tree (git history keeps it)."""
    cited = {path for paths in _cited_results().values() for path in paths}
    for page in PAGES:  # a path in the text cites too
        cited |= {os.path.join(RESULTS_DIR, name) for name in re.findall(r"bench/results/([\w.-]+\.md)", _read(page))}
    assert sorted(os.path.basename(p) for p in set(_index_rows(RESULTS_INDEX)) - cited) == []
