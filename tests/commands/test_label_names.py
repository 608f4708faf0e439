"""Label names that would shift the exports' one-label-a-line files: refused at `finetune`, naming the file and
row, and again at `export`, naming the model directory's file (a directory edited by hand)."""

import csv
import json

import pytest

from albert_tf import AlbertBackbone
from albert_tf.models import AlbertClassifier
from cli_helpers import run_cli
from data_fixtures import VOCAB_SIZE, small_tokenizer
from helpers import tiny_config
from journey_fixtures import assert_one_line_error


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("label_names")
    AlbertBackbone(tiny_config(vocab_size=VOCAB_SIZE)).save_pretrained(str(root / "model"))
    small_tokenizer().save(str(root / "model" / "tokenizer"))
    return root / "model"


def _table(path, labels):
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([("text", "label")] + [(f"review number {i}", label) for i, label in enumerate(labels)])
    return path


# The header is line 1, the third row line 4; a quoted newline makes it end on line 5, the line csv names.
@pytest.mark.parametrize("label, code, line", [("po\nsitive", "U+000A", 5), ("po\tsitive", "U+0009", 4),
                                               ("po\u2028sitive", "U+2028", 4), ("po\x85sitive", "U+0085", 4)])
def test_finetune_refuses_a_label_with_a_control_character_naming_its_row(model_dir, tmp_path, label, code, line):
    train = _table(tmp_path / "train.csv", ["neg", "neg", label, "neg"])
    done = run_cli("finetune", "--task", "classification", "--model", model_dir, "--train", train,
                   "--eval", train, "--max-seq-length", "16", "--out", tmp_path / "run", expect_rc=None)
    assert_one_line_error(done, f"{train}:{line}: the label {label!r} holds the control character {code}")
    assert not (tmp_path / "run").exists()


def test_finetune_refuses_such_a_label_in_label_names_and_in_tags(model_dir, tmp_path):
    train = _table(tmp_path / "train.csv", ["neg", "pos"])
    done = run_cli("finetune", "--task", "classification", "--model", model_dir, "--train", train,
                   "--eval", train, "--max-seq-length", "16", "--labels", "neg", "po\nsitive", "--out", tmp_path / "run",
                   expect_rc=None)
    assert_one_line_error(done, "--labels: the label 'po\\nsitive' holds the control character U+000A")
    tags = tmp_path / "tags.jsonl"
    tags.write_text(json.dumps({"tokens": ["a", "b"], "tags": ["O", "B\nPER"]}) + "\n")
    done = run_cli("finetune", "--task", "tagging", "--model", model_dir, "--train", tags, "--eval", tags,
                   "--max-seq-length", "16", "--out", tmp_path / "tagged", expect_rc=None)
    assert_one_line_error(done, f"{tags}:1: the label 'B\\nPER' holds the control character U+000A")


def test_export_refuses_a_model_directory_whose_labels_were_edited_by_hand(model_dir, tmp_path):
    classifier = AlbertClassifier(AlbertBackbone.from_pretrained(str(model_dir)), 2, label_names=["neg", "pos"])
    classifier.save_pretrained(str(tmp_path / "model"))
    small_tokenizer().save(str(tmp_path / "model" / "tokenizer"))
    model_file = tmp_path / "model" / "albert_tf.json"
    model_file.write_text(model_file.read_text().replace('"pos"', '"po\\nsitive"'))
    done = run_cli("export", "--model", tmp_path / "model", "--format", "tflite", "--out", tmp_path / "m.tflite",
                   expect_rc=None)
    assert_one_line_error(done, f"{model_file}: the label 'po\\nsitive' holds the control character U+000A")
    assert not (tmp_path / "m.tflite").exists()
