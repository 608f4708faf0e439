"""The fine-tuning loop: AdamW with warmup, evaluation every epoch, best checkpoint kept.

Output directory:
    best/            the best epoch's task model (`save_pretrained` layout),
                     with its tokenizer in best/tokenizer/
    tokenizer/       the tokenizer it was trained with
    finetune.json    the resolved `FinetuneConfig`, label names, per-epoch
                     metrics and the best epoch: enough to rebuild and rerun;
                     "interrupted" when Ctrl-C stopped the run after an epoch
                     finished (`FinetuneInterrupted`)

Epochs train with Keras' `model.fit`, or under MultiWorkerMirroredStrategy
(where `fit` does not run) with `CustomLoop`, which takes the same steps.
Only the chief of a multi-worker cluster writes the output directory.
"""

import contextlib
import dataclasses
import json
import math
import os
import time

import keras
import tensorflow as tf

from albert_tf.distribute import clip_after_all_reduce, is_chief
from albert_tf.loading import load_pretrained
from albert_tf.model_dirs import BEST_DIR, ENTRY_FILES, TOKENIZER_DIR, find_tokenizer
from albert_tf.models import AlbertBackbone
from albert_tf.models.pretrained import with_dtype_policy
from albert_tf.optimizers import build_optimizer
from albert_tf.precision import choose_precision
from albert_tf.recipes.config import FinetuneConfig
from albert_tf.recipes.custom_loop import CustomLoop, needs_custom_loop
from albert_tf.recipes.registry import RECIPES, get_recipe
from albert_tf.recipes.sentence import SentenceRecipe
from albert_tf.utils import files
from albert_tf.utils.errors import Interrupted, UserError
from input_pipeline.finetuning import make_dataset

RUN_FILE = "finetune.json"


class FinetuneInterrupted(Interrupted):
    """Ctrl-C during `finetune`'s epochs.

    Attributes:
        epoch, epochs: the epoch that was running, of how many.
        best_epoch: the best finished epoch, complete in `out_dir` (best/,
            tokenizer/, finetune.json with "interrupted"); None when no epoch
            had finished, and `out_dir` holds nothing usable.
        best: that epoch's scores (None with it).
        metric: the name of the score that picked it.
    """

    def __init__(self, epoch, epochs, best_epoch, best, metric):
        super().__init__(f"interrupted in epoch {epoch} of {epochs}")
        self.epoch, self.epochs, self.best_epoch, self.best, self.metric = epoch, epochs, best_epoch, best, metric


def check_lengths(config, backbone, tokenizer):
    tokenizer.check_vocab_size(backbone.config.vocab_size)
    if config.max_seq_length > backbone.config.max_position_embeddings:
        raise UserError(
            f"`max_seq_length` ({config.max_seq_length}) is longer than the model allows "
            f"(max_position_embeddings={backbone.config.max_position_embeddings})."
        )


def finetune(config, backbone, tokenizer, train_path, eval_path, out_dir, log=print, verbose=0, strategy=None):
    """Fine-tunes `backbone` on a task and keeps the best epoch.

    Under a `strategy` other than the default one, `config.fixed_shapes`
    defaults to on: every batch is (batch_size, max_seq_length), the partial
    last training batch is dropped, and evaluation fills its last batch with
    padding rows whose outputs are discarded. `config.batch_size` is the
    global batch, split across the replicas; gradients are all-reduced before
    they are clipped, so the steps are those of one device. Under
    `MultiWorkerMirroredStrategy` (which needs fixed shapes, and a batch that
    is a multiple of the replicas) every worker calls this with the same
    arguments, and only the chief writes `out_dir`.

    Args:
        config: a `FinetuneConfig`.
        backbone: an `AlbertBackbone` (pretrained, converted or freshly
            initialised). With `config.lora_rank` it gets LoRA factors
            (`AlbertBackbone.enable_lora`), in place. Under another dtype
            policy than `config.mixed_precision` resolves to, a copy under
            that policy trains (`with_dtype_policy`).
        tokenizer: the `AlbertTokenizer` matching the backbone's vocabulary.
        train_path, eval_path: data files (or directories, for RACE).
        out_dir: where `best/`, `tokenizer/` and `finetune.json` go (by
            the chief alone; other workers write nothing).
        log: called with one line of text per event.
        verbose: Keras `fit` verbosity.
        strategy: a `tf.distribute.Strategy` (default: the current one). The
            backbone's variables must have been created under its `scope()`;
            the task model and optimizer are built under it here.

    Returns:
        dict with "history" (per-epoch metrics), "best_epoch" and "best".
    """
    if not isinstance(backbone, AlbertBackbone):
        raise ValueError(f"`backbone` must be an AlbertBackbone. Received: {type(backbone).__name__}")
    check_lengths(config, backbone, tokenizer)
    strategy = strategy or tf.distribute.get_strategy()
    with strategy.scope():
        # False only in the default (no-op) strategy's scope.
        distributed = tf.distribute.has_strategy()
    config = config.resolved(backbone.config, distributed=distributed)
    # `fit` runs without XLA (see `_build`); TPUStrategy compiles the whole step.
    choice = choose_precision("finetune", config.mixed_precision, backbone.config.hidden_size, strategy=strategy)
    config = config.replace(mixed_precision=choice.precision)  # finetune.json records what ran
    log(f"Precision: {choice.describe()}")
    with strategy.scope():
        backbone = with_dtype_policy(backbone, choice.precision)
    log(f"learning rate {config.learning_rate:.3g}")
    if config.fixed_shapes:
        log(f"fixed shapes: batches of ({config.batch_size}, {config.max_seq_length}); the partial last training "
            "batch is dropped")
    recipe = get_recipe(config.task)
    if isinstance(recipe, SentenceRecipe):  # the heads that read one vector per example
        log(f"pooling {config.pooling}")
    keras.utils.set_random_seed(config.seed)

    label_names = recipe.label_names(train_path, config)
    train = recipe.encode(train_path, tokenizer, config, label_names)
    evaluation = recipe.encode(eval_path, tokenizer, config, label_names)
    for name, encoded in (("train", train), ("eval", evaluation)):
        log(f"{name}: " + "; ".join(encoded.notes))
    if not train.inputs or not evaluation.inputs:
        raise UserError(f"No examples left to {'train' if not train.inputs else 'evaluate'} on.")

    custom = needs_custom_loop(strategy)
    if custom and not config.fixed_shapes:
        raise UserError(f"`fixed_shapes` must be on under {type(strategy).__name__}: its step splits each "
                         "batch across the workers by shape. Received: fixed_shapes=False")
    with strategy.scope():
        model, steps_per_epoch = _build(config, recipe, backbone, label_names, len(train.inputs), log)
    loop = CustomLoop(model, strategy, config.batch_size) if custom else None
    # Non-chief workers of a cluster train and evaluate as the chief does, and write nothing.
    writes = is_chief(strategy)

    def epoch_dataset(epoch):
        # One dataset per epoch, for a new order each: see make_dataset's `shuffle`.
        return make_dataset(train.inputs, train.labels, config.batch_size, shuffle=True, seed=config.seed + epoch - 1,
                            bucket=config.bucket and not config.fixed_shapes, label_pad=recipe.label_pad,
                            pad_to=config.pad_to, remainder="drop" if config.fixed_shapes else "keep")

    if writes:
        files.makedirs(out_dir)
        tokenizer.save(os.path.join(out_dir, TOKENIZER_DIR))
    main_metric = recipe.metrics[0]
    history, best, best_epoch, epoch, finished = [], None, None, 1, 0
    try:
        for epoch in range(1, config.epochs + 1):
            start = time.perf_counter()
            if loop is None:
                fit = model.fit(epoch_dataset(epoch), epochs=epoch, initial_epoch=epoch - 1, shuffle=False,
                                verbose=verbose)
                train_loss, trained = float(fit.history["loss"][-1]), model
            else:
                train_loss, trained = loop.train_epoch(lambda: epoch_dataset(epoch)), loop.local_model()
            train_seconds = time.perf_counter() - start
            scores = recipe.evaluate(trained, evaluation, config)
            record = {"epoch": epoch, "train_loss": train_loss, "train_seconds": round(train_seconds, 2), **scores}
            history.append(record)
            improved = best is None or scores[main_metric] > best[main_metric]
            if improved:
                if writes:
                    _save_best(trained, tokenizer, out_dir)
                best, best_epoch = scores, epoch
            if writes:
                _write_run(out_dir, config, label_names, history, best_epoch, train, evaluation)
            finished = epoch
            # Logged once the epoch's outputs are written: a Ctrl-C after this line keeps the epoch.
            log(f"epoch {epoch}/{config.epochs}: loss {record['train_loss']:.4f}, "
                + ", ".join(f"{k} {v:.4f}" for k, v in scores.items() if isinstance(v, float))
                + f" ({train_seconds:.1f}s train, {steps_per_epoch} steps)" + (" *best*" if improved else ""))
    except KeyboardInterrupt:
        epoch = finished + 1  # the epoch that did not finish
        if best_epoch is not None and writes:
            # An epoch stopped while its best/ was being written is not finished.
            kept = [r for r in history if r["epoch"] <= max(finished, best_epoch)]
            _write_run(out_dir, config, label_names, kept, best_epoch, train, evaluation,
                       interrupted={"epoch": epoch, "epochs": config.epochs})
        raise FinetuneInterrupted(epoch, config.epochs, best_epoch, best, main_metric) from None
    return {"history": history, "best_epoch": best_epoch, "best": best}


def _build(config, recipe, backbone, label_names, num_examples, log):
    """(compiled task model, steps per epoch); call under the strategy's scope."""
    if backbone.lora_rank is not None:
        # A LoRA fine-tuned model fine-tunes on from its merged weights, so
        # `lora_rank` alone says what trains.
        backbone.merge_lora()
    model = recipe.build_model(backbone, label_names, config)
    if config.lora_rank:
        # Before compile: the optimizer takes the trainable variables as they are then.
        backbone.enable_lora(config.lora_rank, embedding_rank=config.lora_embedding_rank)
    trainable = sum(math.prod(v.shape) for v in model.trainable_weights)
    total = model.count_params()
    log(f"trainable parameters {trainable:,} of {total:,} ({100 * trainable / total:.2f}%)"
        + (f", LoRA rank {config.lora_rank}" if config.lora_rank else "")
        + (f" (word embeddings rank {config.lora_embedding_rank})" if config.lora_rank and config.lora_embedding_rank
           else ""))
    # Fixed shapes drop the partial last batch.
    batches = num_examples // config.batch_size if config.fixed_shapes else math.ceil(num_examples / config.batch_size)
    total_steps = batches * config.epochs
    # AdamW (LayerNorm/bias not decayed), warmup then linear decay, gradients clipped to norm 1.
    optimizer = build_optimizer(
        "adamw", learning_rate=config.learning_rate, warmup_steps=int(round(config.warmup_fraction * total_steps)),
        total_steps=total_steps, weight_decay=config.weight_decay, clip_norm=1.0,
    )
    clip_after_all_reduce(optimizer)
    # Per-batch padding gives a new sequence length nearly every batch, which
    # XLA would compile once each; with fixed shapes, XLA on CPUs and GPUs is
    # left off too (it was not measured here), and TPUStrategy compiles the
    # whole step whatever this says.
    model.compile(optimizer=optimizer, jit_compile=False)
    return model, batches


def _save_best(model, tokenizer, out_dir):
    """Writes best/ (model and tokenizer) whole: Ctrl-C leaves the previous best/ or the new one, never a mix.

    Weights only: Keras saves a compiled model's optimizer variables with its
    weights, and AdamW's two moments per weight would make every fine-tuned
    model three times its size for nothing a reader of best/ uses. Its
    compile config goes too, or loading would rebuild those moments (and warn
    that the file has none): best/ loads as an uncompiled model, as a
    backbone does.
    """
    with files.publish(os.path.join(out_dir, BEST_DIR), ENTRY_FILES) as staging:
        with _uncompiled(model):
            model.save_pretrained(staging)
        tokenizer.save(os.path.join(staging, TOKENIZER_DIR))


@contextlib.contextmanager
def _uncompiled(model):
    """`model` as Keras saves an uncompiled one, for the block; then as it was, to train on."""
    optimizer, compiled = getattr(model, "optimizer", None), model.compiled
    model.optimizer, model.compiled = None, False
    try:
        yield model
    finally:
        model.optimizer, model.compiled = optimizer, compiled


def _write_run(out_dir, config, label_names, history, best_epoch, train, evaluation, interrupted=None):
    run = {
        "config": config.to_dict(),
        "label_names": label_names,
        "data": {"train": train.notes, "eval": evaluation.notes},
        "history": history,
        "best_epoch": best_epoch,
    }
    if interrupted:
        run["interrupted"] = interrupted
    files.write_text(os.path.join(out_dir, RUN_FILE), json.dumps(run, indent=2))


@dataclasses.dataclass(frozen=True)
class RunSettings:
    """How the fine-tuning run that wrote a model directory read its text: what an export or `serve` of
    that directory defaults to. Any other directory, and a run recorded before a setting existed, gets the
    defaults (BERT's: one window, cut from the end).

    Attributes:
        max_seq_length: the run's `max_seq_length`; None for a directory no fine-tuning run wrote.
        truncate_from: which pieces of a longer text went: "end", "start" or "middle".
        max_windows: how many windows a long text was read as (classifiers and regressors).
        reads_pairs: whether the run read text pairs (a pair column, or a GLUE pair task).
    """

    max_seq_length: int | None = None
    truncate_from: str = "end"
    max_windows: int = 1
    reads_pairs: bool = False


def run_out_dir(directory):
    """The `finetune --out` directory of `directory`: the run above it where it is a run's `best/`, else itself."""
    path = files.normpath(directory)
    return os.path.dirname(path) if os.path.basename(path) == BEST_DIR else path


def run_settings(model_dir):
    """The `RunSettings` of the fine-tuning run whose `best/` is `model_dir`; the defaults for any other directory.

    Args:
        model_dir: a model directory (local path or URL).
    """
    out_dir = run_out_dir(model_dir)
    path = os.path.join(out_dir, RUN_FILE)
    if out_dir == files.normpath(model_dir) or not files.isfile(path):
        return RunSettings()
    config = json.loads(files.read_text(path)).get("config", {})
    glue = getattr(RECIPES.get(config.get("task")), "glue", None)
    known = {name: config[name] for name in ("max_seq_length", "truncate_from", "max_windows") if name in config}
    return RunSettings(**known, reads_pairs=bool(config.get("text_pair_column") or (glue is not None and glue.text_b)))


def load_run(directory):
    """(FinetuneConfig, task model, tokenizer, run record) of a `finetune` output directory.

    Args:
        directory: the `finetune --out` directory, or its `best/`.
    """
    directory = run_out_dir(directory)
    if not files.isdir(directory):
        raise UserError(f"{directory}: no such directory.")
    path = os.path.join(directory, RUN_FILE)
    if not files.isfile(path):
        raise UserError(f"{directory} is not a fine-tuning output directory: {RUN_FILE} is missing.")
    try:
        run = json.loads(files.read_text(path))
    except json.JSONDecodeError as e:
        raise UserError(f"{path} is not valid JSON: {e}") from e
    config = FinetuneConfig.from_dict(run["config"])
    best_dir = os.path.join(directory, BEST_DIR)
    model = load_pretrained(best_dir)
    return config, model, find_tokenizer(best_dir), run
