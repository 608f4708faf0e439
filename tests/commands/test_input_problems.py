"""Input problems are the user's: one line naming the file or flag, exit 2, nothing left behind.

Run in-process (`cli.main`): the process is not the subject. An unwritable
--out is made honestly, also as root (who ignores permission bits): a path
under /sys, where the kernel refuses to create anything whoever asks, and a
path under a file, where a directory is needed.
"""

import functools
import json
import os

import pytest

from albert_tf import cli
from albert_tf.models import AlbertBackbone
from albert_tf.models.pretrained import save_pretrained
from albert_tf.utils import files
from albert_tf.utils.errors import UserError
from data_fixtures import imdb_documents
from helpers import tiny_config
from input_pipeline import AlbertTokenizer
from journey_fixtures import TINY_MODEL, write_sentences_corpus, write_sst2

UNWRITABLE_DIR = "/sys"  # sysfs refuses a new entry to root too (EPERM, or EROFS where mounted read-only)


@functools.lru_cache(maxsize=None)
def tokenizer():
    return AlbertTokenizer.train((s for d in imdb_documents()[:100] for s in d), 300, num_threads=2)


def albert_tf(capsys, *argv):
    """Runs `albert-tf ARGV` in this process; returns (exit code, stderr lines)."""
    capsys.readouterr()
    code = cli.main([str(a) for a in argv])
    return code, capsys.readouterr().err.strip().splitlines()


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """What a user brings: a corpus, a tokenizer, a model directory, SST-2 rows."""
    root = tmp_path_factory.mktemp("inputs")
    write_sentences_corpus(root / "corpus", imdb_documents()[:100])
    tokenizer().save(str(root / "tok"))
    save_pretrained(AlbertBackbone(tiny_config(vocab_size=tokenizer().vocab_size)), str(root / "model"))
    tokenizer().save(str(root / "model" / "tokenizer"))
    write_sst2(str(root / "train.tsv"), [("a fine film", 1), ("dull", 0)] * 4)
    return root


def _commands(inputs, out):
    return {
        "train-tokenizer": ["train-tokenizer", "--input", inputs / "corpus", "--vocab-size", "300", "--out", out],
        "create-data": ["create-data", "--input", inputs / "corpus", "--tokenizer", inputs / "tok", "--out", out],
        "finetune": ["finetune", "--task", "sst2", "--model", inputs / "model", "--train", inputs / "train.tsv",
                     "--out", out],
        "export tflite": ["export", "--model", inputs / "model", "--format", "tflite", "--out", out],
        "export saved_model": ["export", "--model", inputs / "model", "--format", "saved_model", "--out", out],
        "pretrain": ["pretrain", "--data", inputs / "corpus", "--tokenizer", inputs / "tok", "--out", out],
        "convert": ["convert", "--model", inputs / "model", "--to", "hf", "--out", out],
    }


@pytest.mark.parametrize("command", ["train-tokenizer", "create-data", "finetune", "export tflite",
                                     "export saved_model", "pretrain", "convert"])
@pytest.mark.parametrize("place", ["read-only", "under a file"])
def test_an_unwritable_out_is_one_line_naming_it(inputs, tmp_path, capsys, command, place):
    parent = UNWRITABLE_DIR if place == "read-only" else tmp_path / "a-file"
    (tmp_path / "a-file").write_text("not a directory")
    out = os.path.join(parent, "albert-out")
    code, err = albert_tf(capsys, *_commands(inputs, out)[command])
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"albert-tf {command.split()[0]}: error: --out {out}: "), err
    reason = "cannot write in /sys" if place == "read-only" else "a-file is a file, expected a directory"
    assert reason in err[0], err
    assert not os.path.exists(out) and os.listdir(tmp_path) == ["a-file"]


def test_publishing_into_an_unwritable_place_is_a_user_error(tmp_path):
    # Below the commands' early check: the library's own writers say the same in one line.
    (tmp_path / "a-file").write_text("not a directory")
    for target in (os.path.join(UNWRITABLE_DIR, "albert-out"), str(tmp_path / "a-file" / "out")):
        for directory in (True, False):
            with pytest.raises(UserError, match=f"^out_dir {target}: cannot write there") as raised:
                with files.publish(target, directory=directory, name="out_dir"):
                    pass
            assert "\n" not in str(raised.value)
    assert os.listdir(tmp_path) == ["a-file"]


def test_paths_of_the_wrong_kind_say_what_was_expected(inputs, tmp_path, capsys):
    code, err = albert_tf(capsys, "create-data", "--input", inputs / "corpus", "--tokenizer", inputs / "tok" / "spiece.model",
                          "--out", tmp_path / "data")
    assert code == 2 and err == [f"albert-tf create-data: error: --tokenizer {inputs}/tok/spiece.model: is a file, "
                                 "expected a directory holding spiece.model."]
    (tmp_path / "out.txt").write_text("a file")
    code, err = albert_tf(capsys, "train-tokenizer", "--input", inputs / "corpus", "--out", tmp_path / "out.txt",
                          "--overwrite")
    assert code == 2 and err == [f"albert-tf train-tokenizer: error: --out {tmp_path}/out.txt is a file, "
                                 "expected a directory."]
    code, err = albert_tf(capsys, "finetune", "--task", "sst2", "--model", tmp_path / "out.txt", "--train",
                          inputs / "train.tsv", "--out", tmp_path / "run")
    assert code == 2 and err == [f"albert-tf finetune: error: --model {tmp_path}/out.txt: is a file, expected a "
                                 "model directory (or a run directory holding one)."]
    code, err = albert_tf(capsys, "serve", tmp_path / "out.txt", "--port", "0")
    assert code == 2 and err == [f"albert-tf serve: error: {tmp_path}/out.txt: is a file, expected a directory of "
                                 "SavedModel versions (1/, 2/, ...) or a model or run directory."]
    assert sorted(os.listdir(tmp_path)) == ["out.txt"]


def test_text_that_is_not_utf8_names_the_file_and_the_flag(inputs, tmp_path, capsys):
    latin1 = tmp_path / "reviews.csv"
    latin1.write_bytes("sentence,label\nun très bon film,1\n".encode("latin-1"))
    code, err = albert_tf(capsys, "finetune", "--task", "sst2", "--model", inputs / "model", "--train", latin1,
                          "--out", tmp_path / "run")
    assert code == 2 and err == [f"albert-tf finetune: error: --train {latin1}: not UTF-8 text (byte offset 20); "
                                 "save it as UTF-8."]
    # The readers themselves name the file (a URL, a library caller).
    from input_pipeline.finetuning.tables import read_table

    with pytest.raises(UserError, match=f"^{latin1} is not UTF-8 text"):
        read_table(str(latin1), "sentence", label_column="label")
    # Past the first document: SentencePiece has begun reading, and wraps what its reader raises.
    corpus = tmp_path / "reviews.txt"
    corpus.write_bytes("a first review\n\nun très bon film\n".encode("latin-1"))
    code, err = albert_tf(capsys, "train-tokenizer", "--input", corpus, "--out", tmp_path / "tok")
    assert code == 2 and len(err) == 1 and err[0].startswith(f"albert-tf train-tokenizer: error: {corpus}: invalid "
                                                               "UTF-8 at byte offset 21"), err
    assert sorted(os.listdir(tmp_path)) == ["reviews.csv", "reviews.txt"]


@pytest.mark.parametrize("damage", ["spiece.model garbage", "spiece.model truncated", "tokenizer.json truncated"])
def test_a_corrupt_tokenizer_file_is_named(inputs, tmp_path, capsys, damage):
    name, how = damage.split()
    tok = tmp_path / "tok"
    tokenizer().save(str(tok))
    data = (tok / name).read_bytes()
    (tok / name).write_bytes(os.urandom(64) if how == "garbage" else data[: len(data) // 2])
    code, err = albert_tf(capsys, "create-data", "--input", inputs / "corpus", "--tokenizer", tok,
                          "--out", tmp_path / "data")
    assert code == 2 and len(err) == 1 and err[0].startswith(f"albert-tf create-data: error: {tok}/{name} "), err
    assert sorted(os.listdir(tmp_path)) == ["tok"]


def test_serve_on_a_corrupt_saved_model_names_it(tmp_path, capsys):
    version = tmp_path / "model" / "1"
    version.mkdir(parents=True)
    (version / "saved_model.pb").write_bytes(os.urandom(100))
    code, err = albert_tf(capsys, "serve", tmp_path / "model", "--port", "0")
    assert code == 2 and err == [f"albert-tf serve: error: {version} is not a readable SavedModel (corrupt or "
                                 f"truncated): Cannot parse file b'{version}/saved_model.pb': Error parsing message "
                                 "with type 'tensorflow.SavedModel': Wire format was corrupt."], err


def test_a_truncated_or_unreadable_data_directory_is_refused_before_a_run_starts(inputs, tmp_path, capsys):
    data = tmp_path / "data"
    assert albert_tf(capsys, "create-data", "--input", inputs / "corpus", "--tokenizer", inputs / "tok", "--out", data,
                     "--max-seq-length", "32", "--dupe-factor", "1", "--num-workers", "0")[0] == 0
    shard = data / "pretraining-00000.tfrecord"
    whole = shard.read_bytes()
    shard.write_bytes(whole[: len(whole) // 2])
    pretrain = ["pretrain", "--data", data, "--out", tmp_path / "run", "--steps", "2", "--batch-size", "2", *TINY_MODEL]
    code, err = albert_tf(capsys, *pretrain)
    assert code == 2 and err == [f"albert-tf pretrain: error: {shard} has {len(whole) // 2} bytes where "
                                 f"metadata.json says {len(whole)} (truncated or replaced); rerun create-data."], err
    shard.write_bytes(whole)
    (data / "metadata.json").write_text(json.dumps({"num_shards": 1})[:-3])
    code, err = albert_tf(capsys, *pretrain)
    assert code == 2 and len(err) == 1 and err[0].startswith(f"albert-tf pretrain: error: {data}/metadata.json is "
                                                             "not a readable metadata.json (JSONDecodeError"), err
    assert sorted(os.listdir(tmp_path)) == ["data"]  # no run directory begun
