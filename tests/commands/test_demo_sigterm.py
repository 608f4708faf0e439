"""demo's SIGTERM path through the command line, in the test process: the CLI's handler sets the stop request,
the demo stops in pretraining at the step it names with that step's checkpoint, and the same command resumes
there. (tests/commands/test_kill.py sends the real signal to a fresh process, slowly.)"""

import signal

import tensorflow as tf

from albert_tf.training.step_runner import StepRunner
from cli_helpers import run_cli

# The demo's smallest run: a tokenizer of 40 reviews, no PPMI-SVD start, 4 steps of 4.
SMALL = ["--vocab-size", "300", "--tokenizer-documents", "40", "--documents", "40", "--heldout-documents", "10",
         "--max-seq-length", "32", "--max-predictions-per-seq", "5", "--embedding-size", "8", "--hidden-size", "16", "--num-layers", "2",
         "--num-heads", "2", "--intermediate-size", "32", "--batch-size", "4", "--steps", "4",
         "--steps-per-loop", "1", "--checkpoint-every", "2", "--log-every", "1", "--eval-examples", "8",
         "--baseline-batches", "1", "--embedding-init", "random", "--compile-step", "none"]


def test_sigterm_in_pretraining_stops_at_the_step_it_names_with_its_checkpoint_and_the_rerun_resumes_there(
        tmp_path, monkeypatch):
    run = tmp_path / "run"
    argv = ["demo", "--out", run, *SMALL]
    loops = []
    run_loop = StepRunner.run_loop

    def signalled_in_step_3(self, iterator, num_steps):
        # The signal itself, as a preemption sends it, while step 3 runs: the CLI's handler takes it.
        loops.append(num_steps)
        if len(loops) == 3:
            signal.raise_signal(signal.SIGTERM)
        return run_loop(self, iterator, num_steps)

    monkeypatch.setattr(StepRunner, "run_loop", signalled_in_step_3)
    stopped = run_cli(*argv, expect_rc=143)
    last = stopped.stderr.strip().splitlines()[-1]
    assert last.startswith(f"albert-tf demo: stopped by SIGTERM at step 3 of 4; the newest checkpoint is "
                           f"{run / 'checkpoints' / 'ckpt-3'}. Rerun the same command to resume: albert-tf demo "
                           f"--out {run} "), stopped.stderr
    assert len(loops) == 3 and not (run / "metrics.json").exists()
    # The checkpoint of the step named, not only the older one of --checkpoint-every.
    reader = tf.train.load_checkpoint(str(run / "checkpoints" / "ckpt-3"))
    assert reader.get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE") == 3

    monkeypatch.setattr(StepRunner, "run_loop", run_loop)
    resumed = run_cli(*argv)
    assert f"Resumed from {run / 'checkpoints' / 'ckpt-3'} at step 3." in resumed.stdout, resumed.stdout
    assert [line.split()[1] for line in resumed.stdout.splitlines() if line.startswith("step ")] == ["4/4"], \
        resumed.stdout
    assert (run / "metrics.json").is_file()
