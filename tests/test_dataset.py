"""The tf.data pipelines (dynamic and static TFRecords) and the create-data CLI."""

import os

import numpy as np
import pytest
import tensorflow as tf

from albert_tf import cli
from input_pipeline import features, movie_reviews
from cli_helpers import run_cli
from data_fixtures import imdb_documents, review_corpus, small_tokenizer
from input_pipeline import PretrainingDataConfig, TokenizedCorpus, make_pretraining_dataset, write_pretraining_tfrecords
from input_pipeline.pretraining.examples import instances_of_documents

CONFIG = PretrainingDataConfig(max_seq_length=64, max_predictions_per_seq=10)


def take(dataset, n):
    return [tf.nest.map_structure(lambda t: t.numpy(), b) for b in dataset.take(n)]


def assert_same(a, b):
    tf.nest.map_structure(np.testing.assert_array_equal, a, b)


def test_dynamic_batches_fixed_shapes_for_fit():
    dataset = make_pretraining_dataset(review_corpus(), 8, config=CONFIG, seed=0)
    inputs, labels = dataset.element_spec
    assert set(inputs) == {features.TOKEN_IDS, features.SEGMENT_IDS, features.PADDING_MASK, features.MASK_POSITIONS}
    assert set(labels) == {features.MASK_IDS, features.MASK_WEIGHTS, features.SENTENCE_ORDER_LABEL}
    assert inputs[features.TOKEN_IDS].shape == (8, 64) and inputs[features.MASK_POSITIONS].shape == (8, 10)
    assert labels[features.SENTENCE_ORDER_LABEL].shape == (8,) and labels[features.MASK_WEIGHTS].dtype == tf.float32
    assert inputs[features.TOKEN_IDS].dtype == tf.int32


def test_dynamic_same_seed_same_data_and_resume():
    corpus = review_corpus()
    full = take(make_pretraining_dataset(corpus, 4, config=CONFIG, seed=1, flat=True, chunk_size=4, num_streams=3), 20)
    assert_same(full, take(make_pretraining_dataset(corpus, 4, config=CONFIG, seed=1, flat=True, chunk_size=4, num_streams=3), 20))
    # Resuming skips whole rounds inside the streams and the rest in tf.data.
    for start in (3, 7):
        resumed = make_pretraining_dataset(corpus, 4, config=CONFIG, seed=1, flat=True, chunk_size=4, num_streams=3, start_step=start)
        assert_same(full[start:], take(resumed, 20 - start))
    other = take(make_pretraining_dataset(corpus, 4, config=CONFIG, seed=2, flat=True, chunk_size=4, num_streams=3), 20)
    assert not np.array_equal(full[0][features.TOKEN_IDS], other[0][features.TOKEN_IDS])


def test_dynamic_redraws_every_epoch():
    corpus = TokenizedCorpus.from_documents(imdb_documents()[:12], small_tokenizer())
    epoch_size = len(instances_of_documents(corpus, range(12), CONFIG, (5, 0)))
    dataset = make_pretraining_dataset(corpus, 1, config=CONFIG, seed=5, flat=True, num_streams=1, chunk_size=1)
    tokens = [b[features.TOKEN_IDS][0] for b in take(dataset, 2 * epoch_size)]
    first, second = {t.tobytes() for t in tokens[:epoch_size]}, {t.tobytes() for t in tokens[epoch_size:]}
    assert len(first) == epoch_size and not first & second


def test_input_context_shards_pipelines():
    corpus = review_corpus()
    batches = []
    for pipeline in range(2):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pipeline, num_replicas_in_sync=2)
        batches.append(take(make_pretraining_dataset(corpus, 16, context, config=CONFIG, seed=0, flat=True), 3))
    assert batches[0][0][features.TOKEN_IDS].shape == (8, 64)
    first = {row.tobytes() for b in batches[0] for row in b[features.TOKEN_IDS]}
    assert not first & {row.tobytes() for b in batches[1] for row in b[features.TOKEN_IDS]}
    with pytest.raises(ValueError, match="config"):
        make_pretraining_dataset(corpus, 16)


def test_static_tfrecords_round_trip_and_resume(tmp_path):
    tokenizer, documents = small_tokenizer(), imdb_documents()[:120]
    stats = write_pretraining_tfrecords(documents, tokenizer, tmp_path, CONFIG, dupe_factor=2, seed=3, num_workers=0, documents_per_shard=50)
    assert stats["num_shards"] == 3 and stats["num_documents"] == 120
    records = sum(1 for _ in tf.data.TFRecordDataset(sorted(str(p) for p in tmp_path.glob("*.tfrecord"))))
    assert records == stats["num_examples"]
    full = take(make_pretraining_dataset(str(tmp_path), 8, seed=4, flat=True), 6)
    assert full[0][features.TOKEN_IDS].shape == (8, 64) and full[0][features.MASK_WEIGHTS].dtype == np.float32
    assert_same(full[2:], take(make_pretraining_dataset(str(tmp_path), 8, seed=4, flat=True, start_step=2), 4))
    inputs, _ = next(iter(make_pretraining_dataset(str(tmp_path), 8, config=CONFIG, seed=4)))
    assert inputs[features.SEGMENT_IDS].shape == (8, 64)
    with pytest.raises(ValueError, match="does not match"):
        make_pretraining_dataset(str(tmp_path), 8, config=PretrainingDataConfig(max_seq_length=128))


@pytest.mark.slow
def test_create_data_cli_is_independent_of_worker_count(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join("\n".join(d) for d in imdb_documents()[:90]), encoding="utf-8")
    small_tokenizer().save(tmp_path / "tok")
    outputs = []
    for workers in (0, 2):
        out = tmp_path / f"out{workers}"
        args = ["create-data", "--input", str(corpus), "--tokenizer", str(tmp_path / "tok"), "--out", str(out),
                "--max-seq-length", "64", "--dupe-factor", "2", "--num-workers", str(workers), "--documents-per-shard", "40"]
        assert cli.main(args) == 0
        assert (out / "tokenizer" / "spiece.model").is_file()  # the data carries its tokenizer
        outputs.append({name: (out / name).read_bytes() for name in sorted(os.listdir(out)) if name != "tokenizer"})
    assert outputs[0] == outputs[1] and len(outputs[0]) == 4  # 3 shards + metadata.json


def _one_review_per_line(tmp_path, count=400):
    """IMDB reviews one per line, a blank line between: the format most corpora come in."""
    corpus = tmp_path / "reviews.txt"
    corpus.write_text("\n\n".join(text for text, _ in movie_reviews.imdb_reviews()[:count]) + "\n", encoding="utf-8")
    small_tokenizer().save(tmp_path / "tok")
    return corpus


def _warnings(done):
    return [line for line in done.stderr.splitlines() if "warning" in line]


def test_create_data_says_what_one_text_per_line_makes_of_sop(tmp_path):
    corpus = _one_review_per_line(tmp_path)
    labels = {}
    for name, flags in (("lines", []), ("split", ["--split-sentences"])):
        done = run_cli("create-data", "--input", corpus, "--tokenizer", tmp_path / "tok", "--out", tmp_path / name,
                       "--dupe-factor", "2", "--num-workers", "0", *flags)
        records = tf.data.TFRecordDataset(sorted(str(p) for p in (tmp_path / name).glob("*.tfrecord")))
        labels[name] = np.array([
            tf.train.Example.FromString(r.numpy()).features.feature[features.SENTENCE_ORDER_LABEL].int64_list.value[0]
            for r in records
        ])
        labels[name, "out"] = done
    # Each review read as one sentence pairs with another review: label 1 on every example, and one warning.
    lines = labels["lines", "out"]
    assert labels["lines"].all() and len(labels["lines"]) == 800
    assert "400 of 400 documents (100.0%) have one sentence; sentence_order_label 0/1: 0/800" in lines.stdout
    [warning] = _warnings(lines)
    assert warning.startswith("albert-tf create-data: warning: 100% of the documents have one sentence") and (
        "--split-sentences" in warning)
    # Split into sentences, the reviews form pairs: about half the labels are 0 (one-sentence chunks
    # still take another document's B, label 1, as in the original), and nothing is warned.
    split = labels["split", "out"]
    assert 0.45 < labels["split"].mean() < 0.6, labels["split"].mean()
    assert not _warnings(split) and f"sentence_order_label 0/1: {np.sum(labels['split'] == 0)}/" in split.stdout


@pytest.mark.slow
def test_raw_text_pretrain_reports_the_sop_balance(tmp_path):
    corpus = _one_review_per_line(tmp_path, count=100)
    tiny = ["--embedding-size", "16", "--hidden-size", "32", "--num-layers", "1", "--num-heads", "2",
            "--intermediate-size", "64", "--max-seq-length", "128", "--batch-size", "4", "--steps", "1"]
    lines = run_cli("pretrain", "--data", corpus, "--tokenizer", tmp_path / "tok", "--out", tmp_path / "a", *tiny)
    assert "Sentence pairs: 100 of 100 documents (100.0%) have one sentence; sentence_order_label 0/1: 0/" in lines.stdout
    [warning] = _warnings(lines)
    assert warning.startswith("albert-tf pretrain: warning: 100% of the documents") and "--split-sentences" in warning
    split = run_cli("pretrain", "--data", corpus, "--tokenizer", tmp_path / "tok", "--out", tmp_path / "b",
                    "--split-sentences", *tiny)
    assert not _warnings(split) and "sentence_order_label 0/1: " in split.stdout
    zeros, ones = map(int, split.stdout.split("sentence_order_label 0/1: ")[1].split()[0].split("/"))
    assert 0.45 < ones / (zeros + ones) < 0.65
