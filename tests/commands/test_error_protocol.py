"""The one error protocol, as a user meets it: what `albert_tf.cli` prints for each kind of exception.

Commands raise; cli alone prints. A `UserError` is one line and exit 2; an
`RunStopped` run prints one line (why, where, what it kept) and exits with its why's code; any other
exception is a bug, even a ValueError raised inside Keras: its traceback
with --verbose, else one line that says so and points at --verbose, and exit
1, never the 2 of bad input. Each case plants its failure in a command's
work and runs `albert-tf`; Ctrl-C's, which ends the process, in a new one.
"""

import subprocess
import sys
import textwrap

from albert_tf.commands import train_tokenizer
from albert_tf.utils.errors import RunStopped, UserError
from cli_helpers import run_cli, user_environment

# `train-tokenizer --input CORPUS --out out` with its work replaced by BODY (the body of `run(args)`).
_PLANTED = textwrap.dedent("""
    import sys
    from albert_tf.commands import train_tokenizer

    def run(args):
        {body}

    train_tokenizer.run = run
    from albert_tf.cli import main

    sys.exit(main(["train-tokenizer", "--input", "corpus.txt", "--out", "out", *sys.argv[1:]]))
""")


def _albert_tf_with(tmp_path, monkeypatch, failure, *flags):
    """`albert-tf train-tokenizer ... FLAGS` in this process, its work replaced by `failure()`."""
    (tmp_path / "corpus.txt").write_text("a sentence\n")
    monkeypatch.setattr(train_tokenizer, "run", lambda args: failure())
    return run_cli("train-tokenizer", "--input", "corpus.txt", "--out", "out", *flags, cwd=tmp_path, expect_rc=None)


def _albert_tf_process_with(tmp_path, body):
    """The same in a new process, the work replaced by BODY (the body of `run(args)`)."""
    (tmp_path / "corpus.txt").write_text("a sentence\n")
    return subprocess.run([sys.executable, "-c", _PLANTED.format(body=body)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env=user_environment())


def _dense_of_minus_one_units():
    import keras

    keras.layers.Dense(units=-1)


def test_a_value_error_inside_keras_is_a_bug_with_its_traceback_under_verbose(tmp_path, monkeypatch):
    # Keras refuses a layer of -1 units with a ValueError: no check of the input raised it.
    keras_fails = _dense_of_minus_one_units
    done = _albert_tf_with(tmp_path, monkeypatch, keras_fails)
    lines = done.stderr.strip().splitlines()
    assert done.returncode not in (0, 2) and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("albert-tf train-tokenizer: internal error") and "ValueError" in lines[0], lines[0]
    assert "--verbose" in lines[0], lines[0]

    done = _albert_tf_with(tmp_path, monkeypatch, keras_fails, "--verbose")
    assert done.returncode not in (0, 2), done.stderr
    assert "Traceback (most recent call last)" in done.stderr and "keras" in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("ValueError"), done.stderr


def test_a_user_error_is_one_line_and_exit_2(tmp_path, monkeypatch):
    def too_small():
        raise UserError("--vocab-size 3 is too small")

    done = _albert_tf_with(tmp_path, monkeypatch, too_small)
    assert done.returncode == 2 and done.stderr == "albert-tf train-tokenizer: error: --vocab-size 3 is too small\n"


def test_a_stopped_run_prints_one_line_and_exits_with_the_code_of_why_it_stopped(tmp_path, monkeypatch):
    def preempted():
        raise RunStopped("preempted", "at step 7 of 9", step=7, saved="checkpoint", path="run/checkpoints/ckpt-7")

    done = _albert_tf_with(tmp_path, monkeypatch, preempted)
    assert done.returncode == 143 and done.stderr == (
        "albert-tf train-tokenizer: stopped by SIGTERM at step 7 of 9; the newest checkpoint is "
        "run/checkpoints/ckpt-7. Rerun the same command to resume.\n")

    def diverged():
        raise RunStopped("diverged", "at step 4 (the loss is nan)", then="Lower it.")

    done = _albert_tf_with(tmp_path, monkeypatch, diverged)
    assert done.returncode == 1 and done.stderr == (
        "albert-tf train-tokenizer: training diverged at step 4 (the loss is nan); nothing was kept. Lower it.\n")
    # Ctrl-C's message starts on a line of its own, after the terminal's "^C"; its exit ends the process.
    done = _albert_tf_process_with(tmp_path, "from albert_tf.utils.errors import RunStopped; "
                                             "raise RunStopped('interrupted', 'at step 3 of 9')")
    assert done.returncode == 130 and done.stderr == (
        "\nalbert-tf train-tokenizer: interrupted at step 3 of 9; nothing was kept. "
        "Rerun the same command to start again.\n")


def test_sigterm_asks_a_long_command_to_stop_instead_of_ending_it(tmp_path):
    # The signal is the subject: a process of its own. train-tokenizer stops on SIGTERM: the signal sets
    # args.stop_requested, and the command raises at its safe point.
    done = _albert_tf_process_with(tmp_path, "import os, signal; os.kill(os.getpid(), signal.SIGTERM); "
                                             "from albert_tf.utils.errors import RunStopped; "
                                             "raise (RunStopped('preempted', 'at once') if args.stop_requested() "
                                             "else SystemExit(5))")
    assert done.returncode == 143 and done.stderr == (
        "albert-tf train-tokenizer: stopped by SIGTERM at once; nothing was kept. Rerun the same command to start "
        "again.\n")


def test_pretrain_on_an_empty_data_directory_says_so_naming_the_flag(tmp_path):
    from data_fixtures import small_tokenizer

    (tmp_path / "empty").mkdir()
    small_tokenizer().save(str(tmp_path / "tok"))
    for extra in ([], ["--tokenizer", str(tmp_path / "tok")]):
        done = run_cli("pretrain", "--data", tmp_path / "empty", "--out", tmp_path / "run", *extra, expect_rc=2)
        assert done.stderr.strip() == (f"albert-tf pretrain: error: --data {tmp_path / 'empty'}: empty directory; "
                                       "pass a create-data output directory, or text files (or directories of "
                                       "them) with --tokenizer."), done.stderr


def test_predict_help_names_its_output_flag():
    done = run_cli("predict", "--help")
    assert "Replace a non-empty --output." in " ".join(done.stdout.split()), done.stdout
