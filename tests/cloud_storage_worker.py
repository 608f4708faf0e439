"""The command-line journey with every input and output under ram://, in one process.

TensorFlow's in-memory file system stands in for a bucket; it lives and dies
with its process, so the commands run here one after another through
`albert_tf.cli.main`, as `albert-tf ...` would run them. The user's files are
copied in first. Prints one last line, "REPORT {json}", for the test to check.

Usage: python cloud_storage_worker.py CORPUS_FILE TRAIN_TSV DEV_TSV
"""

import json
import os
import sys
import threading
import urllib.request

import tensorflow as tf

from albert_tf import cli
from albert_tf.training import progress
from albert_tf.utils import files

BUCKET = "ram://bucket"
TINY_MODEL = ["--embedding-size", "16", "--hidden-size", "32", "--num-layers", "2",
              "--num-heads", "2", "--intermediate-size", "64"]
PRETRAIN = ["pretrain", "--preset", "base", *TINY_MODEL, "--data", f"{BUCKET}/data", "--out", f"{BUCKET}/runs/base",
            "--batch-size", "8", "--steps", "8", "--checkpoint-every", "4", "--log-every", "2",
            "--compile-step", "none"]  # the paths are the subject here; XLA's own tests are elsewhere


def albert_tf(*args):
    code = cli.main(list(args))
    if code != 0:
        raise SystemExit(f"`albert-tf {' '.join(args)}` exited {code}")


def interrupted_pretraining(at_step):
    """Runs PRETRAIN with Ctrl-C arriving while step `at_step` is reported; returns the exit code."""
    update = progress.ProgressLogger.update

    def interrupt(self, step, *args, **kwargs):
        if step == at_step:
            raise KeyboardInterrupt
        return update(self, step, *args, **kwargs)

    # cli.main leaves through os._exit after Ctrl-C (see there); this process goes on.
    def leave(code):
        raise SystemExit(code)

    progress.ProgressLogger.update, real_exit = interrupt, os._exit
    os._exit = leave
    try:
        cli.main(PRETRAIN)
    except SystemExit as e:
        return e.code
    finally:
        progress.ProgressLogger.update, os._exit = update, real_exit
    return 0


def served_prediction(*args):
    """Runs `albert-tf serve ARGS --port 0`, posts one request to it, and stops it; returns the JSON reply.

    The server's own loop runs in a thread; the command returns once the
    request was answered, as it would after Ctrl-C.
    """
    from albert_tf.export.serving import ModelServer

    serve_forever, replies = ModelServer.serve_forever, []

    def answer_one(server):
        thread = threading.Thread(target=serve_forever, args=(server,), daemon=True)
        thread.start()
        request = urllib.request.Request(
            f"{server.url}:predict", method="POST",
            data=json.dumps({"signature_name": "serve_text", "instances": ["a gorgeous, witty film"]}).encode(),
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            replies.append(json.loads(response.read()))
        server.shutdown()
        thread.join()

    ModelServer.serve_forever = answer_one
    try:
        albert_tf("serve", *args, "--model-name", "served", "--port", "0")
    finally:
        ModelServer.serve_forever = serve_forever
    return replies[0]


def listing(root):
    return sorted(os.path.join(top, name)[len(root) + 1:] for top, _, names in files.walk(root) for name in names)


def main(corpus, train, dev):
    for source, target in ((corpus, "in/corpus/reviews.txt"), (train, "in/SST-2/train.tsv"),
                           (dev, "in/SST-2/dev.tsv")):
        files.makedirs(os.path.dirname(f"{BUCKET}/{target}"))
        files.write_bytes(f"{BUCKET}/{target}", open(source, "rb").read())

    albert_tf("train-tokenizer", "--input", f"{BUCKET}/in/corpus", "--vocab-size", "400", "--out", f"{BUCKET}/tok")
    albert_tf("create-data", "--input", f"{BUCKET}/in/corpus", "--tokenizer", f"{BUCKET}/tok",
              "--out", f"{BUCKET}/data", "--max-seq-length", "64", "--dupe-factor", "1", "--num-workers", "0")
    interrupted_code = interrupted_pretraining(at_step=6)
    after_interrupt = listing(f"{BUCKET}/runs/base")
    albert_tf(*PRETRAIN)
    albert_tf("finetune", "--task", "sst2", "--model", f"{BUCKET}/runs/base/final",
              "--train", f"{BUCKET}/in/SST-2/train.tsv", "--eval", f"{BUCKET}/in/SST-2/dev.tsv",
              "--out", f"{BUCKET}/runs/sst2", "--batch-size", "16", "--epochs", "1")
    albert_tf("predict", "--model", f"{BUCKET}/runs/sst2", "--input", f"{BUCKET}/in/SST-2/dev.tsv",
              "--output", f"{BUCKET}/predictions.jsonl")
    albert_tf("export", "--model", f"{BUCKET}/runs/sst2", "--format", "saved_model", "--out", f"{BUCKET}/serving")
    albert_tf("export", "--model", f"{BUCKET}/runs/sst2", "--format", "tflite", "--out", f"{BUCKET}/tflite")
    albert_tf("demo", "--out", f"{BUCKET}/demo", "--steps", "3", "--vocab-size", "400", "--tokenizer-documents", "200",
              "--documents", "200", "--heldout-documents", "40", "--max-seq-length", "32", "--embedding-size", "8",
              "--hidden-size", "16", "--num-layers", "2", "--num-heads", "2", "--intermediate-size", "32",
              "--batch-size", "8", "--eval-examples", "40", "--compile-step", "none")

    # Served from the bucket: an exported base path, and a run directory (exported on the fly).
    served_export = served_prediction(f"{BUCKET}/serving")
    served_run = served_prediction("--model", f"{BUCKET}/runs/sst2")

    # The exports work from where they were written.
    served = tf.saved_model.load(f"{BUCKET}/serving/1")
    interpreter = tf.lite.Interpreter(model_content=files.read_bytes(f"{BUCKET}/tflite/model.tflite"))
    report = {
        "interrupted_code": interrupted_code,
        "after_interrupt": after_interrupt,
        "run": listing(f"{BUCKET}/runs/base"),
        "log_steps": [record["step"] for record in progress.read_log(f"{BUCKET}/runs/base")],
        "finetune": listing(f"{BUCKET}/runs/sst2"),
        "predictions": len(files.read_text(f"{BUCKET}/predictions.jsonl").splitlines()),
        "dev_rows": len(files.read_text(f"{BUCKET}/in/SST-2/dev.tsv").splitlines()) - 1,
        "signatures": sorted(served.signatures),
        "served": [sorted(reply["predictions"][0]) for reply in (served_export, served_run)],
        "tflite_inputs": len(interpreter.get_signature_runner().get_input_details()),
        "demo": listing(f"{BUCKET}/demo"),
        "everything": listing(BUCKET),
    }
    sys.stdout.flush()
    print("REPORT " + json.dumps(report))


if __name__ == "__main__":
    main(*sys.argv[1:])
