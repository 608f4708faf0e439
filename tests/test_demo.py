"""`albert-tf demo` end to end with a tiny override, and `albert-tf pretrain` on raw text."""

import json
import os

import pytest

from albert_tf import AlbertConfig, cli
from albert_tf.apps.demo import DemoConfig, heldout_examples
from albert_tf.saving import load_pretrained
from input_pipeline import TokenizedCorpus
from data_fixtures import imdb_documents, small_tokenizer

TINY = ["--vocab-size", "400", "--tokenizer-documents", "200", "--documents", "200", "--heldout-documents", "40",
        "--max-seq-length", "32", "--max-predictions-per-seq", "5", "--embedding-size", "8", "--hidden-size", "16",
        "--num-layers", "2", "--num-heads", "2", "--intermediate-size", "32", "--batch-size", "8",
        "--warmup-fraction", "0.25", "--checkpoint-every", "2", "--log-every", "1", "--eval-examples", "40",
        "--baseline-batches", "2"]


def test_heldout_examples_are_a_count_not_batches_of_the_training_size():
    corpus = TokenizedCorpus.from_documents(imdb_documents()[:40], small_tokenizer())
    data_config = DemoConfig(max_seq_length=32, max_predictions_per_seq=5).data_config()
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
    assert "Word embeddings start from PPMI-SVD vectors" in capsys.readouterr().out
    for name in ("tokenizer/spiece.model", "config.json", "training_config.json", "checkpoints/ckpt-3.index",
                 "final/model.weights.h5", "metrics.json", "loss_curve.png", "train_log.jsonl"):
        assert os.path.isfile(os.path.join(out, name)), name
    with open(os.path.join(out, "metrics.json")) as f:
        metrics = json.load(f)
    assert 0 <= metrics["heldout"]["mlm_accuracy"] <= 1 and 0 <= metrics["heldout"]["sop_accuracy"] <= 1
    assert "unigram_mlm_accuracy" in metrics["heldout"]
    assert metrics["heldout"]["num_examples"] == 40  # --eval-examples, not a multiple of --batch-size 8
    assert load_pretrained(os.path.join(out, "final")).config == AlbertConfig.load(out)
    capsys.readouterr()

    # The same command with more steps continues from step 3 with the saved tokenizer
    # and the checkpoint's embeddings (not a new PPMI-SVD start).
    assert cli.main(["demo", "--out", out, "--steps", "4", "--embedding-init", "ppmi-svd", *TINY]) == 0
    printed = capsys.readouterr().out
    assert "Reusing the tokenizer" in printed and "Resumed from" in printed and "at step 3" in printed
    assert "PPMI-SVD" not in printed
    assert "| held-out MLM accuracy" in printed

    # Another --vocab-size (a run made under the old 8,000 default) says how to resume it.
    other_size = [arg if arg != "400" else "500" for arg in TINY]
    assert cli.main(["demo", "--out", out, "--steps", "5", *other_size]) == 2
    error = capsys.readouterr().err
    assert "made with --vocab-size 400" in error and "rerun with --vocab-size 400" in error
    assert not os.path.exists(os.path.join(out, "checkpoints", "ckpt-5.index"))


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
    assert cli.main([*flags, "--steps", "2"]) == 0
    assert AlbertConfig.load(run).vocab_size == 300
    with open(os.path.join(run, "training_config.json")) as f:
        assert json.load(f)["trainer"]["num_steps"] == 2
    assert os.path.isfile(os.path.join(run, "tokenizer", "spiece.model"))
    assert os.path.isdir(os.path.join(run, "tensorboard"))
    capsys.readouterr()
    # Resuming with --remat: same weights, recomputed activations.
    assert cli.main([*flags, "--steps", "3", "--remat"]) == 0
    out = capsys.readouterr().out
    assert "at step 2" in out and "Precision: float32; remat: on" in out


def test_demo_boolean_flags_parse_both_ways():
    from albert_tf.apps.demo import DemoConfig

    parser = cli.build_parser()
    assert DemoConfig.jit_compile is True
    assert parser.parse_args(["demo", "--out", "x"]).jit_compile is True
    assert parser.parse_args(["demo", "--out", "x", "--no-jit-compile"]).jit_compile is False


def test_demo_recipe_flags_reach_the_trainer_and_the_data():
    from albert_tf.apps.demo import DemoConfig
    from albert_tf.commands.flags import config_kwargs

    args = cli.build_parser().parse_args(
        ["demo", "--out", "x", "--optimizer", "adamw", "--masked-lm-prob", "0.4", "--max-predictions-per-seq", "26",
         "--keep-checkpoints", "50", "--embedding-init", "random", "--word-embedding-lr-scale", "0.5"])
    config = DemoConfig(**config_kwargs(DemoConfig, args))
    assert config.embedding_init == "random"
    with pytest.raises(ValueError, match="`embedding_init` must be one of"):
        DemoConfig(embedding_init="svd")
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["demo", "--out", "x", "--embedding-init", "svd"])
    trainer = config.trainer_config()
    assert (trainer.optimizer, trainer.keep_checkpoints, trainer.word_embedding_lr_scale) == ("adamw", 50, 0.5)
    data = config.data_config()
    assert (data.masked_lm_prob, data.max_predictions_per_seq) == (0.4, 26)
    # The defaults are the documented demo recipe.
    default = DemoConfig()
    assert default.trainer_config().optimizer == "lamb"
    assert default.data_config().masked_lm_prob == 0.15
    assert (default.embedding_init, default.documents) == ("ppmi-svd", 19928)
    assert (default.vocab_size, default.tokenizer_documents) == (30000, 19928)
    recipe = default.trainer_config()
    assert (recipe.global_batch_size, recipe.num_steps, recipe.word_embedding_lr_scale) == (16, 3000, 0.25)
