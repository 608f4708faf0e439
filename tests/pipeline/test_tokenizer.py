"""AlbertTokenizer: special layout, Python/in-graph parity on real text, and the sentencepiece reference."""

import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf

from albert_tf import cli
from cli_helpers import run_cli
from data_fixtures import imdb_documents, tokenizer  # noqa: F401 (fixture)
from input_pipeline import AlbertTokenizer, Preprocessing, movie_reviews
from input_pipeline.tokenizer import _trainer_options

EDGE_CASES = [
    "Café  naïve\u00a0résumé\tÅngström",
    "  leading and trailing\u3000whitespace \u2028 ",
    "``Quoted'' text, ΟΔΟΣ and İstanbul",
    "[CLS] hello [SEP] [MASK] <pad> <unk>",
    "",
]


def heldout_texts(n=300):
    return [text for text, _ in movie_reviews.imdb_reviews("heldout")[:n]]


def test_special_pieces_and_ids(tokenizer):
    assert [tokenizer.id_to_piece(i) for i in range(5)] == ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id) == (0, 1, 2, 3, 4)
    assert tokenizer.vocab_size == 1000
    # Control symbols are never produced from text, not even from their own spelling.
    ids = tokenizer.encode("[CLS] [SEP] [MASK] <pad> " + " ".join(heldout_texts(50)))
    assert not np.isin(ids, [0, 2, 3, 4]).any()


def test_python_and_in_graph_ids_identical(tokenizer):
    texts = heldout_texts() + EDGE_CASES
    graph_ids = tf.function(tokenizer.tf_encode)(tf.constant(texts)).to_list()
    assert graph_ids == [tokenizer.encode(t) for t in texts]
    assert graph_ids == tokenizer.encode_batch(texts)


def test_decode_round_trip(tokenizer):
    for text in heldout_texts(100):
        ids = tokenizer.encode(text)
        if tokenizer.unk_id not in ids:
            assert tokenizer.decode(ids) == tokenizer.preprocessing.apply(text)
    ids = tokenizer.tf_encode(tf.constant(["hello world"]))
    assert tokenizer.tf_decode(ids).numpy()[0].decode() == "hello world"
    assert tokenizer.decode([2] + tokenizer.encode("hello") + [3, 0, 0]) == "hello"


def test_preprocessing_switches():
    assert Preprocessing().apply("  Héllo\n  WORLD ") == "hello world"
    assert Preprocessing(lower_case=False, strip_accents=False).apply("  Héllo\n  WORLD ") == "Héllo WORLD"
    assert Preprocessing(collapse_whitespace=False).apply("a  b") == "a  b"


def test_save_load_and_vocab_check(tokenizer, tmp_path):
    cased = AlbertTokenizer(tokenizer.model_proto, Preprocessing(lower_case=False))
    cased.save(tmp_path)
    loaded = AlbertTokenizer.load(tmp_path)
    assert loaded.preprocessing == cased.preprocessing and loaded.encode("Hello There") == cased.encode("Hello There")
    loaded.check_vocab_size(1000)
    with pytest.raises(ValueError, match="vocab_size=30000"):
        loaded.check_vocab_size(30000)
    with pytest.raises(ValueError, match="spiece.model"):
        AlbertTokenizer.load(tmp_path / "missing")


def test_train_tokenizer_cli(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join("\n".join(d) for d in imdb_documents()[:300]), encoding="utf-8")
    assert cli.main(["train-tokenizer", "--input", str(corpus), "--vocab-size", "300", "--out", str(tmp_path / "tok")]) == 0
    trained = AlbertTokenizer.load(tmp_path / "tok")
    # The model carries the preprocessing: a bare SentencePiece runtime gives the same ids from raw text.
    assert trained.vocab_size == 300 and trained.carries_preprocessing
    bare = spm.SentencePieceProcessor(model_proto=trained.model_proto)
    lines = EDGE_CASES[:2] + ["``Quoted'' TEXT, ＡＢＣ"]
    assert bare.encode(lines) == trained.encode_batch(lines)
    assert cli.main(["train-tokenizer", "--input", str(tmp_path / "nope"), "--out", str(tmp_path / "x")]) == 2


def test_train_tokenizer_errors_name_the_flag(tmp_path):
    empty, blank, text = tmp_path / "empty.txt", tmp_path / "blank.txt", tmp_path / "ko.txt"
    empty.write_text("")
    blank.write_text("\n \n\t\n")
    text.write_text("가나다라마바사 아자차카타파하\n", encoding="utf-8")
    for corpus in (empty, blank):
        done = run_cli("train-tokenizer", "--input", corpus, "--format", "text", "--out", tmp_path / "o", expect_rc=2)
        assert done.stderr.strip() == (
            f"albert-tf train-tokenizer: error: --input {corpus}: no text to train a tokenizer on "
            "(1 empty documents skipped)."
        )
    # 14 syllables and the space: 15 characters, 5 special and 256 byte pieces.
    done = run_cli("train-tokenizer", "--input", text, "--language", "ko", "--vocab-size", "100",
                   "--out", tmp_path / "o", expect_rc=2)
    assert len(done.stderr.strip().splitlines()) == 1 and "character_coverage with" not in done.stderr
    assert "`--vocab-size`" in done.stderr and "need at least 276. Received: vocab_size=100" in done.stderr
    done = run_cli("train-tokenizer", "--input", text, "--language", "ko", "--no-byte-fallback",
                   "--vocab-size", "19", "--out", tmp_path / "o", expect_rc=2)
    assert "15 characters" in done.stderr and "need at least 20. Received: vocab_size=19" in done.stderr
    done = run_cli("train-tokenizer", "--input", text, "--language", "ko", "--vocab-size", "276", "--out", tmp_path / "ok")
    assert "276-piece ko tokenizer on 1 documents (0 empty skipped), byte fallback on" in done.stdout
    done = run_cli("train-tokenizer", "--input", text, "--vocab-size", "300", "--keep-accents",
                   "--out", tmp_path / "big", expect_rc=2)
    assert "larger than the corpus has pieces for: at most 20. Received: vocab_size=300" in done.stderr


@pytest.mark.slow
def test_segmentation_matches_sentencepiece_trained_the_same_way(tmp_path):
    """Train on ~2 MB of IMDB text both ways; the models and segmentations must agree."""
    sentences = [s for d in movie_reviews.imdb_documents("pretrain", limit=1500) for s in d]
    ours = AlbertTokenizer.train(sentences, 2000, num_threads=2, seed=5)
    path = tmp_path / "imdb.txt"
    path.write_text("\n".join(Preprocessing().apply(s) for s in sentences), encoding="utf-8")
    spm.set_random_generator_seed(5)
    options = _trainer_options(2000, 0.99995, 10_000_000, num_threads=2)
    spm.SentencePieceTrainer.train(input=str(path), model_prefix=str(tmp_path / "ref"), **options)
    reference = spm.SentencePieceProcessor(model_file=str(tmp_path / "ref.model"))
    assert [ours.id_to_piece(i) for i in range(2000)] == [reference.id_to_piece(i) for i in range(2000)]
    texts = heldout_texts(500)
    assert [ours.encode(t) for t in texts] == reference.encode([Preprocessing().apply(t) for t in texts])
