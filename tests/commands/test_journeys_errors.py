"""User errors and quiet logs, as a user meets them; the start-up lines of a new process.

Every user error is one stderr line naming the flag or file, exit 2, no
traceback; no command's stderr carries TensorFlow's C++ start-up lines. The
runs come from `journey_fixtures` (a tiny pretrained and fine-tuned model).
"""

import json
import socket
import subprocess
import sys

import numpy as np
import pytest

from cli_helpers import run_cli, user_environment
from journey_fixtures import STDIN_TEXTS, TINY_MODEL, Server, assert_quiet_stderr, strict_json_lines

def one_line_error(*args, cwd, input=None, fresh=False):
    """Runs `albert-tf ARGS`, expecting exit 2; returns its single stderr line."""
    done = run_cli(*args, cwd=cwd, input=input, expect_rc=2, fresh=fresh)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def _paths_that_pass_the_early_checks(root):
    """d/, t, e and m/ (a model directory by its files): a missing path would be named before the flags."""
    for name in ("d", "m"):
        (root / name).mkdir()
    for name in ("t", "e", "m/config.json", "m/albert_tf.json"):
        (root / name).write_text("{}")


def test_a_mistyped_flag_or_command_names_the_closest_one(tmp_path):
    _paths_that_pass_the_early_checks(tmp_path)
    line = one_line_error("pretrain", "--data", "d", "--out", "o", "--learning_rate", "0.1", cwd=tmp_path)
    assert "--learning_rate" in line and "did you mean --learning-rate?" in line, line
    assert "'0.1'" not in line  # the unknown flag's value is not a second problem
    line = one_line_error("finetune", "--task", "sst2", "--model", "m", "--train", "t", "--eval", "e", "--out", "o",
                          "--max_seq_length=64", cwd=tmp_path)
    assert "--max-seq-length" in line, line
    line = one_line_error("pretrian", "--data", "d", cwd=tmp_path)
    assert "'pretrian'" in line and "did you mean pretrain?" in line, line
    # argparse's own errors (a missing flag) are one line too, not the usage block.
    line = one_line_error("export", "--model", "m", cwd=tmp_path)
    assert "--format" in line and "--out" in line and "albert-tf export --help" in line, line


def test_a_mistyped_flag_is_named_before_a_missing_required_one(tmp_path):
    _paths_that_pass_the_early_checks(tmp_path)
    # argparse alone says "the following arguments are required: --model, ..." and never names --modle.
    line = one_line_error("export", "--modle", "m", cwd=tmp_path)
    assert "unknown flag --modle (did you mean --model?)" in line and "required" not in line, line
    # Also when another flag names a missing file: the mistyped flag is the first thing to fix.
    line = one_line_error("finetune", "--task", "sst2", "--modle", "m", "--train", "t", cwd=tmp_path)
    assert "unknown flag --modle (did you mean --model?)" in line, line
    # With no unknown flag, the missing ones are named as before.
    line = one_line_error("finetune", "--task", "sst2", "--model", "m", cwd=tmp_path)
    assert "required: --train, --eval, --out" in line, line


@pytest.mark.slow
def test_verbose_after_the_command_is_the_switch_before_it(tmp_path):
    # convert loads TensorFlow before it finds the missing model: --verbose shows TensorFlow's start-up
    # lines, written before or after the command alike; without it the error is the one line. New
    # processes: TensorFlow writes its start-up lines once, when a process loads it.
    command = ["convert", "--from", "hf", "--model", "missing", "--out", "o"]
    quiet = one_line_error(*command, cwd=tmp_path, fresh=True)
    before = run_cli("--verbose", *command, cwd=tmp_path, expect_rc=2, fresh=True).stderr.strip().splitlines()
    after = run_cli(*command, "--verbose", cwd=tmp_path, expect_rc=2, fresh=True).stderr.strip().splitlines()
    assert len(after) == len(before) > 1 and after[-1] == before[-1] == quiet, (before, after)
    # finetune's --verbose was Keras fit's verbosity (it took a number); that is --fit-verbose now.
    from albert_tf import cli

    base = ["finetune", "--task", "sst2", "--model", "m", "--train", "t", "--eval", "e", "--out", "o"]
    for argv, verbose in ((base, False), (base + ["--verbose"], True), (["--verbose"] + base, True)):
        args = cli.build_parser(argv).parse_args(argv + ["--fit-verbose", "2"])
        assert (args.verbose, args.fit_verbose) == (verbose, 2), argv


# A bad value, a bad choice, a missing required flag and an unknown flag of each
# command (serve has no required flag, convert no typed one), reported by the
# command's own parser: its flags are built without TensorFlow.
_FLAG_ERRORS = {
    "train-tokenizer: error: argument --vocab-size: invalid int value: 'x'":
        ["train-tokenizer", "--input", "t.tsv", "--out", "o", "--vocab-size", "x"],
    "train-tokenizer: error: argument --language: invalid choice: 'xx'":
        ["train-tokenizer", "--input", "t.tsv", "--out", "o", "--language", "xx"],
    "train-tokenizer: error: the following arguments are required: --out": ["train-tokenizer", "--input", "t.tsv"],
    "train-tokenizer: error: unknown flag --bogus": ["train-tokenizer", "--input", "t.tsv", "--out", "o", "--bogus"],
    "create-data: error: argument --dupe-factor: invalid int value: 'x'":
        ["create-data", "--input", "t.tsv", "--tokenizer", "empty", "--out", "o", "--dupe-factor", "x"],
    "create-data: error: argument --format: invalid choice: 'xx'":
        ["create-data", "--input", "t.tsv", "--tokenizer", "empty", "--out", "o", "--format", "xx"],
    "create-data: error: the following arguments are required: --tokenizer":
        ["create-data", "--input", "t.tsv", "--out", "o"],
    "create-data: error: unknown flag --bogus":
        ["create-data", "--input", "t.tsv", "--tokenizer", "empty", "--out", "o", "--bogus"],
    "pretrain: error: argument --steps: invalid int value: 'x'": ["pretrain", "--data", "t.tsv", "--out", "o",
                                                                  "--steps", "x"],
    "pretrain: error: argument --strategy: invalid choice: 'xx'": ["pretrain", "--data", "t.tsv", "--out", "o",
                                                                   "--strategy", "xx"],
    "pretrain: error: the following arguments are required: --out": ["pretrain", "--data", "t.tsv"],
    "pretrain: error: unknown flag --bogus": ["pretrain", "--data", "t.tsv", "--out", "o", "--bogus"],
    "demo: error: argument --steps: invalid int value: 'x'": ["demo", "--out", "o", "--steps", "x"],
    "demo: error: argument --embedding-init: invalid choice: 'xx'": ["demo", "--out", "o", "--embedding-init", "xx"],
    "demo: error: the following arguments are required: --out": ["demo"],
    "demo: error: unknown flag --bogus": ["demo", "--out", "o", "--bogus"],
    "finetune: error: argument --batch-size: invalid int value: 'x'":
        ["finetune", "--task", "sst2", "--model", "model", "--train", "t.tsv", "--eval", "t.tsv", "--out", "o",
         "--batch-size", "x"],
    "finetune: error: argument --task: invalid choice: 'nosuch'":
        ["finetune", "--task", "nosuch", "--model", "model", "--train", "t.tsv", "--eval", "t.tsv", "--out", "o"],
    "finetune: error: the following arguments are required: --eval":
        ["finetune", "--task", "sst2", "--model", "model", "--train", "t.tsv", "--out", "o"],
    "finetune: error: unknown flag --bogus":
        ["finetune", "--task", "sst2", "--model", "model", "--train", "t.tsv", "--eval", "t.tsv", "--out", "o",
         "--bogus"],
    "predict: error: argument --batch-size: invalid int value: 'x'":
        ["predict", "--model", "empty", "--input", "t.tsv", "--batch-size", "x"],
    "predict: error: argument --mixed-precision: invalid choice: 'bogus'":
        ["predict", "--model", "empty", "--input", "t.tsv", "--mixed-precision", "bogus"],
    "predict: error: the following arguments are required: --model": ["predict", "--input", "t.tsv"],
    "predict: error: unknown flag --bogus": ["predict", "--model", "empty", "--input", "t.tsv", "--bogus"],
    "export: error: argument --max-length: invalid int value: 'x'":
        ["export", "--model", "model", "--format", "tflite", "--out", "o", "--max-length", "x"],
    "export: error: argument --format: invalid choice: 'onnx'": ["export", "--model", "model", "--format", "onnx",
                                                                 "--out", "o"],
    "export: error: the following arguments are required: --format": ["export", "--model", "model", "--out", "o"],
    "export: error: unknown flag --bogus": ["export", "--model", "model", "--format", "tflite", "--out", "o",
                                            "--bogus"],
    "serve: error: argument --port: invalid int value: 'x'": ["serve", "model", "--port", "x"],
    "serve: error: argument --max-batch-size: invalid int value: 'x'": ["serve", "model", "--max-batch-size", "x"],
    "serve: error: unknown flag --bogus": ["serve", "model", "--bogus"],
    "convert: error: argument --from: invalid choice: 'xx'": ["convert", "--from", "xx", "--model", "m", "--out", "o"],
    "convert: error: the following arguments are required: --out": ["convert", "--from", "hf", "--model", "m"],
    "convert: error: unknown flag --bogus": ["convert", "--from", "hf", "--model", "m", "--out", "o", "--bogus"],
}


def test_user_errors_that_need_no_model_come_before_tensorflow_loads(tmp_path):
    from albert_tf.commands import early_checks

    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    (tmp_path / "empty").mkdir()
    (tmp_path / "model").mkdir()  # what model_dirs.resolve_model_dir looks for, not a model
    for name in ("config.json", "albert_tf.json"):
        (tmp_path / "model" / name).write_text("{}")
    (tmp_path / "t.tsv").write_text("sentence\tlabel\n")
    (tmp_path / "written.jsonl").write_text("{}\n")
    cases = {
        "--input missing.txt": ["create-data", "--input", "t.tsv", "missing.txt", "--tokenizer", "empty",
                                "--out", "o"],
        "--out full is not empty": ["create-data", "--input", "t.tsv", "--tokenizer", "empty", "--out", "full"],
        "--tokenizer nodir: no such directory": ["create-data", "--input", "t.tsv", "--tokenizer", "nodir",
                                                 "--out", "o"],
        "--out full is not empty ": ["train-tokenizer", "--input", "t.tsv", "--out", "full"],
        "--data missing/": ["pretrain", "--data", "missing/", "--out", "o"],
        "--eval-data missing/": ["pretrain", "--data", "t.tsv", "--eval-data", "missing/", "--out", "o"],
        "--train missing.tsv": ["finetune", "--task", "sst2", "--model", "empty", "--train", "missing.tsv",
                                "--eval", "t.tsv", "--out", "o"],
        "--model empty holds no model": ["finetune", "--task", "sst2", "--model", "empty", "--train", "t.tsv",
                                         "--eval", "t.tsv", "--out", "o"],
        "--eval empty: is a directory": ["finetune", "--task", "sst2", "--model", "empty", "--train", "t.tsv",
                                         "--eval", "empty", "--out", "o"],
        "--input missing.tsv": ["predict", "--model", "empty", "--input", "missing.tsv"],
        "--output written.jsonl exists": ["predict", "--model", "empty", "--input", "t.tsv", "--output",
                                          "written.jsonl"],
        "--model missing: no such directory": ["export", "--model", "missing", "--format", "tflite", "--out", "o"],
        "--out full is not empty  ": ["export", "--model", "model", "--format", "tflite", "--out", "full"],
        "--out full is not empty   ": ["export", "--model", "model", "--format", "web", "--out", "full"],
        **_FLAG_ERRORS,
    }
    probe = (
        "import json, sys\n"
        "from albert_tf.cli import main\n"
        "def code(argv):\n"
        "    try:\n"
        "        return main(argv)\n"
        "    except SystemExit as e:  # argparse's errors\n"
        "        return e.code\n"
        f"codes = [code(argv) for argv in {list(cases.values())!r}]\n"
        "print(json.dumps([codes, sorted(m for m in ('tensorflow', 'keras') if m in sys.modules)]))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True,
                          env=user_environment(), timeout=300)
    codes, loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded == [], f"TensorFlow loaded before a user error: {loaded}"
    lines = done.stderr.strip().splitlines()
    assert codes == [2] * len(cases) and len(lines) == len(cases), done.stderr
    for expected, line in zip(cases, lines):
        assert expected.strip() in line, (expected, line)
    # Every flag checked early is the command's own, with the values it takes there.
    from albert_tf import cli

    commands = cli.build_parser()._subparsers._group_actions[0].choices
    for command, flags in early_checks.FLAGS.items():
        actions = commands[command]._option_string_actions
        for flag, kind in flags.items():
            assert flag in actions and (actions[flag].nargs == "+") == (kind == early_checks.PATHS), (command, flag)


def test_serve_on_a_port_in_use_names_the_port(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = one_line_error("serve", "runs/any", "--port", port, cwd=tmp_path)
    assert f"--port {port}" in line and "already in use" in line and "--port 0" in line, line


@pytest.mark.slow
def test_tpu_flag_selects_the_tpu_strategy_and_an_absent_tpu_is_one_line(tmp_path):
    # --data exists: a missing one is named before TensorFlow loads, so before the strategy.
    (tmp_path / "unread").mkdir()
    line = one_line_error("pretrain", "--tpu", "my-tpu", "--strategy", "mirrored", "--data", "unread/", "--out", "o",
                          cwd=tmp_path)
    assert "--tpu my-tpu" in line and "--strategy mirrored" in line, line
    # Without --strategy, --tpu selects the TPU: this machine has none, and says so before reading --data.
    line = one_line_error("pretrain", "--tpu", "local", "--data", "unread/", "--out", "o", cwd=tmp_path)
    assert line.startswith("albert-tf pretrain: error: --tpu local: No TPU answers"), line
    line = one_line_error("pretrain", "--tpu", "grpc://127.0.0.1:1", "--data", "unread/", "--out", "o",
                          cwd=tmp_path)
    assert "--tpu grpc://127.0.0.1:1" in line and "refused" in line, line
    # The TPU's zone and project reach the resolver, and say where no TPU answered.
    line = one_line_error("pretrain", "--tpu", "local", "--tpu-zone", "us-central2-b", "--gcp-project", "my-project",
                          "--data", "unread/", "--out", "o", cwd=tmp_path)
    assert "zone='us-central2-b', project='my-project'" in line and "No TPU answers" in line, line
    line = one_line_error("pretrain", "--tpu-zone", "us-central2-b", "--data", "unread/", "--out", "o",
                          cwd=tmp_path)
    assert "--tpu-zone us-central2-b" in line and "goes with --tpu" in line, line
    assert not (tmp_path / "o").exists()
    help_text = " ".join(run_cli("pretrain", "--help", cwd=tmp_path).stdout.split())
    assert "selects --strategy tpu" in help_text


@pytest.mark.slow
def test_noise_free_stderr_for_help_and_a_pretraining_run_that_xla_compiles(tour):
    # Every command of the quick journey (tests/commands/test_quick_journey.py) is checked there, in its
    # fresh process; these two add the help and the start-up and compile of XLA (--compile-step auto).
    assert_quiet_stderr(run_cli("--help", cwd=tour, fresh=True))
    assert_quiet_stderr(run_cli("pretrain", *TINY_MODEL, "--data", "data/", "--out", "runs/quiet", "--batch-size", "4",
                                "--steps", "2", cwd=tour, fresh=True))


@pytest.fixture(scope="module")
def short_run(tour, pretrained):
    """SST-2 fine-tuned with --max-seq-length 32 (the model allows 512)."""
    run_cli("finetune", "--task", "sst2", "--model", "runs/base/final", "--train", "SST-2/train.tsv",
            "--eval", "SST-2/dev.tsv", "--out", "runs/sst2_short", "--batch-size", "16", "--epochs", "1",
            "--max-seq-length", "32", "--truncate", cwd=tour)
    return tour / "runs" / "sst2_short"


@pytest.mark.slow
def test_predict_reads_a_plain_text_file_as_stdin_does(tour, short_run):
    (tour / "sentences.txt").write_text("\n".join(STDIN_TEXTS) + "\n")
    (tour / "sentences.tsv").write_text("\n".join(STDIN_TEXTS) + "\n")
    from_stdin = strict_json_lines(run_cli("predict", "--model", "runs/sst2_short", cwd=tour,
                                           input="\n".join(STDIN_TEXTS) + "\n").stdout)
    assert [row["index"] for row in from_stdin] == [0, 1, 2] and "error" in from_stdin[1]
    for name in ("sentences.txt", "sentences.tsv"):
        from_file = strict_json_lines(run_cli("predict", "--model", "runs/sst2_short", "--input", name,
                                              cwd=tour).stdout)
        assert from_file == from_stdin, name
    # And a table piped in is read as the table it is: its header is no text to predict.
    dev = (tour / "SST-2" / "dev.tsv").read_text()
    piped = strict_json_lines(run_cli("predict", "--model", "runs/sst2_short", cwd=tour, input=dev).stdout)
    from_file = strict_json_lines(run_cli("predict", "--model", "runs/sst2_short", "--input", "SST-2/dev.tsv",
                                          cwd=tour).stdout)
    assert len(piped) == len(dev.splitlines()) - 1 and piped == from_file


@pytest.mark.slow
def test_export_and_serve_default_to_the_runs_max_seq_length(tour, short_run):
    done = run_cli("export", "--model", "runs/sst2_short", "--format", "saved_model", "--out",
                   "saved_models/short", cwd=tour)
    assert "Wrote" in done.stdout
    metadata = json.loads((tour / "saved_models" / "short" / "1" / "assets.extra" / "albert_tf_export.json")
                          .read_text())
    assert metadata["max_length"] == 32, metadata
    help_text = " ".join(run_cli("export", "--help", cwd=tour).stdout.split())
    assert "Default: the fine-tuning run's --max-seq-length" in help_text


def _raw(url, request_bytes):
    """The server's raw answer to `request_bytes` on a fresh connection."""
    host, port = url.split("//")[1].split("/")[0].split(":")
    with socket.create_connection((host, int(port)), timeout=60) as connection:
        connection.sendall(request_bytes)
        chunks = []
        while chunk := connection.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.slow
@pytest.mark.timeout(300)  # a long journey (tests/README.md)
def test_served_run_answers_malformed_requests_with_400(tour, short_run):
    server = Server("--model", "runs/sst2_short", cwd=tour)
    try:
        path = "/" + server.model_url.split("/", 3)[3] + ":predict"
        row = {"token_ids": [2, 10, 3, 0], "segment_ids": [0] * 4, "padding_mask": [1, 1, 1, 0]}
        bodies = [b"null", b'"text"', b"1.5", b"true", b"[]",
                  json.dumps({"instances": [{**row, "token_ids": [2, None, 3, 0]}]}).encode(),
                  json.dumps({"instances": [{**row, "token_ids": [2, [10], 3, 0]}]}).encode(),
                  json.dumps({"instances": [{**row, "token_ids": [2.5, 10, 3, 0]}]}).encode(),
                  json.dumps({"instances": [{**row, "padding_mask": [True, True, True, False]}]}).encode(),
                  json.dumps({"signature_name": "serve_text", "instances": [None]}).encode()]
        for body in bodies:
            answer = _raw(server.model_url, f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
                          "Connection: close\r\n\r\n".encode() + body)
            head, _, payload = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.") and head.split()[1] == b"400", (body, answer[:300])
            assert isinstance(json.loads(payload)["error"], str)
        for line in (b"GET /", b"garbage", b"GET " + path.encode()):
            answer = _raw(server.model_url, line + b"\r\n\r\n")
            assert answer.startswith(b"HTTP/1.0 400 "), (line, answer[:300])
        good = server.request(server.model_url + ":predict",
                              {"signature_name": "serve_text", "instances": [STDIN_TEXTS[0]]})
        assert np.isclose(sum(good["predictions"][0]["probabilities"]), 1.0, atol=1e-4)
    finally:
        server.stop()


def test_early_checks_read_urls():
    import tensorflow as tf

    from albert_tf.commands.early_checks import check_paths

    root = "ram://early_checks"
    for path in (f"{root}/in.txt", f"{root}/full/x", f"{root}/tok/spiece.model"):
        tf.io.gfile.makedirs(path.rsplit("/", 1)[0])
        with tf.io.gfile.GFile(path, "w") as f:
            f.write("x")
    argv = ["--input", f"{root}/in.txt", "--tokenizer", f"{root}/tok", "--out"]
    check_paths("create-data", argv + [f"{root}/new"])
    check_paths("create-data", argv + [f"{root}/full", "--overwrite"])
    with pytest.raises(ValueError, match=f"--out {root}/full is not empty"):
        check_paths("create-data", argv + [f"{root}/full"])
    with pytest.raises(ValueError, match=f"--input {root}/missing.txt: no such file or directory"):
        check_paths("create-data", ["--input", f"{root}/missing.txt", "--tokenizer", f"{root}/tok", "--out", "o"])
    with pytest.raises(ValueError, match=f"--train {root}/full: is a directory"):
        check_paths("finetune", ["--train", f"{root}/full", "--eval", f"{root}/in.txt"])


def test_out_is_checked_once_before_the_command_or_by_the_command():
    from argparse import Namespace

    from albert_tf.commands.early_checks import out_checked_early

    # finetune's chief checks --out itself where no worker knew before TensorFlow whether it is the chief.
    assert out_checked_early("finetune", Namespace(strategy=None))
    assert not out_checked_early("finetune", Namespace(strategy="multi_worker"))
    # export writes a SavedModel into a new version directory under --out, which the command checks.
    assert [out_checked_early("export", Namespace(format=f)) for f in ("saved_model", "tflite", "web")] == [
        False, True, True]
