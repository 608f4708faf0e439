"""Languages other than English, on real Korean and Japanese text: presets that keep
kana marks and Hangul syllables, byte fallback that loses no character,
Python/in-graph parity on every line, the guard on the English preset, CJK
sentence splitting and piece-level whole-word masking."""

import json
import re
import unicodedata

import numpy as np
import pytest
import tensorflow as tf

from albert_tf import cli
from data_fixtures import imdb_documents
from input_pipeline import AlbertTokenizer, Preprocessing
from input_pipeline.corpus import split_paragraphs_into_sentences, split_sentences
from input_pipeline.pretraining.examples import PretrainingDataConfig, mask_tokens
from input_pipeline.byte_fallback import parse
from input_pipeline.text_normalization import (
    DEFAULT_BYTE_FALLBACK, DEFAULT_CHARACTER_COVERAGE, LANGUAGES, AccentStrippingGuard,
)
from input_pipeline.tokenizer import CLS_ID, NUM_SPECIAL_IDS, SEP_ID, WORD_START
from language_corpora import japanese_sentences, korean_documents, korean_lines

HANGUL_SYLLABLE = re.compile("[\uac00-\ud7a3]")
CONJOINING_JAMO = re.compile("[\u1100-\u11ff]")
COMPATIBILITY_JAMO = re.compile("[\u3131-\u318e]")  # ㄱ, ㅋ, ㆍ: NFKC maps each to one conjoining jamo
VOICING_MARKS = re.compile("[\u3099\u309a\uff9e\uff9f]")  # combining and half-width dakuten/handakuten
# Kana whose voicing mark is part of the letter: が, ぱ, ヴ ... (NFD splits off U+3099/U+309A).
VOICED_KANA = re.compile("[\u3040-\u30ff]")
NFKC_EDGE_CASES = ["①②③ ㍻ ｶﾞｷﾞ ＡＢＣ１２３", "ﬁne Ⅻ ™ ¨x", "パン\u3000と\u00a0스프", "ΟΔΟΣ İstanbul Straße", ""]
# Rare Hangul syllables and kanji (𠮷 is outside the BMP: 4 UTF-8 bytes), an emoji,
# characters SentencePiece's default normalization would drop (U+200B, U+0001),
# and runs whose segmentation ties (tensorflow-text's SentencepieceTokenizer
# splits those differently from the sentencepiece library).
RARE_AND_TIES = ["뷁 똠방각하 햏 쀍", "鬱 麤 𠮷野家 饂飩", "😀 한국어😀", "a\u200bb\x01c", "제22조(의견청취) 1------------",
                 "-" * 25, "0" * 17, "다음 사항을 관장한다."]


def voiced_kana(text):
    return [c for c in text if VOICED_KANA.match(c) and len(unicodedata.normalize("NFD", c)) > 1]


def lines_of(language):
    return korean_lines() if language == "ko" else japanese_sentences()


@pytest.fixture(scope="module")
def ko_tokenizer():
    return AlbertTokenizer.train(korean_lines(), 2000, language="ko", num_threads=2)


@pytest.fixture(scope="module")
def ja_tokenizer():
    return AlbertTokenizer.train(japanese_sentences(), 2000, language="ja", num_threads=2)


@pytest.fixture(scope="module")
def small_tokenizers():
    """(language, byte_fallback) -> a 1000 (ko) / 1500-piece (ja) tokenizer trained on every
    other line: the other half holds syllables and kanji it never saw."""
    return {
        (language, fallback): AlbertTokenizer.train(
            lines_of(language)[::2], size + (256 if fallback else 0), language=language,
            byte_fallback=fallback, num_threads=2,
        )
        for language, size in (("ko", 1000), ("ja", 1500)) for fallback in (False, True)
    }


def test_issue_example_and_presets():
    text = "がぎぐ パン 한국어 텍스트 Café"
    assert Preprocessing().apply(text) == "かきく ハン " + unicodedata.normalize("NFKD", "한국어 텍스트") + " cafe"
    for language in ("ko", "ja", "zh", "multi"):
        assert Preprocessing.for_language(language).apply(text) == text
        assert DEFAULT_CHARACTER_COVERAGE[language] == 0.9995 and DEFAULT_BYTE_FALLBACK[language]
    assert not DEFAULT_BYTE_FALLBACK["en"]
    assert Preprocessing.for_language("en") == Preprocessing()
    # NFKC folds compatibility forms, composing half-width kana with their marks.
    assert Preprocessing.for_language("ja").apply("ｶﾞｷﾞ ＡＢＣ１２３ ①") == "ガギ ABC123 1"
    with pytest.raises(ValueError, match="language='fr'"):
        Preprocessing.for_language("fr")
    with pytest.raises(ValueError, match="normalization='NFKD'"):
        Preprocessing(normalization="NFKD")


def test_guard_counts_only_marks_that_carry_meaning():
    guard = AccentStrippingGuard()
    guard.observe("Café naïve résumé, Ångström´s “quotes” ≠ ok")  # accents en means to drop
    assert not guard.damaged
    guard.observe("Tiếng Việt คิดถึง คุณ हिंदी हिन्दी パン 한")
    # As in the original, marks of combining class 0 survive (Devanagari's ि, ी and anusvara ं,
    # Thai's ิ, ึ); Thai's ุ (class 103) and the virama ् (class 9) do not.
    assert set(guard.damaged) == {"ế", "ệ", "ุ", "्", "パ", "한"}


@pytest.mark.parametrize("language", ["ko", "ja"])
def test_presets_keep_hangul_composed_and_kana_marks(language):
    lines = korean_lines() if language == "ko" else japanese_sentences()
    preset, english = Preprocessing.for_language(language), Preprocessing()
    num_syllables = num_voiced = 0
    for line in lines:
        kept = preset.apply(line)
        assert not VOICING_MARKS.search(kept), line
        assert len(CONJOINING_JAMO.findall(kept)) == len(COMPATIBILITY_JAMO.findall(line)), line
        assert HANGUL_SYLLABLE.findall(kept) == HANGUL_SYLLABLE.findall(line), line
        assert voiced_kana(kept) == voiced_kana(unicodedata.normalize("NFKC", line)), line
        num_syllables += len(HANGUL_SYLLABLE.findall(line))
        num_voiced += len(voiced_kana(line))
        # The English preset loses exactly what the preset keeps.
        if HANGUL_SYLLABLE.search(line) or voiced_kana(line):
            assert HANGUL_SYLLABLE.findall(english.apply(line)) == [] and voiced_kana(english.apply(line)) == []
    assert (num_syllables > 30_000) if language == "ko" else (num_voiced > 1_500)


@pytest.mark.parametrize("language", ["ko", "ja"])
def test_python_and_in_graph_ids_identical_on_every_line(language, ko_tokenizer, ja_tokenizer):
    tokenizer = ko_tokenizer if language == "ko" else ja_tokenizer
    # A '▁' in the text is SentencePiece's space symbol: stripped at the end only.
    space_symbols = ["▁", "a▁", "a ▁", "▁a", "a ▁ b"]
    texts = list(lines_of(language)) + NFKC_EDGE_CASES + RARE_AND_TIES + space_symbols
    graph_ids = tf.function(tokenizer.tf_encode)(tf.constant(texts)).to_list()
    python_ids = [tokenizer.encode(t) for t in texts]
    mismatches = [t for t, g, p in zip(texts, graph_ids, python_ids) if g != p]
    assert not mismatches, mismatches[:3]
    graph_text = [t.decode() for t in tokenizer.preprocessing.tf_apply(tf.constant(texts)).numpy()]
    assert graph_text == [tokenizer.preprocessing.apply(t) for t in texts]


@pytest.mark.parametrize("language", ["ko", "ja"])
def test_byte_fallback_round_trips_every_line_in_python_and_in_graph(language, small_tokenizers):
    tokenizer = small_tokenizers[language, True]
    assert tokenizer.byte_fallback and tokenizer.vocab_size == (1256 if language == "ko" else 1756)
    assert [tokenizer.id_to_piece(i) for i in (5, 6, 260)] == ["<0x00>", "<0x01>", "<0xFF>"]
    texts = list(lines_of(language)) + NFKC_EDGE_CASES + RARE_AND_TIES
    expected = [tokenizer.preprocessing.apply(t) for t in texts]
    python_ids = [tokenizer.encode(t) for t in texts]
    graph_ids = tf.function(tokenizer.tf_encode)(tf.constant(texts))
    assert graph_ids.to_list() == python_ids
    assert not any(tokenizer.unk_id in ids for ids in python_ids)
    assert [tokenizer.decode(ids) for ids in python_ids] == expected
    assert [t.decode() for t in tf.function(tokenizer.tf_decode)(graph_ids).numpy()] == expected
    # Held-out lines use byte pieces: without them these lines would hold <unk>.
    with_bytes = sum(any(NUM_SPECIAL_IDS <= i < NUM_SPECIAL_IDS + 256 for i in ids) for ids in python_ids)
    assert with_bytes > (100 if language == "ko" else 50)
    assert tokenizer.tf_encode(tf.constant("𠮷")).numpy().tolist() == tokenizer.encode("𠮷")
    # Spans cut inside a character, and stray byte pieces, decode as sentencepiece does.
    cut = [ids[k:] for ids in python_ids[-len(RARE_AND_TIES):] for k in (1, 2)] + [[5 + 0xF0, 5 + 0x9F, 300], [6]]
    assert [t.decode() for t in tokenizer.tf_decode(tf.ragged.constant(cut)).numpy()] == \
        [tokenizer.decode(ids) for ids in cut]


@pytest.mark.slow
def test_byte_fallback_in_the_preprocessor_layer_and_serve_text(small_tokenizers, tmp_path):
    from albert_tf import AlbertBackbone, AlbertPreprocessor
    from albert_tf.export import export_saved_model, pack_texts
    from albert_tf.models import AlbertQuestionAnswerer
    from helpers import tiny_config

    tokenizer = small_tokenizers["ko", True]
    held_out = [line for line in korean_lines()[1::2] if "<0x" in "".join(tokenizer.tokenize(line))][:4]
    questions, contexts = RARE_AND_TIES[:4], [line[:60] for line in held_out]
    expected = pack_texts(tokenizer, questions, contexts, max_length=64)
    layer = AlbertPreprocessor(tokenizer, sequence_length=64)
    got = layer((tf.constant(questions), tf.constant(contexts)))
    assert {k: v.numpy().tolist() for k, v in got.items()} == {k: v.tolist() for k, v in expected.items()}
    rebuilt = AlbertPreprocessor.from_config(layer.get_config())
    assert rebuilt((tf.constant(questions), tf.constant(contexts)))["token_ids"].numpy().tolist() == \
        expected["token_ids"].tolist()

    qa = AlbertQuestionAnswerer(AlbertBackbone(tiny_config(vocab_size=tokenizer.vocab_size)))
    loaded = tf.saved_model.load(export_saved_model(qa, str(tmp_path), tokenizer=tokenizer, max_length=64))
    out = loaded.signatures["serve_text"](question=tf.constant(questions), context=tf.constant(contexts))
    tokens = [[p.decode() for p in row[mask.astype(bool)]] for row, mask in
              zip(out["tokens"].numpy(), out["padding_mask"].numpy())]
    assert tokens == [[tokenizer.id_to_piece(i) for i in row[mask.astype(bool)]]
                      for row, mask in zip(expected["token_ids"], expected["padding_mask"])]
    # The answer is detokenized in-graph: sentencepiece's text of the span, even
    # where a random model's span cuts a character's bytes (one U+FFFD per byte).
    for i, answer in enumerate(out["answer"].numpy()):
        start, end = out["answer_start"][i].numpy(), out["answer_end"][i].numpy()
        assert answer.decode() == tokenizer.decode(expected["token_ids"][i][start : end + 1])


@pytest.mark.parametrize("language", ["ko", "ja"])
def test_without_byte_fallback_rare_characters_are_unknown_as_before(language, small_tokenizers, tmp_path):
    tokenizer = small_tokenizers[language, False]
    # What a tokenizer trained before byte fallback existed is: SentencePiece's own
    # normalization, no byte pieces, and a tokenizer.json without the key.
    assert parse(tokenizer.model_proto).normalizer_spec.name == "nmt_nfkc" and not tokenizer.byte_fallback
    tokenizer.save(tmp_path)
    config = json.loads((tmp_path / "tokenizer.json").read_text(encoding="utf-8"))
    assert config.pop("byte_fallback") is False
    (tmp_path / "tokenizer.json").write_text(json.dumps(config), encoding="utf-8")
    old = AlbertTokenizer.load(tmp_path)
    texts = list(lines_of(language)) + NFKC_EDGE_CASES
    python_ids = [old.encode(t) for t in texts]
    assert tf.function(old.tf_encode)(tf.constant(texts)).to_list() == python_ids
    lost = [t for t, ids in zip(texts, python_ids) if old.unk_id in ids]
    assert len(lost) > 20  # the lines byte fallback brings back
    assert "⁇" in old.decode(old.encode(lost[0]))


def test_byte_fallback_choice_is_saved_and_checked(small_tokenizers, tmp_path):
    small_tokenizers["ko", True].save(tmp_path)
    config = json.loads((tmp_path / "tokenizer.json").read_text(encoding="utf-8"))
    assert config["byte_fallback"] is True
    assert AlbertTokenizer.load(tmp_path).byte_fallback
    config["byte_fallback"] = False
    (tmp_path / "tokenizer.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(ValueError, match="says byte_fallback=False but .*spiece.model has byte_fallback=True"):
        AlbertTokenizer.load(tmp_path)


def test_byte_fallback_with_sentencepiece_normalization_is_python_only():
    # A cased English tokenizer does not NFKC its text, so SentencePiece keeps its own
    # normalization, which the graph cannot reproduce around byte pieces.
    english = [s for d in imdb_documents()[:100] for s in d]
    cased = AlbertTokenizer.train(english, 600, preprocessing=Preprocessing(lower_case=False, strip_accents=False),
                                  byte_fallback=True, num_threads=2)
    assert cased.byte_fallback and cased.decode(cased.encode("Zoë 😀")) == "Zoë 😀"
    with pytest.raises(ValueError, match="applies 'nmt_nfkc'.*Retrain"):
        cased.tf_encode(tf.constant(["Zoë"]))


@pytest.mark.parametrize("language,char", [("ko", "다"), ("ja", "が")])
def test_english_preset_refuses_korean_and_japanese(language, char):
    lines = korean_lines() if language == "ko" else japanese_sentences()
    with pytest.raises(ValueError, match=rf"'{char}' x\d+.*language='{language}' \(`--language {language}`\)"):
        AlbertTokenizer.train(lines, 2000, num_threads=2)
    # Stripping accents is what the guard is about: a cased English tokenizer trains.
    AlbertTokenizer.train(lines, 2000, preprocessing=Preprocessing(strip_accents=False), num_threads=2)


def test_english_preset_warns_below_the_threshold():
    english = [s for d in imdb_documents()[:300] for s in d]
    with pytest.warns(UserWarning, match="language='ja'"):
        AlbertTokenizer.train(english + ["パンを食べた。"], 300, num_threads=2)


def test_language_is_saved_and_old_tokenizers_load_as_english(ko_tokenizer, tmp_path):
    ko_tokenizer.save(tmp_path / "ko")
    config = json.loads((tmp_path / "ko" / "tokenizer.json").read_text(encoding="utf-8"))
    assert config["language"] == "ko" and config["preprocessing"]["normalization"] == "NFKC"
    loaded = AlbertTokenizer.load(tmp_path / "ko")
    assert (loaded.language, loaded.preprocessing) == ("ko", ko_tokenizer.preprocessing)
    # A tokenizer.json written before languages existed: no language, no normalization.
    old = {"vocab_size": 2000, "preprocessing": {"collapse_whitespace": True, "strip_accents": True, "lower_case": False}}
    (tmp_path / "ko" / "tokenizer.json").write_text(json.dumps(old), encoding="utf-8")
    legacy = AlbertTokenizer.load(tmp_path / "ko")
    assert legacy.language == "en" and legacy.preprocessing == Preprocessing(lower_case=False)
    (tmp_path / "ko" / "tokenizer.json").unlink()
    assert AlbertTokenizer.load(tmp_path / "ko").preprocessing == Preprocessing()
    with pytest.raises(ValueError, match="language='kr'"):
        AlbertTokenizer(ko_tokenizer.model_proto, language="kr")


def test_train_tokenizer_cli_language(tmp_path):
    corpus = tmp_path / "ko.txt"
    corpus.write_text("\n\n".join(text for _, text in korean_documents()), encoding="utf-8")
    out = tmp_path / "tok"
    assert cli.main(["train-tokenizer", "--input", str(corpus), "--format", "text", "--language", "ko",
                     "--vocab-size", "1500", "--out", str(out)]) == 0
    tokenizer = AlbertTokenizer.load(out)
    assert tokenizer.language == "ko" and tokenizer.preprocessing == Preprocessing.for_language("ko")
    assert tokenizer.byte_fallback and tokenizer.vocab_size == 1500
    assert "▁대한민국" in [tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size)]
    # The English default refuses the same corpus (exit status 2 with the message).
    assert cli.main(["train-tokenizer", "--input", str(corpus), "--format", "text",
                     "--vocab-size", "1500", "--out", str(tmp_path / "en")]) == 2
    assert set(LANGUAGES) == {"en", "ko", "ja", "zh", "multi"}


def test_japanese_sentence_splitting_on_real_text():
    # 3 of the 500 have no final full stop (a headline): no splitter can find their end.
    sentences = [s for s in japanese_sentences() if s[-1] in "。！？"]
    assert len(sentences) == 497
    # Written as running text without spaces, hard-wrapped at 40 characters.
    # Breaks fall after a Japanese character (a break between two Latin letters or
    # digits would be a word break).
    text, lines, start = "".join(sentences), [], 0
    for i in range(40, len(text)):
        if i - start >= 40 and re.match("[\u3000-\u30ff\u4e00-\u9fff]", text[i - 1]):
            lines.append(text[start:i])
            start = i
    wrapped = "\n".join(lines + [text[start:]])
    split = split_paragraphs_into_sentences(wrapped)
    # Sentences with full stops inside a quotation (8 of them) stay whole.
    assert sum(bool(re.search("[。！？]", s[:-1])) for s in sentences) == 8
    expected = [" ".join(s.split()) for s in sentences]  # the reader collapses whitespace (\u3000 too)
    assert split == expected, [(a, b) for a, b in zip(split, expected) if a != b][:2]
    assert split_sentences("「行く。」と言った。次だ！本当？") == ["「行く。」と言った。", "次だ！", "本当？"]


def test_korean_sentence_splitting_on_real_text():
    constitution = dict(korean_documents())["constitution.txt"]
    sentences = split_paragraphs_into_sentences(constitution)
    # Korean sentences end in "다." (declarative); none may hide another inside.
    inner_end = re.compile("다\\. [\uac00-\ud7a3]")
    assert not [s for s in sentences if inner_end.search(s)]
    assert sum(s.endswith("다.") for s in sentences) > 0.6 * len(sentences)
    assert split_sentences("이를 준수할 것. 다음 조항이다.") == ["이를 준수할 것.", "다음 조항이다."]
    # Initials still do not end an English sentence.
    assert split_sentences("J. Smith left. He ran.") == ["J. Smith left.", "He ran."]


def test_whole_word_masking_uses_pieces_in_unspaced_japanese(ja_tokenizer):
    table = ja_tokenizer.word_start_table()
    pieces = [ja_tokenizer.id_to_piece(i) for i in range(ja_tokenizer.vocab_size)]
    assert all(table[i] for i, p in enumerate(pieces) if re.match("[\u3040-\u30ff\u4e00-\u9fff]", p))
    assert not any(table[i] for i, p in enumerate(pieces) if re.match("[A-Za-z0-9]", p))
    space_only = np.array([p.startswith(WORD_START) for p in pieces])
    config = PretrainingDataConfig(max_seq_length=128, max_predictions_per_seq=20, max_ngram=3)
    masked_pieces = masked_with_space_rule = 0
    for k, (a, b) in enumerate(zip(japanese_sentences()[:100:2], japanese_sentences()[1:100:2])):
        tokens = np.array([CLS_ID, *ja_tokenizer.encode(a), SEP_ID, *ja_tokenizer.encode(b), SEP_ID], np.int32)
        for word_starts, count in ((table, "piece"), (space_only, "space")):
            is_start = word_starts[tokens] & (tokens != CLS_ID) & (tokens != SEP_ID)
            is_start[[1, tokens.tolist().index(SEP_ID) + 1]] = True
            result = mask_tokens(tokens, is_start, config, ja_tokenizer.vocab_size, np.random.default_rng(k))
            if count == "space":
                masked_with_space_rule += len(result.positions)
                continue
            masked_pieces += len(result.positions)
            # Every masked span is whole words: it starts at a word start and ends before one or [SEP].
            masked = np.zeros(len(tokens), bool)
            masked[result.positions] = True
            edges = np.flatnonzero(np.diff(masked.astype(int)))
            assert all(is_start[e + 1] for e in edges if not masked[e]), a
            assert all(is_start[e + 1] or tokens[e + 1] == SEP_ID for e in edges if masked[e]), a
    # With '▁' alone each sentence is one "word", longer than the budget: almost nothing is masked.
    assert masked_pieces > 10 * max(masked_with_space_rule, 1)
