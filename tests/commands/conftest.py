"""The README tour, built once per run with the CLI itself and shared by the CLI journeys.

`tour` holds what a user brings (an IMDB corpus, SST-2 train/dev files), the
tiny `pretrained` run (train-tokenizer -> create-data -> pretrain) and the
`finetuned` SST-2 run on it. The first test process that asks builds them
(`build_once`, tests/conftest.py); each process works in its own copy. Each
test writes its own outputs under `tour` by names no other test uses, and
reads the shared ones without changing them.
"""

import shutil

import numpy as np
import pytest

from cli_helpers import run_cli
from input_pipeline import movie_reviews
from journey_fixtures import TINY_MODEL, write_sentences_corpus, write_sst2


def _build_tour(root):
    """What a user following the README brings (an IMDB corpus, SST-2 train/dev files), then
    train-tokenizer -> create-data -> pretrain -> finetune in the README's order and flags."""
    write_sentences_corpus(root / "corpus", movie_reviews.imdb_documents("pretrain", limit=300))
    everything = movie_reviews.rotten_tomatoes_sentences()
    order = np.random.default_rng(0).permutation(len(everything))
    rows = [(everything[i][0], everything[i][1]) for i in order[:96]]
    write_sst2(str(root / "SST-2" / "train.tsv"), rows[:64])
    write_sst2(str(root / "SST-2" / "dev.tsv"), rows[64:])
    run_cli("train-tokenizer", "--input", "corpus/", "--vocab-size", "400", "--out", "tok/", cwd=root)
    run_cli("create-data", "--input", "corpus/", "--tokenizer", "tok/", "--out", "data/",
            "--max-seq-length", "64", "--dupe-factor", "1", cwd=root)
    # No --tokenizer and no --warmup-steps: the data directory carries the
    # tokenizer, and warmup is a fraction of the steps. No XLA: the tests about
    # it build their own runs (tests/training/test_training_loop.py).
    run_cli("pretrain", "--preset", "base", *TINY_MODEL, "--data", "data/", "--out", "runs/base",
            "--strategy", "mirrored", "--batch-size", "8", "--steps", "6", "--compile-step", "none", cwd=root)
    # --pooling cls: the export tolerances below were set on the pooled-[CLS] head; with this tiny
    # model's default (mean) one 16x8 row missed its 0.05 by 0.024 (test_finetune_cli covers "auto").
    run_cli("finetune", "--task", "sst2", "--model", "runs/base/final", "--train", "SST-2/train.tsv",
            "--eval", "SST-2/dev.tsv", "--out", "runs/sst2", "--batch-size", "16", "--epochs", "1",
            "--pooling", "cls", cwd=root)


@pytest.fixture(scope="session")
def tour(build_once, tmp_path_factory):
    """This test process's copy of the tour, built once per run: its tests write their outputs into it."""
    built, _ = build_once("tour", _build_tour)
    root = tmp_path_factory.mktemp("tour")
    shutil.copytree(built, root, dirs_exist_ok=True)
    return root


@pytest.fixture(scope="session")
def pretrained(tour):
    return tour / "runs" / "base"


@pytest.fixture(scope="session")
def finetuned(tour):
    return tour / "runs" / "sst2"
