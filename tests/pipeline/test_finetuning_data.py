import json

import numpy as np
import pytest
from scipy import stats

from albert_tf.recipes import metrics
from input_pipeline import features
from input_pipeline.features import IGNORE_LABEL
from data_fixtures import small_tokenizer
from input_pipeline.finetuning import (
    GLUE_TASKS, ChoiceEncoder, TaggingEncoder, TextEncoder, TextExample, make_dataset, read_glue,
    counted, read_label_set, read_race, read_table, read_tagging,
)
from input_pipeline.tokenizer import CLS_ID, SEP_ID

# Header and one row of each GLUE task's dev file, as the GLUE download script writes them.
GLUE_ROWS = {
    "cola": (None, "gj04\t1\t\tThe book was read by Mary.", 1),
    "sst2": ("sentence\tlabel", "a gorgeous film \t1", 1),
    "mrpc": ("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String", "1\t1\t2\tHe left.\tHe went away.", 1),
    "stsb": ("index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore",
             "0\tmain\tf\t2012\t1\tnone\tnone\tA man plays.\tA man is playing.\t4.8", 4.8),
    "qqp": ("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate", "1\t2\t3\tWhy?\tHow come?\t0", 0),
    "mnli": ("index\tpromptID\tpairID\tgenre\ts1bp\ts2bp\ts1p\ts2p\tsentence1\tsentence2\tlabel1\tgold_label",
             '0\t1\t2\tfiction\tx\tx\tx\tx\tHe said "hi.\tHe spoke.\tentailment\tentailment', 1),
    "qnli": ("index\tquestion\tsentence\tlabel", "0\tWho?\tShe did.\tnot_entailment", 1),
    "rte": ("index\tsentence1\tsentence2\tlabel", "0\tA dog runs.\tAn animal moves.\tentailment", 0),
    "wnli": ("index\tsentence1\tsentence2\tlabel", "0\tIt fell.\tThe cup fell.\t1", 1),
}


def write(tmp_path, name, lines):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("task", sorted(GLUE_TASKS))
def test_glue_readers(task, tmp_path):
    header, row, label = GLUE_ROWS[task]
    path = write(tmp_path, "dev.tsv", ([header] if header else []) + [row])
    example, = read_glue(path, task).examples
    assert example.label == label and example.source == f"{path}:{2 if header else 1}"
    assert (example.text_b is None) == (GLUE_TASKS[task].text_b is None)


def test_glue_bad_rows_name_file_and_line(tmp_path):
    path = write(tmp_path, "train.tsv", ["index\tsentence1\tsentence2\tlabel", "0\ta\tb\tentailment",
                                         "1\ta\tb\tmaybe", "2\tshort"])
    with pytest.raises(ValueError, match=r"train.tsv:3: label 'maybe' is not in the label set"):
        read_glue(path, "rte")
    result = read_glue(path, "rte", on_error="skip")
    assert len(result.examples) == 1 and [s.source for s in result.skipped] == [f"{path}:3", f"{path}:4"]
    assert "2 skipped" in result.summary()
    with pytest.raises(ValueError, match=r"train.tsv: missing column\(s\) \['question', 'sentence'\]"):
        read_glue(path, "qnli")


def test_csv_and_jsonl_tables(tmp_path):
    csv_path = write(tmp_path, "d.csv", ["review,stars", '"Great, really",pos', "Awful,neg"])
    assert read_label_set(csv_path, "stars") == ["neg", "pos"]
    result = read_table(csv_path, "review", label_column="stars", label_names=["neg", "pos"])
    assert [(e.text_a, e.label) for e in result.examples] == [("Great, really", 1), ("Awful", 0)]
    jsonl = write(tmp_path, "d.jsonl", [json.dumps({"q": "a", "p": "b", "y": 0.5}), json.dumps({"q": "c", "p": "d"})])
    with pytest.raises(ValueError, match=r"d.jsonl:2: missing value for column\(s\) \['y'\]"):
        read_table(jsonl, "q", "p", "y")
    with pytest.raises(ValueError, match=r"missing column\(s\) \['text'\]"):
        read_table(csv_path, "text", label_column="stars", label_names=["neg", "pos"])
    with pytest.raises(ValueError, match=r"d.csv:3: label 'neg' is not in the label set \['pos'\]"):
        read_table(csv_path, "review", label_column="stars", label_names=["pos"])


def test_an_empty_text_cell_is_a_bad_row_refused_or_skipped_with_a_count(tmp_path):
    csv_path = write(tmp_path, "d.csv", ["review,stars", "Great,pos", ",neg", '"  ",pos', "Awful,neg"])
    with pytest.raises(ValueError, match=r"d.csv:3: empty text in column\(s\) \['review'\]"):
        read_table(csv_path, "review", label_column="stars", label_names=["neg", "pos"])
    result = read_table(csv_path, "review", label_column="stars", label_names=["neg", "pos"], on_error="skip")
    assert [e.text_a for e in result.examples] == ["Great", "Awful"]
    assert result.summary() == f"2 examples, 2 skipped (first: {csv_path}:3: empty text in column(s) ['review'])"
    jsonl = write(tmp_path, "d.jsonl", [json.dumps({"q": "a", "p": "", "y": 0.5})])
    with pytest.raises(ValueError, match=r"d.jsonl:1: empty text in column\(s\) \['p'\]"):
        read_table(jsonl, "q", "p", "y")
    tsv = write(tmp_path, "train.tsv", ["index\tsentence1\tsentence2\tlabel", "0\ta\t \tentailment"])
    with pytest.raises(ValueError, match=r"train.tsv:2: empty text in column\(s\) \['sentence2'\]"):
        read_glue(tsv, "rte")


def test_text_encoder_layout_and_length_policy():
    tokenizer = small_tokenizer()
    pair = TextExample("a good film", "it was fine", 1, "f.tsv:7")
    encoded = TextEncoder(tokenizer, 64).encode(pair)
    ids, segments = encoded[features.TOKEN_IDS], encoded[features.SEGMENT_IDS]
    n_a = len(tokenizer.encode("a good film"))
    assert ids[0] == CLS_ID and ids[n_a + 1] == SEP_ID and ids[-1] == SEP_ID
    assert segments.tolist() == [0] * (n_a + 2) + [1] * (len(ids) - n_a - 2)
    with pytest.raises(ValueError, match=r"f.tsv:7: \d+ pieces, longer than max_seq_length=6"):
        TextEncoder(tokenizer, 6).encode(pair)
    encoder = TextEncoder(tokenizer, 6, truncate=True)
    assert len(encoder.encode(pair)[features.TOKEN_IDS]) == 6 and encoder.num_truncated == 1


def test_batches_are_padded_to_their_longest_example():
    inputs = [{name: np.ones(n, "int32") for name in features.BACKBONE_INPUTS} for n in (3, 5, 9, 4)]
    widths = [b[0][features.TOKEN_IDS].shape[1] for b in make_dataset(inputs, [0, 1, 0, 1], batch_size=2)]
    assert widths == [5, 9]
    fixed = [b[features.TOKEN_IDS].shape for b in make_dataset(inputs, batch_size=2, pad_to=16)]
    assert fixed == [(2, 16), (2, 16)]
    tags = [np.zeros(n, "int32") for n in (3, 5, 9, 4)]
    batch = next(iter(make_dataset(inputs, tags, batch_size=2, label_pad=IGNORE_LABEL)))
    assert batch[1].numpy()[0].tolist() == [0, 0, 0, IGNORE_LABEL, IGNORE_LABEL]
    bucketed = make_dataset(inputs, [0] * 4, batch_size=2, bucket=True)
    assert sorted(b[0][features.TOKEN_IDS].shape[1] for b in bucketed) == [4, 9]


def test_race_reader_and_encoder(tmp_path):
    article = {"id": "m1.txt", "article": "Tom has a red bike. He rides it to school.",
               "questions": ["What colour is the bike?", "Tom rides _ to school."],
               "options": [["red", "blue", "green", "black"], ["a bus", "it", "a car", "a horse"]],
               "answers": ["A", "B"]}
    (tmp_path / "race").mkdir()
    (tmp_path / "race" / "m1.txt").write_text(json.dumps(article))
    examples = read_race(str(tmp_path / "race")).examples
    assert [e.label for e in examples] == [0, 1]
    encoded = ChoiceEncoder(small_tokenizer(), max_seq_length=64).encode(examples[1])
    assert encoded[features.TOKEN_IDS].shape[0] == 4
    bad = dict(article, answers=["A", "E"])
    (tmp_path / "race" / "m1.txt").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match=r"m1.txt question 1: answer 'E' is not one of the options"):
        read_race(str(tmp_path / "race"))


def test_tagging_labels_only_the_first_piece(tmp_path):
    path = write(tmp_path, "ner.conll", ["Steven NNP B-PER", "Spielberg NNP I-PER", "filmed VBD O", "",
                                         "Paris NNP B-LOC"])
    examples = read_tagging(path).examples
    assert [e.source for e in examples] == [f"{path}:1", f"{path}:5"]
    encoder = TaggingEncoder(small_tokenizer(), 32, ["B-LOC", "B-PER", "I-PER", "O"])
    inputs, labels, first = encoder.encode(examples[0])
    assert labels[first].tolist() == [1, 2, 3]
    others = np.delete(labels, first)
    assert np.all(others == IGNORE_LABEL) and len(labels) == len(inputs[features.TOKEN_IDS])
    with pytest.raises(ValueError, match=r"ner.conll:1: \d+ pieces, longer than max_seq_length=3"):
        TaggingEncoder(small_tokenizer(), 3, ["B-PER", "I-PER", "O"]).encode(examples[0])


def test_metrics_against_references():
    rng = np.random.default_rng(0)
    labels, predictions = rng.integers(0, 2, 200), rng.integers(0, 2, 200)
    predictions[:120] = labels[:120]
    mcc_ref = np.corrcoef(labels, predictions)[0, 1]  # binary MCC is the phi coefficient
    assert metrics.matthews_corrcoef(labels, predictions) == pytest.approx(mcc_ref)
    tp = np.sum((labels == 1) & (predictions == 1))
    assert metrics.f1(labels, predictions) == pytest.approx(
        2 * tp / (np.sum(labels == 1) + np.sum(predictions == 1)))
    x, y = rng.normal(size=50), rng.integers(0, 5, 50).astype(float)  # y has ties
    assert metrics.pearson(x, y) == pytest.approx(stats.pearsonr(x, y)[0])
    assert metrics.spearman(x, y) == pytest.approx(stats.spearmanr(x, y)[0])
    np.testing.assert_array_equal(metrics.average_ranks(y), stats.rankdata(y))
    assert metrics.matthews_corrcoef([1, 1], [1, 1]) == 0.0


def test_a_label_set_of_one_is_refused_before_training(tmp_path):
    from albert_tf.recipes import RECIPES, FinetuneConfig

    one = write(tmp_path, "one.csv", ["text,label", "good,pos", "fine,pos"])
    two = write(tmp_path, "two.csv", ["text,label", "good,pos", "awful,neg"])
    classification = RECIPES["classification"]
    with pytest.raises(ValueError, match=r"one.csv's column 'label' has a single label, 'pos'; a classifier needs"):
        classification.label_names(one, FinetuneConfig(task="classification"))
    assert classification.label_names(two, FinetuneConfig(task="classification")) == ["neg", "pos"]
    with pytest.raises(ValueError, match=r"--labels has a single label, 'pos'"):
        classification.label_names(two, FinetuneConfig(task="classification", label_names=("pos",)))
    assert RECIPES["regression"].label_names(one, FinetuneConfig(task="regression")) is None
    tags = write(tmp_path, "o.conll", ["Paris NNP O", "", "filmed VBD O"])
    with pytest.raises(ValueError, match=r"o.conll has a single tag, 'O'"):
        RECIPES["tagging"].label_names(tags, FinetuneConfig(task="tagging"))


def test_counts_read_as_english():
    assert [counted(n, "examples") for n in (0, 1, 2)] == ["0 examples", "1 example", "2 examples"]


def test_text_encoder_windows_split_long_texts_and_refuse_pairs():
    tokenizer = small_tokenizer()
    text = "a good film with a fine cast and a story that goes nowhere at all " * 3
    n = len(tokenizer.encode(text))
    example = TextExample(text, None, 1, "f.tsv:3")
    encoder = TextEncoder(tokenizer, 12, max_windows=8)
    windows = encoder.encode_windows(example)
    assert len(windows) == -(-n // 10) and encoder.num_windowed == 1 and encoder.num_truncated == 0
    pieces = [w[features.TOKEN_IDS] for w in windows]
    assert all(p[0] == CLS_ID and p[-1] == SEP_ID and len(p) <= 12 for p in pieces)
    assert [i for p in pieces for i in p[1:-1]] == list(tokenizer.encode(text))  # every piece, in order
    short = TextEncoder(tokenizer, 12, max_windows=8).encode_windows(TextExample("a good film", None, 1, "f:1"))
    assert len(short) == 1
    with pytest.raises(ValueError, match=r"f.tsv:3: \d+ pieces, more than max_windows=2 windows"):
        TextEncoder(tokenizer, 12, max_windows=2).encode_windows(example)
    cut = TextEncoder(tokenizer, 12, truncate=True, truncate_from="start", max_windows=2)
    kept = [i for w in cut.encode_windows(example) for i in w[features.TOKEN_IDS][1:-1]]
    assert kept == list(tokenizer.encode(text))[-20:] and cut.num_truncated == 1
    with pytest.raises(ValueError, match="a text pair; long-text windows"):
        encoder.encode_windows(TextExample("a good film", "it was fine", 1, "f.tsv:4"))
    with pytest.raises(ValueError, match="max_windows=0"):
        TextEncoder(tokenizer, 12, max_windows=0)


def test_the_task_names_read_before_tensorflow_are_the_registrys():
    from albert_tf.recipes import RECIPES
    from albert_tf.recipes.names import SENTENCE_TASK_NAMES, TASK_NAMES
    from albert_tf.recipes.sentence import SentenceRecipe

    assert list(RECIPES) == list(TASK_NAMES)
    assert [name for name, task in RECIPES.items() if isinstance(task, SentenceRecipe)] == list(SENTENCE_TASK_NAMES)
