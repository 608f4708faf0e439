"""The one error protocol, as a user meets it: what `albert_tf.cli` prints for each kind of exception.

Commands raise; cli alone prints. A `UserError` is one line and exit 2; an
`RunStopped` run prints one line (why, where, what it kept) and exits with its why's code; any other
exception is a bug, even a ValueError raised inside Keras: its traceback
with --verbose, else one line that says so and points at --verbose, and exit
1, never the 2 of bad input. Each case plants its failure in a command's
work and runs `albert-tf` in a fresh process.
"""

import subprocess
import sys
import textwrap

from cli_helpers import user_environment

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


def _albert_tf_with(tmp_path, body, *flags):
    (tmp_path / "corpus.txt").write_text("a sentence\n")
    script = _PLANTED.format(body=body)
    return subprocess.run([sys.executable, "-c", script, *flags], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env=user_environment())


def test_a_value_error_inside_keras_is_a_bug_with_its_traceback_under_verbose(tmp_path):
    # Keras refuses a layer of -1 units with a ValueError: no check of the input raised it.
    keras_fails = "import keras; keras.layers.Dense(units=-1)"
    done = _albert_tf_with(tmp_path, keras_fails)
    lines = done.stderr.strip().splitlines()
    assert done.returncode not in (0, 2) and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("albert-tf train-tokenizer: internal error") and "ValueError" in lines[0], lines[0]
    assert "--verbose" in lines[0], lines[0]

    done = _albert_tf_with(tmp_path, keras_fails, "--verbose")
    assert done.returncode not in (0, 2), done.stderr
    assert "Traceback (most recent call last)" in done.stderr and "keras" in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("ValueError"), done.stderr


def test_a_user_error_is_one_line_and_exit_2(tmp_path):
    done = _albert_tf_with(tmp_path, "from albert_tf.utils.errors import UserError; "
                                     "raise UserError('--vocab-size 3 is too small')")
    assert done.returncode == 2 and done.stderr == "albert-tf train-tokenizer: error: --vocab-size 3 is too small\n"


def test_a_stopped_run_prints_one_line_and_exits_with_the_code_of_why_it_stopped(tmp_path):
    done = _albert_tf_with(tmp_path, "from albert_tf.utils.errors import RunStopped; "
                                     "raise RunStopped('preempted', 'at step 7 of 9', step=7, saved='checkpoint', "
                                     "path='run/checkpoints/ckpt-7')")
    assert done.returncode == 143 and done.stderr == (
        "albert-tf train-tokenizer: stopped by SIGTERM at step 7 of 9; the newest checkpoint is "
        "run/checkpoints/ckpt-7. Rerun the same command to resume.\n")
    # Ctrl-C's message starts on a line of its own, after the terminal's "^C".
    done = _albert_tf_with(tmp_path, "from albert_tf.utils.errors import RunStopped; "
                                     "raise RunStopped('interrupted', 'at step 3 of 9')")
    assert done.returncode == 130 and done.stderr == (
        "\nalbert-tf train-tokenizer: interrupted at step 3 of 9; nothing was kept. "
        "Rerun the same command to start again.\n")
    done = _albert_tf_with(tmp_path, "from albert_tf.utils.errors import RunStopped; "
                                     "raise RunStopped('diverged', 'at step 4 (the loss is nan)', then='Lower it.')")
    assert done.returncode == 1 and done.stderr == (
        "albert-tf train-tokenizer: training diverged at step 4 (the loss is nan); nothing was kept. Lower it.\n")


def test_sigterm_asks_a_long_command_to_stop_instead_of_ending_it(tmp_path):
    # train-tokenizer stops on SIGTERM: the signal sets args.stop_requested, and the command raises at its safe point.
    done = _albert_tf_with(tmp_path, "import os, signal; os.kill(os.getpid(), signal.SIGTERM); "
                                     "from albert_tf.utils.errors import RunStopped; "
                                     "raise (RunStopped('preempted', 'at once') if args.stop_requested() "
                                     "else SystemExit(5))")
    assert done.returncode == 143 and done.stderr == (
        "albert-tf train-tokenizer: stopped by SIGTERM at once; nothing was kept. Rerun the same command to start "
        "again.\n")
