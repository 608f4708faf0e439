"""Every benchmark script builds its command line (`--help`): a renamed config field must not break one unnoticed."""

import contextlib
import glob
import io
import os
import runpy
import sys

import pytest

BENCH_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")
SCRIPTS = sorted(os.path.basename(p) for p in glob.glob(os.path.join(BENCH_DIR, "*.py")) if not p.endswith("bench_utils.py"))


def test_the_benchmarks_are_found():
    assert {"transfer.py", "anisotropy.py", "model_speed.py"} <= set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_benchmark_help_prints_usage(script, monkeypatch):
    monkeypatch.syspath_prepend(BENCH_DIR)
    monkeypatch.setattr(sys, "argv", [script, "--help"])
    printed = io.StringIO()
    with pytest.raises(SystemExit) as exit_info, contextlib.redirect_stdout(printed):
        runpy.run_path(os.path.join(BENCH_DIR, script), run_name="__main__")
    assert exit_info.value.code in (0, None)
    assert printed.getvalue().startswith("usage:")


def test_transfer_keys_random_init_by_config_and_tokenizer(monkeypatch):
    """Random init's cached result is found again whichever model lends the config, and only then."""
    from data_fixtures import VOCAB_SIZE, imdb_documents, small_tokenizer
    from helpers import tiny_config

    from input_pipeline import AlbertTokenizer

    monkeypatch.syspath_prepend(BENCH_DIR)
    identity = runpy.run_path(os.path.join(BENCH_DIR, "transfer.py"))["random_init_identity"]
    tokenizer = small_tokenizer()
    config = tiny_config(vocab_size=VOCAB_SIZE)
    same_tokenizer = AlbertTokenizer(tokenizer.model_proto, tokenizer.preprocessing, tokenizer.language)
    assert identity(config, tokenizer) == identity(tiny_config(vocab_size=VOCAB_SIZE), same_tokenizer)
    assert identity(config, tokenizer) != identity(tiny_config(vocab_size=VOCAB_SIZE, hidden_size=48), tokenizer)
    other = AlbertTokenizer.train((s for d in imdb_documents()[:300] for s in d), 200, num_threads=2)
    assert identity(config, tokenizer) != identity(config, other)
