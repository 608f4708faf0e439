"""The README's road in one quick run: each command a fresh `albert-tf` process, its output fed to the next.

Each process's stderr holds no line of TensorFlow's start-up logging.

The quick loop (`pytest -m "not slow"`) keeps this one end-to-end journey;
tests/commands/test_journeys.py walks every branch of it with larger data.
"""

import json

import numpy as np

from cli_helpers import run_cli
from input_pipeline import movie_reviews
from journey_fixtures import TINY_MODEL, assert_quiet_stderr, strict_json_lines, write_sentences_corpus, write_sst2


def test_tokenizer_data_pretrain_finetune_predict_export(tmp_path):
    write_sentences_corpus(tmp_path / "corpus", movie_reviews.imdb_documents("pretrain", limit=120))
    everything = movie_reviews.rotten_tomatoes_sentences()
    rows = [everything[i] for i in np.random.default_rng(0).permutation(len(everything))[:48]]
    write_sst2(str(tmp_path / "SST-2" / "train.tsv"), rows[:32])
    write_sst2(str(tmp_path / "SST-2" / "dev.tsv"), rows[32:])

    runs = [
        run_cli("train-tokenizer", "--input", "corpus/", "--vocab-size", "300", "--out", "tok/", cwd=tmp_path,
                fresh=True),
        run_cli("create-data", "--input", "corpus/", "--tokenizer", "tok/", "--out", "data/", "--max-seq-length", "32",
                "--dupe-factor", "1", cwd=tmp_path, fresh=True),
        run_cli("pretrain", *TINY_MODEL, "--data", "data/", "--out", "runs/base", "--batch-size", "8", "--steps", "2",
                "--compile-step", "none", cwd=tmp_path, fresh=True),
        run_cli("finetune", "--task", "sst2", "--model", "runs/base/final", "--train", "SST-2/train.tsv",
                "--eval", "SST-2/dev.tsv", "--out", "runs/sst2", "--batch-size", "16", "--epochs", "1",
                cwd=tmp_path, fresh=True),
        run_cli("predict", "--model", "runs/sst2", cwd=tmp_path, fresh=True,
                input="a gorgeous, witty film\nflat and dull\n"),
        run_cli("export", "--model", "runs/sst2", "--format", "saved_model", "--out", "saved_models/sst2",
                cwd=tmp_path, fresh=True),
    ]
    predicted = strict_json_lines(runs[4].stdout)
    assert [row["index"] for row in predicted] == [0, 1] and all(row["label"] in ("0", "1") for row in predicted)
    assert all(abs(sum(row["probabilities"]) - 1) < 1e-5 for row in predicted), predicted
    for done in runs:
        assert_quiet_stderr(done)

    assert (tmp_path / "runs" / "base" / "final" / "tokenizer" / "spiece.model").is_file()
    assert json.loads((tmp_path / "runs" / "sst2" / "finetune.json").read_text())["label_names"] == ["0", "1"]
    assert (tmp_path / "saved_models" / "sst2" / "1" / "saved_model.pb").is_file()
