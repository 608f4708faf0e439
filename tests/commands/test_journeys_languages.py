"""A Korean ALBERT from raw text to a SavedModel that tokenizes Korean, as a user runs it:
train-tokenizer --language ko, create-data, pretrain, export --format saved_model."""

import json
import unicodedata

import numpy as np
import pytest
import tensorflow as tf

from cli_helpers import run_cli
from input_pipeline import AlbertTokenizer
from input_pipeline.tokenizer import CLS_PIECE, SEP_PIECE
from language_corpora import korean_documents

MAX_LENGTH = 32
# The last holds syllables the corpus lacks: byte pieces, in Python and in the graph.
TEXTS = ["대한민국은 민주공화국이다.", "모든 국민은 법 앞에 평등하다. 누구든지 차별을 받지 아니한다.", "뷁 똠방각하 햏"]


@pytest.mark.slow
def test_korean_pretraining_and_serve_text(tmp_path):
    import tensorflow_text  # noqa: F401 (registers the ops of the text signatures)

    corpus = tmp_path / "ko"
    corpus.mkdir()
    for name, text in korean_documents():
        (corpus / name).write_text(text, encoding="utf-8")
    tok, data, run, exported = (str(tmp_path / n) for n in ("tok", "data", "run", "exported"))

    # The English default refuses Korean text and names the preset to use.
    refused = run_cli("train-tokenizer", "--input", corpus, "--format", "text", "--vocab-size", "1500",
                      "--out", tmp_path / "en", expect_rc=2)
    assert "--language ko" in refused.stderr and "jamo" in refused.stderr
    done = run_cli("train-tokenizer", "--input", corpus, "--format", "text", "--language", "ko",
                   "--vocab-size", "1500", "--out", tok)
    assert "1500-piece ko tokenizer on 11 documents (0 empty skipped), byte fallback on" in done.stdout
    tokenizer = AlbertTokenizer.load(tok)
    assert tokenizer.language == "ko" and tokenizer.byte_fallback

    done = run_cli("create-data", "--input", corpus, "--format", "text", "--tokenizer", tok, "--out", data,
                   "--max-seq-length", "64", "--max-predictions-per-seq", "10", "--dupe-factor", "2",
                   "--num-workers", "0")
    assert "from 11 documents" in done.stdout
    run_cli("pretrain", "--data", data, "--tokenizer", tok, "--out", run, "--embedding-size", "8",
            "--hidden-size", "16", "--num-layers", "2", "--num-heads", "2", "--intermediate-size", "32",
            "--batch-size", "8", "--steps", "3", "--warmup-steps", "0", "--log-every", "1", "--compile-step", "none")
    with open(f"{run}/train_log.jsonl") as f:
        assert len([json.loads(line) for line in f if line.strip()]) >= 3
    run_cli("export", "--model", f"{run}/final", "--tokenizer", f"{run}/tokenizer", "--format", "saved_model",
            "--out", exported, "--max-length", MAX_LENGTH)

    loaded = tf.saved_model.load(f"{exported}/1")
    mask_positions = tf.constant([[1, 2]] * len(TEXTS), tf.int32)
    out = loaded.signatures["serve_text"](text=tf.constant(TEXTS), mask_positions=mask_positions)
    for row, mask, text in zip(out["tokens"].numpy(), out["padding_mask"].numpy(), TEXTS):
        pieces = [p.decode() for p in row[mask.astype(bool)]]
        # The graph tokenized with the ko preset: composed syllables, as in Python.
        assert pieces == [CLS_PIECE, *tokenizer.tokenize(text), SEP_PIECE]
        assert tokenizer.decode(tokenizer.encode(text)) == unicodedata.normalize("NFKC", text)
    assert any(p.startswith(b"<0x") for p in out["tokens"].numpy()[-1])
    assert out["mlm_logits"].shape == (len(TEXTS), 2, 1500) and out["sop_logits"].shape == (len(TEXTS), 2)
    assert np.isfinite(out["mlm_logits"].numpy()).all()
