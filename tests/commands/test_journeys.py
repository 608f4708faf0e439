"""The README's command-line tour and the docs' example commands, as a user runs
them: each one's output fed to the next, nothing prepared in between but the
files (tests/cli_helpers.run_cli). tests/commands/test_quick_journey.py runs
every command of the tour in a new process.

The commands are README.md's (section "Command line") and docs/*.md's, with tiny
sizes: a few hundred IMDB reviews, a 400-piece vocabulary, a two-layer model, a
few steps. Keep them in step: a command that changes there changes here too.
"""

import json
import math
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from cli_helpers import albert_tf_command, ctrl_c_reaches_it, run_cli, start_program, user_environment
from input_pipeline import movie_reviews
from journey_fixtures import STDIN_TEXTS, TINY_MODEL, Server, assert_one_line_error, strict_json_lines

pytestmark = pytest.mark.slow


def test_pretraining_leaves_a_run_that_carries_its_tokenizer(tour, pretrained):
    assert (tour / "data" / "tokenizer" / "spiece.model").is_file()
    assert (pretrained / "tokenizer" / "spiece.model").is_file()
    assert (pretrained / "final" / "tokenizer" / "spiece.model").is_file()
    config = json.loads((pretrained / "final" / "config.json").read_text())
    assert config["hidden_size"] == 32 and config["vocab_size"] == 400
    trainer = json.loads((pretrained / "training_config.json").read_text())["trainer"]
    assert trainer["warmup_steps"] is None and trainer["warmup_fraction"] == 0.025


def test_predict_gives_one_line_per_input_line(tour, finetuned):
    done = run_cli("predict", "--model", "runs/sst2", cwd=tour, input="\n".join(STDIN_TEXTS) + "\n")
    rows = strict_json_lines(done.stdout)
    assert [row["index"] for row in rows] == [0, 1, 2]
    assert "error" in rows[1] and "label" not in rows[1]
    assert rows[0]["label"] in ("0", "1") and rows[2]["label"] in ("0", "1")
    assert (finetuned / "best" / "tokenizer" / "spiece.model").is_file()


def test_predict_splits_plain_text_at_newlines_only(tour, finetuned):
    # U+0085 (in 14 Rotten Tomatoes sentences), U+2028, a form feed and a lone CR are inside lines.
    lines = ["a gripping\u0085 and moving film", "flat\u2028and dull", "page\x0cbreak", "lone\rreturn"]
    (tour / "odd_breaks.txt").write_bytes(("\r\n".join(lines[:2]) + "\n" + "\n".join(lines[2:])).encode())
    for args, stdin in ((["--input", "odd_breaks.txt"], None), ([], "\n".join(lines))):
        done = run_cli("predict", "--model", "runs/sst2", *args, cwd=tour, input=stdin)
        rows = strict_json_lines(done.stdout)
        assert [row["index"] for row in rows] == [0, 1, 2, 3] and all("label" in row for row in rows), rows


def test_predict_keeps_file_rows_aligned_with_error_records(tour, finetuned):
    dev = (tour / "SST-2" / "dev.tsv").read_text().splitlines()
    # Row 1 is blank: an error record in its place, not a silent drop.
    (tour / "odd.tsv").write_text("\n".join([dev[0], dev[1], "", dev[2]]) + "\n")
    done = run_cli("predict", "--model", "runs/sst2/best", "--input", "odd.tsv", "--output", "odd.jsonl", cwd=tour)
    rows = strict_json_lines((tour / "odd.jsonl").read_text())
    assert [row["index"] for row in rows] == [0, 1, 2]
    assert "label" in rows[0] and "error" in rows[1] and "label" in rows[2]
    assert done.stdout == ""
    again = run_cli("predict", "--model", "runs/sst2", "--input", "odd.tsv", "--output", "odd.jsonl", cwd=tour,
                    expect_rc=None)
    assert_one_line_error(again, "odd.jsonl", "--overwrite")


@pytest.mark.timeout(300)  # a long journey (tests/README.md)
def test_export_then_serve_text_in_a_fresh_process(tour, finetuned):
    # Needs `serve` to register TF Text's ops itself (the SavedModel's text
    # signatures use them); nothing in this process does it for the server.
    run_cli("export", "--model", "runs/sst2/best", "--format", "saved_model", "--out", "saved_models/sst2",
            cwd=tour)
    predicted = run_cli("predict", "--model", "runs/sst2", cwd=tour, input=STDIN_TEXTS[0] + "\n")
    expected = json.loads(predicted.stdout.splitlines()[0])
    # The README's exported base path in a fresh process, and a run directory served directly (forked).
    for args, fresh in ((["saved_models/sst2"], True), (["--model", "runs/sst2"], False)):
        server = Server(*args, cwd=tour, fresh=fresh)
        try:
            assert server.model_url.endswith("/v1/models/sst2")
            answer = server.request(server.model_url + ":predict",
                                    {"signature_name": "serve_text", "instances": [STDIN_TEXTS[0]]})
            metadata = server.request(server.model_url + "/metadata")
        finally:
            server.stop()
        probabilities = answer["predictions"][0]["probabilities"]
        assert math.isclose(sum(probabilities), 1.0, rel_tol=1e-4)
        np.testing.assert_allclose(probabilities, expected["probabilities"], atol=1e-4)
        assert "serve_text" in json.dumps(metadata)


def test_export_tflite_runs_on_the_plain_runtime(tour, finetuned):
    run_cli("export", "--model", "runs/sst2/best", "--format", "tflite", "--quantize", "dynamic",
            "--out", "saved_models/sst2_tflite", cwd=tour)
    folder = tour / "saved_models" / "sst2_tflite"
    models = sorted(folder.glob("*.tflite"))
    assert models and (folder / "spiece.model").is_file()
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(models[0]))
    interpreter.allocate_tensors()
    for detail in interpreter.get_input_details():
        interpreter.set_tensor(detail["index"], np.ones(detail["shape"], detail["dtype"]))
    interpreter.invoke()
    output = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    assert np.all(np.isfinite(output))


@pytest.mark.parametrize("quantize,tolerance", [("16x8", 0.05), ("int8-mixed", 0.1)])
def test_export_tflite_calibrated_on_a_text_file(tour, finetuned, quantize, tolerance):
    texts = [row.split("\t")[0] for row in (tour / "SST-2" / "dev.tsv").read_text().splitlines()[1:]]
    (tour / "calibration.txt").write_text("\n".join(texts[:24]) + "\n")
    run_cli("export", "--model", "runs/sst2/best", "--format", "tflite", "--quantize", quantize,
            "--calibration-text", "calibration.txt", "--calibration-examples", "16",
            "--max-length", "64", "--out", f"saved_models/sst2_{quantize}", cwd=tour)
    folder = tour / "saved_models" / f"sst2_{quantize}"
    assert json.loads((folder / "export.json").read_text())["quantize"] == quantize
    from ai_edge_litert.interpreter import Interpreter

    from albert_tf.export import pack_texts
    from albert_tf.loading import load_pretrained
    from input_pipeline import AlbertTokenizer

    runner = Interpreter(model_path=str(folder / "model.tflite")).get_signature_runner("serving_default")
    packed = pack_texts(AlbertTokenizer.load(str(folder)), texts[-4:], None, 64, pad_to=64)
    expected = np.asarray(load_pretrained(str(tour / "runs" / "sst2" / "best"))(packed)["logits"])
    expected = np.exp(expected) / np.exp(expected).sum(-1, keepdims=True)
    for row in range(4):
        probabilities = runner(**{k: v[row : row + 1] for k, v in packed.items()})["probabilities"]
        assert np.abs(probabilities - expected[row : row + 1]).max() <= tolerance / 2


@pytest.fixture(scope="module")
def finetuned_apart(tour, pretrained):
    """runs/base fine-tuned on short adjective reviews (export_fixtures.write_synthetic_reviews): runs/sst2's
    probabilities spread by 0.0003 over the MediaPipe test's texts, where a tokenization difference hides."""
    from export_fixtures import LABELS, write_synthetic_reviews

    (tour / "adjectives").mkdir()
    write_synthetic_reviews(tour / "adjectives", LABELS)
    run_cli("finetune", "--task", "classification", "--model", "runs/base/final", "--train", "adjectives/train.csv",
            "--eval", "adjectives/eval.csv", "--out", "runs/adjectives", "--batch-size", "8", "--epochs", "4",
            "--learning-rate", "3e-3", "--dropout", "0", cwd=tour)
    return tour / "runs" / "adjectives"


@pytest.mark.parametrize("quantize,tolerance", [("none", 1e-5), ("dynamic", 0.05)])
def test_mediapipe_text_classifier_agrees_with_predict(tour, finetuned_apart, quantize, tolerance):
    """MediaPipe Tasks' TextClassifier, as an app runs it: the exported file and raw text, nothing else."""
    from export_fixtures import MEDIAPIPE_TEXTS, assert_spread, run_mediapipe

    out = f"saved_models/sst2_mediapipe_{quantize}"
    run_cli("export", "--model", "runs/adjectives", "--format", "tflite", "--quantize", quantize, "--out", out,
            cwd=tour)
    texts = MEDIAPIPE_TEXTS + [row.split("\t")[0] for row in (tour / "SST-2" / "dev.tsv").read_text().splitlines()[1:9]]
    predicted = strict_json_lines(run_cli("predict", "--model", "runs/adjectives", cwd=tour,
                                          input="".join(t.replace("\t", " ") + "\n" for t in texts)).stdout)
    assert_spread([p["probabilities"][0] for p in predicted], texts)
    for text, expected, result in zip(texts, predicted, run_mediapipe(str(tour / out / "model.tflite"), texts)):
        (head,) = result
        scores = [head["scores"][str(i)] for i in range(len(expected["probabilities"]))]
        assert max(abs(score - p) for (_, score), p in zip(scores, expected["probabilities"])) <= tolerance, text
        if quantize == "none":
            assert max(scores, key=lambda s: s[1])[0] == expected["label"], text


def test_lora_and_truncation_carry_from_finetune_to_predict_and_export(tour, pretrained):
    # Long-document settings ride along too: --truncate-from start keeps each text's end, in predict
    # (the run's config) and in the exported serve_text (export reads the run's setting).
    done = run_cli("finetune", "--task", "sst2", "--model", "runs/base/final", "--train", "SST-2/train.tsv",
                   "--eval", "SST-2/dev.tsv", "--out", "runs/sst2_lora", "--batch-size", "16", "--epochs", "1",
                   "--lora-rank", "4", "--max-seq-length", "16", "--truncate", "--truncate-from", "start", cwd=tour)
    config = json.loads((tour / "runs" / "base" / "final" / "config.json").read_text())
    # H 32, one shared block: 4 projections x 4 x (32 + 32) LoRA weights, the word-embedding table's
    # rank-2 factors (the default --lora-embedding-rank: A (V, 2), B (2, E)) and the 2-class head (32 x 2 + 2).
    table = 2 * (config["vocab_size"] + config["embedding_size"])
    assert f"trainable parameters {4 * 4 * 64 + table + 66:,} of" in done.stdout, done.stdout
    run = json.loads((tour / "runs" / "sst2_lora" / "finetune.json").read_text())
    assert run["config"]["lora_rank"] == 4 and run["config"]["lora_embedding_rank"] == 2
    assert run["config"]["truncate_from"] == "start"
    long_text = "a gorgeous, witty film with a cast to remember, " * 4 + "and yet flat, dull and far too long"
    predicted = run_cli("predict", "--model", "runs/sst2_lora", cwd=tour, input=long_text + "\n")
    expected = json.loads(predicted.stdout.splitlines()[0])["probabilities"]
    exported = run_cli("export", "--model", "runs/sst2_lora/best", "--format", "saved_model", "--max-length", "16",
                       "--out", "saved_models/sst2_lora", cwd=tour)
    assert "Merging the LoRA factors (rank 4)" in exported.stdout
    assert "word-embedding table's (rank 2)" in exported.stdout
    assert "loses pieces from its start (as in fine-tuning)" in exported.stdout
    import tensorflow as tf

    from albert_tf.export import pack_texts
    from albert_tf.export.saved_model import load_saved_model
    from albert_tf.loading import load_pretrained
    from export_fixtures import graph_nodes
    from input_pipeline.tokenizer import AlbertTokenizer

    version = str(tour / "saved_models" / "sst2_lora" / "1")
    # Merged: the frozen graph holds the merged kernels, no factor of its own.
    assert not [n.name for n in graph_nodes(version) if "lora" in n.name.lower()]
    loaded = load_saved_model(version)
    answer = loaded.signatures["serve_text"](text=tf.constant([long_text]))
    np.testing.assert_allclose(answer["probabilities"].numpy()[0], expected, atol=1e-5)
    # The side matters for this text: its first 14 pieces give other probabilities.
    tokenizer = AlbertTokenizer.load(str(tour / "runs" / "sst2_lora" / "best" / "tokenizer"))
    logits = load_pretrained(str(tour / "runs" / "sst2_lora" / "best"))(pack_texts(tokenizer, [long_text], max_length=16))
    head = np.asarray(tf.nn.softmax(logits["logits"]))[0]
    assert np.abs(head - expected).max() > 1e-4, (head, expected)


def test_long_text_windows_carry_from_finetune_to_predict_and_export(tour, pretrained):
    # --max-windows: a text longer than the window is read as several, in training, in predict (the
    # run's config) and in the exported serve_text (export reads the run's setting).
    done = run_cli("finetune", "--task", "sst2", "--model", "runs/base/final", "--train", "SST-2/train.tsv",
                   "--eval", "SST-2/dev.tsv", "--out", "runs/sst2_windows", "--batch-size", "16", "--epochs", "1",
                   "--max-seq-length", "8", "--max-windows", "3", "--truncate", cwd=tour)
    assert "read as several windows" in done.stdout, done.stdout
    run = json.loads((tour / "runs" / "sst2_windows" / "finetune.json").read_text())
    assert run["config"]["max_windows"] == 3
    long_text = "a gorgeous, witty film with a cast to remember, and yet flat, dull and far too long"
    predicted = run_cli("predict", "--model", "runs/sst2_windows", cwd=tour, input=long_text + "\n")
    expected = json.loads(predicted.stdout.splitlines()[0])["probabilities"]

    from albert_tf.export import pack_windows
    from albert_tf.loading import load_pretrained
    from input_pipeline.tokenizer import AlbertTokenizer

    best = str(tour / "runs" / "sst2_windows" / "best")
    inputs, _ = pack_windows(AlbertTokenizer.load(best + "/tokenizer"), [long_text], 8, 3)
    assert len(inputs["token_ids"]) == 3
    window_logits = np.asarray(load_pretrained(best)(inputs)["logits"])
    mean = window_logits.mean(0)
    np.testing.assert_allclose(np.exp(mean) / np.exp(mean).sum(), expected, atol=1e-5)

    exported = run_cli("export", "--model", "runs/sst2_windows/best", "--format", "saved_model", "--max-length", "8",
                       "--out", "saved_models/sst2_windows", cwd=tour)
    assert "read as up to 3 windows, their outputs averaged (as in fine-tuning)" in exported.stdout
    import tensorflow as tf

    from albert_tf.export.saved_model import load_saved_model

    loaded = load_saved_model(str(tour / "saved_models" / "sst2_windows" / "1"))
    answer = loaded.signatures["serve_text"](text=tf.constant([long_text]))
    np.testing.assert_allclose(answer["probabilities"].numpy()[0], expected, atol=1e-5)
    run_cli("export", "--model", "runs/sst2_windows/best", "--format", "tflite", "--max-length", "8",
            "--out", "saved_models/sst2_windows_tflite", cwd=tour)
    metadata = json.loads((tour / "saved_models" / "sst2_windows_tflite" / "export.json").read_text())
    assert metadata["max_windows"] == 3 and "long_text" in metadata


def test_convert_to_hf_carries_a_tokenizer_transformers_reads(tour, pretrained):
    done = run_cli("convert", "--to", "hf", "--model", "runs/base", "--out", "hf_base", cwd=tour)
    note = done.stdout.splitlines()[-1]
    assert note.startswith("Note: transformers' AlbertTokenizer gives other ids") and "'10,'" in note, done.stdout
    import dataclasses

    from transformers import AlbertForPreTraining, AutoTokenizer

    from input_pipeline.tokenizer import AlbertTokenizer

    ours = AlbertTokenizer.load(str(pretrained / "tokenizer"))
    theirs = AutoTokenizer.from_pretrained(str(tour / "hf_base"))
    sentences = [s for document in movie_reviews.imdb_documents("heldout", limit=20) for s in document]
    quoted = "  Café CRÈME,   naïve ``quoted'' text\tand tabs  "
    sentences += [quoted]
    # What the note says: transformers maps `` and '' to '"' and keeps digit-comma pieces whole.
    unsplit = AlbertTokenizer(ours.model_proto, dataclasses.replace(ours.preprocessing, split_digit_comma=False))
    for sentence in sentences:
        hf_ids = theirs(sentence, add_special_tokens=False)["input_ids"]
        assert hf_ids == unsplit.encode(sentence.replace("``", '"').replace("''", '"')), sentence
    assert theirs(quoted, add_special_tokens=False)["input_ids"] != ours.encode(quoted)
    model = AlbertForPreTraining.from_pretrained(str(tour / "hf_base"))
    assert model.config.hidden_size == 32
    # And back: the HF directory's spiece.model comes along as DIR/tokenizer.
    run_cli("convert", "--from", "hf", "--model", "hf_base", "--out", "from_hf", cwd=tour)
    back = AlbertTokenizer.load(str(tour / "from_hf" / "tokenizer"))
    assert list(back.encode(sentences[0])) == list(ours.encode(sentences[0]))


def test_squad_v2_stores_its_threshold_and_predicts_without_answers(tour, pretrained):
    context = "The film opened in Paris in 1990 and closed in Berlin a year later, to no applause."
    qas = [{"id": "a", "question": "Where did it open?",
            "answers": [{"text": "Paris", "answer_start": context.index("Paris")}]},
           {"id": "b", "question": "Who sang?", "answers": [], "is_impossible": True},
           {"id": "c", "question": "Where did it close?",
            "answers": [{"text": "Berlin", "answer_start": context.index("Berlin")}]}]
    (tour / "squad.json").write_text(json.dumps({"data": [{"paragraphs": [{"context": context, "qas": qas}]}]}))
    unlabelled = [{"id": q["id"], "question": q["question"]} for q in qas]
    (tour / "questions.json").write_text(
        json.dumps({"data": [{"paragraphs": [{"context": context, "qas": unlabelled}]}]}))
    done = run_cli("finetune", "--task", "squad_v2", "--model", "runs/base", "--train", "squad.json",
                   "--eval", "squad.json", "--out", "runs/squad2", "--epochs", "1", "--batch-size", "4",
                   "--n-best-size", "1", cwd=tour)
    assert "best_f1_threshold" in done.stdout
    history = json.loads((tour / "runs" / "squad2" / "finetune.json").read_text())["history"]
    assert math.isfinite(history[0]["best_f1_threshold"]) and 0 <= history[0]["best_f1"] <= 100
    done = run_cli("predict", "--model", "runs/squad2", "--input", "questions.json", cwd=tour)
    rows = strict_json_lines(done.stdout)
    assert [(row["index"], row["id"]) for row in rows] == [(0, "a"), (1, "b"), (2, "c")]
    # With no span among one best start and end, the diff is infinite: null, not Infinity.
    assert all(row["null_score_diff"] is None or math.isfinite(row["null_score_diff"]) for row in rows)
    always_null = run_cli("predict", "--model", "runs/squad2", "--input", "questions.json",
                          "--null-score-diff-threshold=-1e9", cwd=tour)
    assert [row["answer"] for row in strict_json_lines(always_null.stdout)] == [""] * 3


def test_docs_pretrain_commands_static_and_raw_text(tour, pretrained):
    # docs/pretraining.md, both commands, with tiny sizes.
    run_cli("pretrain", "--data", "data/", "--out", "runs/docs_base",
            "--preset", "base", *TINY_MODEL, "--batch-size", "8", "--steps", "3", "--warmup-steps", "1",
            "--learning-rate", "0.00176", "--compile-step", "none", cwd=tour)
    done = run_cli("pretrain", "--data", "corpus/reviews.txt", "--tokenizer", "tok", "--out", "runs/small",
                   "--max-seq-length", "32", "--preset", "base", "--hidden-size", "32", "--embedding-size", "16",
                   "--num-layers", "2", "--num-heads", "2", "--intermediate-size", "64", "--batch-size", "8",
                   "--accumulation-steps", "2", "--steps", "3", "--warmup-steps", "1", "--learning-rate", "0.005",
                   "--embedding-init", "ppmi-svd", "--word-embedding-lr-scale", "0.5", "--compile-step", "none",
                   cwd=tour)
    assert "Word embeddings start from PPMI-SVD vectors" in done.stdout
    training = json.loads((tour / "runs" / "small" / "training_config.json").read_text())
    assert training["data"]["embedding_init"] == "ppmi-svd"
    assert training["trainer"]["word_embedding_lr_scale"] == 0.5
    for run in ("docs_base", "small"):
        assert (tour / "runs" / run / "final" / "tokenizer" / "spiece.model").is_file()
    # Records hold masked ids, not the text: PPMI-SVD needs the raw text.
    refused = run_cli("pretrain", "--data", "data/", "--out", "runs/refused", "--embedding-init", "ppmi-svd",
                      *TINY_MODEL, cwd=tour, expect_rc=2)
    assert "pass the text files with --tokenizer" in refused.stderr
    assert not (tour / "runs" / "refused" / "checkpoints").exists()


def test_ctrl_c_in_pretrain_says_where_it_stopped_and_resumes(tour, pretrained):
    command = albert_tf_command() + ["pretrain", *TINY_MODEL, "--compile-step", "none", "--data", "data/",
                                     "--out", "runs/interrupted",
                                     "--batch-size", "8", "--steps", "400", "--log-every", "1",
                                     "--checkpoint-every", "2"]
    process = start_program(command, cwd=tour, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=user_environment(),
                    preexec_fn=ctrl_c_reaches_it)
    for line in process.stdout:
        if line.startswith("step") and int(line.split()[1].split("/")[0]) >= 3:
            break
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and "interrupted at step" in stderr and "resume" in stderr, stderr
    resumed = run_cli(*command[len(albert_tf_command()):-6], "--steps", "6", "--log-every", "1",
                      "--checkpoint-every", "2", cwd=tour)
    assert "Resumed from" in resumed.stdout


def test_outputs_are_never_overwritten_or_left_half_written(tour, pretrained):
    refused = run_cli("train-tokenizer", "--input", "corpus/", "--vocab-size", "400", "--out", "tok/", cwd=tour,
                      expect_rc=None)
    assert_one_line_error(refused, "tok/", "--overwrite")
    refused = run_cli("create-data", "--input", "corpus/", "--tokenizer", "tok/", "--out", "data/", cwd=tour,
                      expect_rc=None)
    assert_one_line_error(refused, "data/", "--overwrite")
    # create-data failing half-way (the second file is not UTF-8) leaves no directory behind.
    os.makedirs(tour / "mixed", exist_ok=True)
    (tour / "mixed" / "a.txt").write_text((tour / "corpus" / "reviews.txt").read_text())
    (tour / "mixed" / "b.txt").write_bytes(b"a fine line\n\xff\xfe not text\n")
    failed = run_cli("create-data", "--input", "mixed/", "--tokenizer", "tok/", "--out", "data_bad/",
                     "--num-workers", "0", cwd=tour, expect_rc=None)
    assert_one_line_error(failed, "b.txt")
    assert not (tour / "data_bad").exists() and not [p for p in os.listdir(tour) if p.startswith(".data_bad")]
    run_cli("train-tokenizer", "--input", "corpus/", "--vocab-size", "300", "--out", "tok2/", cwd=tour)
    run_cli("train-tokenizer", "--input", "corpus/", "--vocab-size", "350", "--out", "tok2/", "--overwrite", cwd=tour)
    assert json.loads((tour / "tok2" / "tokenizer.json").read_text())["vocab_size"] == 350


def test_missing_files_are_one_line_errors(tour, finetuned):
    done = run_cli("finetune", "--task", "sst2", "--model", "runs/base/final", "--train", "missing.tsv",
                   "--eval", "SST-2/dev.tsv", "--out", "runs/never", cwd=tour, expect_rc=None)
    assert_one_line_error(done, "missing.tsv")
    assert not (tour / "runs" / "never").exists()
    assert_one_line_error(run_cli("predict", "--model", "runs/sst2", "--input", "missing.tsv", cwd=tour,
                                  expect_rc=None), "missing.tsv")
    assert_one_line_error(run_cli("export", "--model", "runs/nothing", "--format", "tflite", "--out", "x",
                                  cwd=tour, expect_rc=None), "runs/nothing")
    (tour / "one_label.csv").write_text("text,label\ngood film,pos\nfine acting,pos\n")
    done = run_cli("finetune", "--task", "classification", "--model", "runs/base/final", "--train", "one_label.csv",
                   "--eval", "one_label.csv", "--out", "runs/one_label", cwd=tour, expect_rc=None)
    assert_one_line_error(done, "one_label.csv", "a single label, 'pos'", "at least 2")
    assert not (tour / "runs" / "one_label").exists()
    (tour / "broken.json").write_text("{not json")
    assert_one_line_error(run_cli("pretrain", "--config", "broken.json", "--data", "data/", "--out", "runs/b",
                                  cwd=tour, expect_rc=None), "broken.json")


def test_version_and_help_print_no_start_up_noise(tmp_path):
    version = run_cli("--version", cwd=tmp_path)
    assert version.stdout.strip().startswith("albert-tf ") and version.stderr == ""
    helps = {}
    for command in ([], ["demo"], ["pretrain"], ["finetune"], ["predict"], ["convert"], ["export"], ["serve"]):
        done = run_cli(*command, "--help", cwd=tmp_path)
        assert done.stdout.startswith("usage: albert-tf") and done.stderr == "", (command, done.stderr)
        helps[" ".join(command)] = " ".join(done.stdout.split())
    assert "(default: 0.025)" in helps["pretrain"] and "(default: lamb)" in helps["pretrain"]
    assert "(where the learning rate reaches 0). (default: 3000)" in helps["demo"], helps["demo"]
    # The overview and --version load no command module, so neither TensorFlow nor Keras (seconds each).
    probe = ("import sys; from albert_tf.cli import main\n"
             "for argv in (['--help'], ['--version'], ['no-such-command']):\n"
             "    try: main(argv)\n"
             "    except SystemExit: pass\n"
             "print(sorted(m for m in ('tensorflow', 'keras', 'albert_tf.commands.finetune') if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True,
                            env=user_environment(), check=True)
    assert loaded.stdout.strip().splitlines()[-1] == "[]", loaded.stdout


@pytest.fixture(scope="module")
def hf_user_dir(tour, pretrained):
    """A HF directory as a user brings it (transformers' own save_pretrained, spiece.model beside).

    Made with transformers alone: a random AlbertForPreTraining over the tour's
    vocabulary, and the tokenizer as a hub download holds it (transformers 5
    writes tokenizer.json and tokenizer_config.json; the hub also has spiece.model).
    """
    import shutil

    import torch
    from transformers import AlbertConfig, AlbertForPreTraining, AlbertTokenizer

    directory = tour / "hf_user"
    torch.manual_seed(0)
    config = AlbertConfig(vocab_size=400, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                          num_attention_heads=2, intermediate_size=64, max_position_embeddings=128)
    AlbertForPreTraining(config).save_pretrained(directory)
    AlbertTokenizer(vocab_file=str(tour / "tok" / "spiece.model")).save_pretrained(directory)
    shutil.copy(tour / "tok" / "spiece.model", directory / "spiece.model")
    return directory


@pytest.mark.timeout(300)  # a long journey (tests/README.md)
def test_hf_directory_as_model_for_finetune_predict_export_and_convert(tour, hf_user_dir):
    # README: any --model also takes a HF save_pretrained directory, converted on load.
    done = run_cli("finetune", "--task", "sst2", "--model", "hf_user", "--train", "SST-2/train.tsv",
                   "--eval", "SST-2/dev.tsv", "--out", "runs/sst2_hf", "--batch-size", "16", "--epochs", "1",
                   cwd=tour)
    assert "Fine-tuning sst2 from hf_user" in done.stdout
    predicted = strict_json_lines(run_cli("predict", "--model", "runs/sst2_hf", cwd=tour,
                                          input="\n".join(STDIN_TEXTS) + "\n").stdout)
    assert [row["index"] for row in predicted] == [0, 1, 2] and predicted[0]["label"] in ("0", "1")
    # The run carries the HF directory's tokenizer, in albert-tf's format.
    from input_pipeline.tokenizer import AlbertTokenizer

    carried = AlbertTokenizer.load(str(tour / "runs" / "sst2_hf" / "best" / "tokenizer"))
    assert carried.model_proto == (hf_user_dir / "spiece.model").read_bytes()

    done = run_cli("export", "--model", "hf_user", "--format", "saved_model", "--out", "saved_models/hf_user",
                   cwd=tour)
    assert "Wrote AlbertPretrainer SavedModel" in done.stdout
    assert (tour / "saved_models" / "hf_user" / "1" / "saved_model.pb").is_file()
    server = Server("--model", "hf_user", cwd=tour)
    try:
        answer = server.request(server.model_url + ":predict",
                                {"signature_name": "serve_text",
                                 "instances": [{"text": STDIN_TEXTS[0], "mask_positions": [1, 2]}]})
    finally:
        server.stop()
    assert server.model_url.endswith("/v1/models/hf_user")
    prediction = answer["predictions"][0]
    assert np.shape(prediction["mlm_logits"]) == (2, 400) and len(prediction["sop_logits"]) == 2

    # Through albert-tf and back to transformers: the same tensors.
    run_cli("convert", "--to", "hf", "--model", "hf_user", "--out", "hf_user_again", cwd=tour)
    from transformers import AlbertForPreTraining

    before = AlbertForPreTraining.from_pretrained(str(hf_user_dir)).state_dict()
    after = AlbertForPreTraining.from_pretrained(str(tour / "hf_user_again")).state_dict()
    assert before.keys() == after.keys()
    assert all(np.array_equal(before[k].numpy(), after[k].numpy()) for k in before)

    # predict needs a fine-tuned run, and says so.
    refused = run_cli("predict", "--model", "hf_user", cwd=tour, input="a film\n", expect_rc=None)
    assert_one_line_error(refused, "hf_user", "not a fine-tuning output directory")
