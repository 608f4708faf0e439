"""The tf.data pipelines (dynamic and static TFRecords) and the create-data CLI."""

import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from albert_tf import cli
from input_pipeline import features, movie_reviews
from cli_helpers import run_cli
from data_fixtures import ORDERED_CONFIG, imdb_documents, ordered_corpus, review_corpus, small_tokenizer
from input_pipeline import PretrainingDataConfig, TokenizedCorpus, make_pretraining_dataset, write_pretraining_tfrecords
from input_pipeline.pretraining import dataset as dataset_module
from input_pipeline.pretraining.examples import instances_of_documents
from input_pipeline.pretraining.dataset import parse_examples
from input_pipeline.pretraining.tfrecord_shards import read_metadata, shard_paths
from input_pipeline.tokenizer import CLS_ID, NUM_SPECIAL_IDS, SEP_ID

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


@pytest.mark.slow
def test_dynamic_same_seed_same_data_and_resume():
    corpus = review_corpus()
    full = take(make_pretraining_dataset(corpus, 4, config=CONFIG, seed=1, flat=True), 20)
    assert_same(full, take(make_pretraining_dataset(corpus, 4, config=CONFIG, seed=1, flat=True), 20))
    # Resuming slices the epoch's order: nothing before the start is made.
    for start in (3, 7):
        resumed = make_pretraining_dataset(corpus, 4, config=CONFIG, seed=1, flat=True, start_step=start)
        assert_same(full[start:], take(resumed, 20 - start))
    other = take(make_pretraining_dataset(corpus, 4, config=CONFIG, seed=2, flat=True), 20)
    assert not np.array_equal(full[0][features.TOKEN_IDS], other[0][features.TOKEN_IDS])


def test_dynamic_resume_in_an_epoch_and_in_the_next_is_the_uninterrupted_stream():
    # 10 pairs per epoch, batches of 4: step 1 resumes inside the first epoch, step 3 inside the second.
    corpus, config = ordered_corpus(num_documents=10, sentence_length=3), ORDERED_CONFIG
    full = take(make_pretraining_dataset(corpus, 4, config=config, seed=1, flat=True), 6)
    for start in (1, 3):
        resumed = make_pretraining_dataset(corpus, 4, config=config, seed=1, flat=True, start_step=start)
        assert_same(full[start:], take(resumed, 6 - start))


def test_dynamic_redraws_every_epoch():
    corpus = TokenizedCorpus.from_documents(imdb_documents()[:12], small_tokenizer())
    epoch_size = len(instances_of_documents(corpus, range(12), CONFIG, (5,)))
    dataset = make_pretraining_dataset(corpus, 1, config=CONFIG, seed=5, flat=True)
    examples = [{k: v[0] for k, v in b.items()} for b in take(dataset, 2 * epoch_size)]
    first, second = examples[:epoch_size], examples[epoch_size:]
    # Masks are drawn afresh: (almost) no example comes back with the same masks and order.
    masks = [{(e[features.MASK_POSITIONS].tobytes(), e[features.TOKEN_IDS].tobytes()) for e in part}
             for part in (first, second)]
    assert len(masks[0]) == epoch_size and len(masks[0] & masks[1]) <= epoch_size // 10
    # Each epoch is a new order of the same pairs; the padded lengths say which pair is where.
    lengths = [sorted(int(e[features.PADDING_MASK].sum()) for e in part) for part in (first, second)]
    assert lengths[0] == lengths[1]
    assert [int(e[features.PADDING_MASK].sum()) for e in first] != [int(e[features.PADDING_MASK].sum()) for e in second]


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


@pytest.mark.slow
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
    assert warning.startswith("albert-tf create-data: warning: 100% of the examples have sentence_order_label 1")
    assert "100% of the 400 documents have one sentence" in warning and "--format lines --split-sentences" in warning
    # Split into sentences, the reviews form pairs: about half the labels are 0 (one-sentence chunks
    # still take another document's B, label 1, as in the original), and nothing is warned.
    split = labels["split", "out"]
    assert 0.45 < labels["split"].mean() < 0.6, labels["split"].mean()
    assert not _warnings(split) and f"sentence_order_label 0/1: {np.sum(labels['split'] == 0)}/" in split.stdout


@pytest.mark.slow
def test_raw_text_pretrain_reports_the_sop_balance(tmp_path):
    corpus = _one_review_per_line(tmp_path, count=100)
    tiny = ["--embedding-size", "16", "--hidden-size", "32", "--num-layers", "1", "--num-heads", "2",
            "--intermediate-size", "64", "--max-seq-length", "128", "--batch-size", "4", "--steps", "1",
            "--compile-step", "none"]
    lines = run_cli("pretrain", "--data", corpus, "--tokenizer", tmp_path / "tok", "--out", tmp_path / "a", *tiny)
    assert "Sentence pairs: 100 of 100 documents (100.0%) have one sentence; sentence_order_label 0/1: 0/" in lines.stdout
    [warning] = _warnings(lines)
    assert warning.startswith("albert-tf pretrain: warning: 100% of the examples have sentence_order_label 1")
    assert "100% of the 100 documents have one sentence" in warning and "--format lines --split-sentences" in warning
    split = run_cli("pretrain", "--data", corpus, "--tokenizer", tmp_path / "tok", "--out", tmp_path / "b",
                    "--split-sentences", *tiny)
    assert not _warnings(split) and "sentence_order_label 0/1: " in split.stdout
    zeros, ones = map(int, split.stdout.split("sentence_order_label 0/1: ")[1].split()[0].split("/"))
    assert 0.45 < ones / (zeros + ones) < 0.65


@pytest.fixture(scope="module")
def records_dir(tmp_path_factory):
    """create-data output: 3 shards of about 40 documents x 2 passes."""
    out = tmp_path_factory.mktemp("records")
    write_pretraining_tfrecords(imdb_documents()[:120], small_tokenizer(), out, CONFIG, dupe_factor=2, seed=3,
                                num_workers=0, documents_per_shard=40)
    return str(out)


def test_static_resume_at_any_step_equals_the_uninterrupted_stream(records_dir):
    total = read_metadata(records_dir)["num_examples"]
    full = take(make_pretraining_dataset(records_dir, 4, seed=4, flat=True, shuffle_buffer_size=16), total // 4 + 12)
    for start in (1, 13, total // 4 - 1, total // 4 + 5):  # inside epoch 0, at its end, inside epoch 1
        resumed = make_pretraining_dataset(records_dir, 4, seed=4, flat=True, shuffle_buffer_size=16, start_step=start)
        assert_same(full[start : start + 5], take(resumed, 5))
    # Every record once per epoch; the next epoch reads them in a new order.
    rows = [row.tobytes() for b in full for row in b[features.TOKEN_IDS]]
    stored = tf.data.TFRecordDataset(shard_paths(records_dir)).batch(64).map(lambda s: parse_examples(s, CONFIG))
    assert sorted(rows[:total]) == sorted(row.tobytes() for b in stored for row in b[features.TOKEN_IDS].numpy())
    assert set(rows[total : total + 40]) <= set(rows[:total]) and rows[total : total + 40] != rows[:40]


@pytest.mark.parametrize("num_pipelines", [2, 4])  # by file (3 shards), by record
def test_static_resume_per_input_pipeline(records_dir, num_pipelines):
    for pipeline in range(num_pipelines):
        context = tf.distribute.InputContext(num_pipelines, pipeline, num_pipelines)
        full = take(make_pretraining_dataset(records_dir, 4 * num_pipelines, context, seed=1, flat=True), 12)
        resumed = make_pretraining_dataset(records_dir, 4 * num_pipelines, context, seed=1, flat=True, start_step=9)
        assert_same(full[9:12], take(resumed, 3))


def test_static_resume_reads_nothing_before_its_position(records_dir, tmp_path):
    """The shards before the resume position are corrupted: reading them would fail."""
    counts = read_metadata(records_dir)["shard_examples"]
    order = dataset_module._permutation(3, dataset_module._key(7, dataset_module._ORDER, 0)).numpy()
    start_step = (counts[order[0]] + counts[order[1]]) // 4 + 1  # inside the epoch's third shard
    expected = take(make_pretraining_dataset(records_dir, 4, seed=7, flat=True, shuffle_buffer_size=4,
                                             start_step=start_step), 1)
    damaged = tmp_path / "damaged"
    shutil.copytree(records_dir, damaged)
    for shard in order[:2]:
        path = damaged / f"pretraining-{shard:05d}.tfrecord"
        path.write_bytes(b"\0" * path.stat().st_size)  # the size metadata.json records: only reading tells
    resumed = make_pretraining_dataset(str(damaged), 4, seed=7, flat=True, shuffle_buffer_size=4,
                                       start_step=start_step)
    assert_same(expected, take(resumed, 1))


def test_dynamic_sop_labels_are_balanced_and_label_1_swaps_the_document_order():
    corpus = ordered_corpus(num_documents=200, sentence_length=3)
    examples = take(make_pretraining_dataset(corpus, 400, config=ORDERED_CONFIG, seed=7, flat=True), 1)[0]
    tokens = examples[features.TOKEN_IDS].copy()
    # The masked pieces put back: the segments as the document holds them.
    rows, slots = np.nonzero(examples[features.MASK_WEIGHTS])
    tokens[rows, examples[features.MASK_POSITIONS][rows, slots]] = examples[features.MASK_IDS][rows, slots]
    labels = examples[features.SENTENCE_ORDER_LABEL]
    for row, label in zip(tokens, labels):
        # [CLS] A [SEP] B [SEP] with A and B one sentence each.
        assert row[0] == CLS_ID and row[4] == SEP_ID and row[8] == SEP_ID
        a, b = row[1:4], row[5:8]
        first, second = (b, a) if label == 1 else (a, b)
        document = (first[0] - NUM_SPECIAL_IDS) // 6
        start = NUM_SPECIAL_IDS + 6 * document
        np.testing.assert_array_equal(first, np.arange(start, start + 3))
        np.testing.assert_array_equal(second, np.arange(start + 3, start + 6))
    # Each label is a fair coin: 400 draws stay within 4 standard deviations (10) of 200 (false alarm < 1e-4).
    assert abs(int(labels.sum()) - 200) <= 40, labels.sum()
