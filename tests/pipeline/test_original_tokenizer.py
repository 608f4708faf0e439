"""The English default gives the original ALBERT `FullTokenizer`'s ids, in Python and in-graph.

The goldens come from the original code itself (the `albert-tensorflow==1.1` package):
tests/fixtures/original_tokenizer/make_golden.py says how they were made.
"""

import json
import pathlib

import pytest
import tensorflow as tf

from albert_tf import AlbertPreprocessor
from input_pipeline import AlbertTokenizer, Preprocessing
from input_pipeline.finetuning.squad import ContextPieces

FIXTURES = pathlib.Path(__file__).parents[1] / "fixtures" / "original_tokenizer"


def golden_lines():
    return json.loads((FIXTURES / "golden.json").read_text(encoding="utf-8"))["lines"]


@pytest.fixture(scope="module")
def golden():
    lines = golden_lines()
    return [line["text"] for line in lines], [line["ids"] for line in lines]


@pytest.fixture(scope="module")
def original_vocab_tokenizer():
    return AlbertTokenizer((FIXTURES / "spiece.model").read_bytes())


def test_goldens_cover_what_differs(golden, original_vocab_tokenizer):
    texts, ids = golden
    assert len(texts) == 527 and sum(map(len, ids)) > 15_000
    assert sum("``" in t or "''" in t for t in texts) >= 50
    # The vocabulary holds digit-comma pieces, inside a word too: the re-split has work to do.
    pieces = {original_vocab_tokenizer.id_to_piece(i) for i in range(original_vocab_tokenizer.vocab_size)}
    assert {"▁10,", "▁1,000,", "000,"} <= pieces


def test_preprocessed_text_equals_the_original():
    texts, expected = zip(*[(line["text"], line["preprocessed"]) for line in golden_lines()])
    # The Devanagari and Thai marks of combining class 0 are kept, as the original keeps them.
    assert "हिंदी" in expected[17] and "คิดถึง" in expected[17]
    assert [Preprocessing().apply(t) for t in texts] == list(expected)
    graph = Preprocessing().tf_apply(tf.constant(texts)).numpy()
    assert [t.decode() for t in graph] == list(expected)


def test_python_ids_equal_the_original(golden, original_vocab_tokenizer):
    texts, expected = golden
    mismatches = [t for t, ids in zip(texts, expected) if original_vocab_tokenizer.encode(t) != ids]
    assert not mismatches, mismatches[:3]
    assert original_vocab_tokenizer.encode_batch(texts) == expected
    pieces = original_vocab_tokenizer.tokenize(texts[0])
    assert pieces[:3] == ["▁in", "▁2005", ","] and "▁10," not in pieces


def test_in_graph_ids_equal_the_original(golden, original_vocab_tokenizer):
    texts, expected = golden
    graph_ids = tf.function(original_vocab_tokenizer.tf_encode)(tf.constant(texts)).to_list()
    mismatches = [t for t, g, ids in zip(texts, graph_ids, expected) if g != ids]
    assert not mismatches, mismatches[:3]
    assert original_vocab_tokenizer.tf_encode(tf.constant(texts[1])).numpy().tolist() == expected[1]
    packed = AlbertPreprocessor(original_vocab_tokenizer, sequence_length=512)(texts[:25])
    rows = [[i for i in row if i] for row in packed["token_ids"].numpy().tolist()]
    assert rows == [[2] + ids + [3] for ids in expected[:25]]


def test_squad_context_pieces_split_like_encode(original_vocab_tokenizer):
    text = "In 2005, it cost $10,000,000, or 1,000, dollars"
    ids, spans = ContextPieces(original_vocab_tokenizer)(text)
    assert ids == original_vocab_tokenizer.encode(text) and len(spans) == len(ids)
    # `▁2005,` -> `▁2005` `,` and `▁1,000,` -> `▁1` `,000` `,`: the comma keeps its own character.
    assert [text[s:e] for s, e in spans][:3] == ["In", "2005", ","]
    assert [text[s:e] for s, e in spans][-6:] == ["or", "1,000", "1,000", ",", "dollar", "s"]


def test_other_presets_do_not_split_and_old_configs_keep_their_preset(original_vocab_tokenizer, tmp_path):
    model = original_vocab_tokenizer.model_proto
    kept = AlbertTokenizer(model, Preprocessing(split_digit_comma=False))
    assert kept.encode("in 2005, it cost 10, or so") != original_vocab_tokenizer.encode("in 2005, it cost 10, or so")
    assert "▁10," in kept.tokenize("it cost 10, or so")
    assert not Preprocessing.for_language("ko").split_digit_comma and Preprocessing().split_digit_comma
    # A tokenizer.json written before the step existed: "en" splits, "ko" does not.
    for language, splits in (("en", True), ("ko", False)):
        steps = {"collapse_whitespace": True, "strip_accents": language == "en", "lower_case": language == "en",
                 "normalization": None if language == "en" else "NFKC"}
        (tmp_path / language).mkdir()
        (tmp_path / language / "spiece.model").write_bytes(model)
        (tmp_path / language / "tokenizer.json").write_text(json.dumps({"language": language, "preprocessing": steps}))
        assert AlbertTokenizer.load(tmp_path / language).preprocessing.split_digit_comma == splits
