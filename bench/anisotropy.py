"""Where do representations collapse? Per-layer anisotropy over a short pretraining run.

Trains the demo's model (every size and optimizer setting is a flag, so one
script probes the recipe), keeps every checkpoint, and for each one measures
on 64 held-out IMDB reviews ([CLS] review [SEP], one segment):

- anisotropy, per layer (0 = the projected embeddings, L = the last block):
  the mean cosine similarity between the states of different inputs, for
  the [CLS] state, the mean token state of each review, and single tokens
  (random real tokens of different reviews). 1.0 means every input gets the
  same vector; a fine-tuning head can then read nothing from it.
- the same for pooled_output (what the SOP and `--pooling cls` heads read),
- held-out MLM and SOP accuracy.

    python bench/anisotropy.py --out runs/aniso_demo --steps 600 --checkpoint-every 100 \\
        [--optimizer lamb --learning-rate 0.005 --warmup-steps 30 --batch-size 32 --seq 64] \\
        [--write bench/results/anisotropy_demo.md]
"""

import argparse
import os
import time

import numpy as np

from benchlib.output import emit_table


def mean_pairwise_cosine(vectors):
    """Mean cosine similarity over all pairs i != j of `vectors` (n, d)."""
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)
    similarity = unit @ unit.T
    n = len(vectors)
    return float((similarity.sum() - np.trace(similarity)) / (n * (n - 1)))


def layer_states(backbone, inputs):
    """The backbone's hidden states after the projection and after every layer.

    Returns:
        (states, pooled): list of L + 1 arrays (batch, seq, H) and (batch, H).
    """
    from input_pipeline import features
    from albert_tf.models.backbone import attention_bias_from_padding_mask

    c = backbone.config
    x = backbone.embeddings(inputs[features.TOKEN_IDS], inputs[features.SEGMENT_IDS])
    if backbone.embedding_projection is not None:  # None where E == H in the original's layout
        x = backbone.embedding_projection(x)
    bias = attention_bias_from_padding_mask(inputs[features.PADDING_MASK])
    states = [np.asarray(x)]
    for layer in range(c.num_hidden_layers):
        blocks = backbone.blocks[c.group_index(layer)] if c.sharing == "all" else backbone.blocks[layer]
        for block in blocks:
            x = block(x, bias)
        states.append(np.asarray(x))
    pooled = np.asarray(backbone.pooler(x[:, 0, :]))
    reference = backbone(inputs)
    # The loop above must be the backbone's own forward pass.
    np.testing.assert_allclose(pooled, np.asarray(reference["pooled_output"]), atol=1e-4)
    return states, pooled


def anisotropy(backbone, inputs, rng):
    """dict: cls / mean / token -> per-layer mean pairwise cosine, and pooled."""
    from input_pipeline import features

    mask = inputs[features.PADDING_MASK].astype(bool)
    states, pooled = layer_states(backbone, inputs)
    rows, cols = np.nonzero(mask)
    pick = rng.choice(len(rows), size=min(512, len(rows)), replace=False)
    out = {"cls": [], "mean": [], "token": []}
    for h in states:
        out["cls"].append(mean_pairwise_cosine(h[:, 0]))
        out["mean"].append(mean_pairwise_cosine((h * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)))
        # Same-review pairs are a small share (1/64) of these pairs.
        out["token"].append(mean_pairwise_cosine(h[rows[pick], cols[pick]]))
    out["pooled"] = mean_pairwise_cosine(pooled)
    return out


def heldout_inputs(tokenizer, seq, count=64):
    from input_pipeline import features
    from input_pipeline import movie_reviews

    reviews = movie_reviews.imdb_reviews("heldout")[:count]
    token_ids = np.zeros((count, seq), np.int32)
    for i, (text, _) in enumerate(reviews):
        ids = [tokenizer.cls_id] + tokenizer.encode(text)[: seq - 2] + [tokenizer.sep_id]
        token_ids[i, : len(ids)] = ids
    return {features.TOKEN_IDS: token_ids, features.SEGMENT_IDS: np.zeros_like(token_ids),
            features.PADDING_MASK: (token_ids != 0).astype(np.int32)}


def main():
    from albert_tf.apps.demo import heldout_examples
    from albert_tf.apps.demo_config import DemoConfig, demo_config

    # Flag -> (part of a DemoConfig, field); None is a field of the demo's own.
    settings = {"learning_rate": ("trainer", "learning_rate"), "warmup_fraction": ("trainer", "warmup_fraction"),
                "batch_size": ("trainer", "global_batch_size"), "max_seq_length": ("data", "max_seq_length"),
                "max_predictions_per_seq": ("data", "max_predictions_per_seq"), "vocab_size": ("model", "vocab_size"),
                "embedding_size": ("model", "embedding_size"), "hidden_size": ("model", "hidden_size"),
                "num_layers": ("model", "num_hidden_layers"), "num_heads": ("model", "num_attention_heads"),
                "intermediate_size": ("model", "intermediate_size"), "documents": (None, "documents"),
                "eval_examples": (None, "eval_examples")}
    defaults = DemoConfig()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--checkpoint-every", type=int, default=100)
    parser.add_argument("--optimizer", choices=("lamb", "adamw"), default="lamb")
    parser.add_argument("--weight-decay", type=float, default=0.01)
    for name, (part, field) in settings.items():
        value = getattr(getattr(defaults, part) if part else defaults, field)
        parser.add_argument("--" + name.replace("_", "-"), type=type(value), default=value)
    # The recorded tables (bench/results/anisotropy_*.md) used an 8,000-piece tokenizer trained on 4,000
    # reviews, batch 32 and the word table at the full rate; they stay this script's defaults.
    parser.set_defaults(batch_size=32, vocab_size=8000)
    parser.add_argument("--word-embedding-lr-scale", type=float, default=1.0,
                        help="factor on the word table's learning rate (the demo's default is 0.25)")
    parser.add_argument("--dropout", type=float, default=0.0, help="hidden and attention dropout")
    parser.add_argument("--tokenizer", help="Reuse this tokenizer directory (else train one as the demo does).")
    parser.add_argument("--write", help="Also write the table to this Markdown file.")
    args = parser.parse_args()

    import keras
    import tensorflow as tf

    from albert_tf.training import Trainer, evaluate_pretraining
    from input_pipeline.pretraining.dataset import pretraining_dataset_fn
    from input_pipeline import AlbertTokenizer, TokenizedCorpus, movie_reviews

    changes = {"model": {"hidden_dropout": args.dropout, "attention_dropout": args.dropout}, "data": {},
               "trainer": {"num_steps": args.steps, "checkpoint_every": args.checkpoint_every,
                           "word_embedding_lr_scale": args.word_embedding_lr_scale, "optimizer": args.optimizer,
                           "weight_decay": args.weight_decay, "keep_checkpoints": 10_000, "log_every": 50}}
    own = {"tokenizer_documents": 4000}
    for name, (part, field) in settings.items():
        (changes[part] if part else own)[field] = getattr(args, name)
    demo = demo_config(**changes, **own)
    model_config, trainer_config = demo.model, demo.trainer
    documents = movie_reviews.imdb_documents("pretrain", limit=demo.documents)
    tokenizer_dir = args.tokenizer or os.path.join(args.out, "tokenizer")
    if os.path.isfile(os.path.join(tokenizer_dir, "spiece.model")):
        tokenizer = AlbertTokenizer.load(tokenizer_dir)
    else:
        sentences = (s for d in documents[: demo.tokenizer_documents] for s in d)
        tokenizer = AlbertTokenizer.train(sentences, demo.model.vocab_size, seed=demo.trainer.seed)
    corpus = TokenizedCorpus.from_documents(documents, tokenizer)
    data_config = demo.data
    trainer = Trainer(model_config, trainer_config, args.out, pretraining_dataset_fn(corpus, data_config),
                      tokenizer=tokenizer, print_fn=lambda line: None)
    probe_inputs = heldout_inputs(tokenizer, demo.data.max_seq_length)
    heldout = TokenizedCorpus.from_documents(movie_reviews.imdb_documents("heldout", limit=demo.heldout_documents),
                                             tokenizer)

    def measure(step):
        aniso = anisotropy(trainer.runner.model.backbone, probe_inputs, np.random.default_rng(0))
        model = trainer.runner.model
        results = evaluate_pretraining(model, *heldout_examples(heldout, data_config, demo.eval_examples))
        return {"step": step, **aniso, "mlm": results["mlm_accuracy"], "sop": results["sop_accuracy"],
                "sop_majority": results["sop_majority_accuracy"]}

    rows = [measure(0)] if trainer.restore() == 0 else []
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    checkpoint = tf.train.Checkpoint(model=trainer.runner.model)
    for step in range(args.checkpoint_every, args.steps + 1, args.checkpoint_every):
        checkpoint.restore(os.path.join(trainer.checkpoint_dir, f"ckpt-{step}")).expect_partial()
        rows.append(measure(step))
    keras.utils.clear_session()

    layers = len(rows[0]["cls"])
    header = ("| step | held-out MLM | SOP | pooled | " + " | ".join(f"[CLS] L{i}" for i in range(layers))
              + " | " + " | ".join(f"mean L{i}" for i in range(layers)) + " | "
              + " | ".join(f"token L{i}" for i in range(layers)) + " |")
    lines = [
        f"{args.optimizer} peak lr {args.learning_rate}, warmup {trainer_config.num_warmup_steps}, "
        f"batch {args.batch_size} x seq "
        f"{args.max_seq_length}, {args.steps} steps, E {args.embedding_size} H {args.hidden_size} "
        f"L {args.num_layers} (shared), V {args.vocab_size}, dropout {args.dropout}, "
        f"word-table lr x {args.word_embedding_lr_scale:g}; training {seconds:.0f}s. "
        f"Anisotropy = mean pairwise cosine over 64 held-out reviews (L0 = projected embeddings). "
        f"SOP majority baseline {rows[-1]['sop_majority']:.3f}.",
        "",
        header,
        "|" + "---:|" * (4 + 3 * layers),
    ]
    for r in rows:
        lines.append(
            f"| {r['step']} | {r['mlm']:.4f} | {r['sop']:.3f} | {r['pooled']:.3f} | "
            + " | ".join(f"{v:.3f}" for v in r["cls"]) + " | " + " | ".join(f"{v:.3f}" for v in r["mean"]) + " | "
            + " | ".join(f"{v:.3f}" for v in r["token"]) + " |"
        )
    emit_table("\n".join(lines), args.write)


if __name__ == "__main__":
    main()
