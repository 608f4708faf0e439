"""The README's command-line tour, as a user runs it: every command in its own
fresh process, each one's output fed to the next, nothing imported or prepared
in between (tests/cli_helpers.run_cli).

The commands are the README's (section "Command line"), with tiny sizes: a few
hundred IMDB reviews, a 400-piece vocabulary, a two-layer model, a few steps.
Keep the two in step: a README command that changes changes here too.
"""

import csv
import json
import math
import os
import subprocess
import urllib.request

import numpy as np
import pytest

from cli_helpers import albert_tf_command, run_cli, user_environment
from input_pipeline import corpora

pytestmark = pytest.mark.slow

# Shrinks the README's `--preset base` to a model that trains in seconds.
TINY_MODEL = ["--embedding-size", "16", "--hidden-size", "32", "--num-layers", "2",
              "--num-heads", "2", "--intermediate-size", "64"]
STDIN_TEXTS = ["a gorgeous, witty film", "", "flat, dull and far too long"]


def write_sentences_corpus(directory, documents):
    """The original ALBERT format: one sentence per line, a blank line between documents."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "reviews.txt"), "w", encoding="utf-8") as f:
        for document in documents:
            f.write("\n".join(document) + "\n\n")
    return directory


def write_sst2(path, rows):
    """GLUE SST-2's layout: a `sentence<TAB>label` header, then one row per sentence."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, delimiter="\t", quoting=csv.QUOTE_NONE, escapechar="\\")
        writer.writerow(["sentence", "label"])
        writer.writerows(rows)
    return path


class Server:
    """`albert-tf serve` in its own process; the URL is read from its first line."""

    def __init__(self, base_path, cwd):
        self.process = subprocess.Popen(
            albert_tf_command() + ["serve", str(base_path), "--port", "0"], cwd=cwd,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=user_environment(),
        )
        line = self.process.stdout.readline()
        if " at http" not in line:
            self.process.kill()
            raise AssertionError(f"serve did not start: {line!r}\n{self.process.stderr.read()[-4000:]}")
        self.url = line.split(" at ", 1)[1].split()[0].rstrip(",")

    def post(self, path, body):
        request = urllib.request.Request(self.url.rstrip("/") + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=30)


@pytest.fixture(scope="module")
def tour(tmp_path_factory):
    """The working directory of a user following the README, with the inputs they bring."""
    root = tmp_path_factory.mktemp("tour")
    write_sentences_corpus(root / "corpus", corpora.imdb_documents("pretrain", limit=300))
    everything = corpora.rotten_tomatoes_sentences()
    order = np.random.default_rng(0).permutation(len(everything))
    rows = [(everything[i][0], everything[i][1]) for i in order[:96]]
    write_sst2(str(root / "SST-2" / "train.tsv"), rows[:64])
    write_sst2(str(root / "SST-2" / "dev.tsv"), rows[64:])
    return root


@pytest.fixture(scope="module")
def pretrained(tour):
    """train-tokenizer -> create-data -> pretrain, exactly the README's order and flags."""
    run_cli("train-tokenizer", "--input", "corpus/", "--vocab-size", "400", "--out", "tok/", cwd=tour)
    run_cli("create-data", "--input", "corpus/", "--tokenizer", "tok/", "--out", "data/",
            "--max-seq-length", "64", "--dupe-factor", "1", cwd=tour)
    # No --tokenizer and no --warmup-steps: the data directory carries the tokenizer,
    # and warmup is a fraction of the steps.
    run_cli("pretrain", "--preset", "base", *TINY_MODEL, "--data", "data/", "--out", "runs/base",
            "--strategy", "mirrored", "--batch-size", "8", "--steps", "6", cwd=tour)
    return tour / "runs" / "base"


@pytest.fixture(scope="module")
def finetuned(tour, pretrained):
    run_cli("finetune", "--task", "sst2", "--model", "runs/base/final", "--train", "SST-2/train.tsv",
            "--eval", "SST-2/dev.tsv", "--out", "runs/sst2", "--max-seq-length", "64",
            "--batch-size", "16", "--epochs", "1", cwd=tour)
    return tour / "runs" / "sst2"


def test_pretraining_leaves_a_run_that_carries_its_tokenizer(tour, pretrained):
    assert (tour / "data" / "tokenizer" / "spiece.model").is_file()
    assert (pretrained / "tokenizer" / "spiece.model").is_file()
    assert (pretrained / "final" / "tokenizer" / "spiece.model").is_file()
    config = json.loads((pretrained / "final" / "config.json").read_text())
    assert config["hidden_size"] == 32 and config["vocab_size"] == 400


def test_predict_gives_one_line_per_input_line(tour, finetuned):
    done = run_cli("predict", "--model", "runs/sst2", cwd=tour, input="\n".join(STDIN_TEXTS) + "\n")
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [row["index"] for row in rows] == [0, 1, 2]
    assert "error" in rows[1] and "label" not in rows[1]
    assert rows[0]["label"] in ("0", "1") and rows[2]["label"] in ("0", "1")
    assert (finetuned / "best" / "tokenizer" / "spiece.model").is_file()


def test_export_then_serve_text_in_a_fresh_process(tour, finetuned):
    run_cli("export", "--model", "runs/sst2/best", "--format", "saved_model", "--out", "saved_models/sst2",
            cwd=tour)
    predicted = run_cli("predict", "--model", "runs/sst2", cwd=tour, input=STDIN_TEXTS[0] + "\n")
    expected = json.loads(predicted.stdout.splitlines()[0])
    server = Server("saved_models/sst2", cwd=tour)
    try:
        answer = server.post("/v1/models/sst2:predict",
                             {"signature_name": "serve_text", "instances": [STDIN_TEXTS[0]]})
        metadata = json.loads(urllib.request.urlopen(server.url.rstrip("/") + "/v1/models/sst2/metadata",
                                                     timeout=60).read())
    finally:
        server.stop()
    probabilities = answer["predictions"][0]["probabilities"]
    assert math.isclose(sum(probabilities), 1.0, rel_tol=1e-4)
    np.testing.assert_allclose(probabilities, expected["probabilities"], atol=1e-4)
    assert "serve_text" in json.dumps(metadata)


def test_export_tflite_runs_on_the_plain_runtime(tour, finetuned):
    run_cli("export", "--model", "runs/sst2/best", "--format", "tflite", "--quantize", "dynamic",
            "--out", "saved_models/sst2_tflite", cwd=tour)
    models = sorted((tour / "saved_models" / "sst2_tflite").glob("*.tflite"))
    assert models, "no .tflite file written"
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(models[0]))
    interpreter.allocate_tensors()
    for detail in interpreter.get_input_details():
        interpreter.set_tensor(detail["index"], np.ones(detail["shape"], detail["dtype"]))
    interpreter.invoke()
    output = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    assert np.all(np.isfinite(output))


def test_convert_to_hf_carries_a_tokenizer_transformers_reads(tour, pretrained):
    run_cli("convert", "--to", "hf", "--model", "runs/base/final", "--out", "hf_base", cwd=tour)
    from transformers import AlbertForPreTraining, AutoTokenizer

    from input_pipeline.tokenizer import AlbertTokenizer

    ours = AlbertTokenizer.load(str(pretrained / "tokenizer"))
    theirs = AutoTokenizer.from_pretrained(str(tour / "hf_base"))
    sentences = [s for document in corpora.imdb_documents("heldout", limit=20) for s in document]
    for sentence in sentences:
        assert theirs(sentence, add_special_tokens=False)["input_ids"] == list(ours.encode(sentence)), sentence
    model = AlbertForPreTraining.from_pretrained(str(tour / "hf_base"))
    assert model.config.hidden_size == 32
