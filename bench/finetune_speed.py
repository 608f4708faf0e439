"""One fine-tuning epoch on Rotten Tomatoes sentences: per-batch padding vs padding to 512.

Three pipelines train the same small ALBERT (the demo's shape with 512
positions, random weights: only the time matters) for one epoch on the same
subset of sentences, with the same AdamW optimizer and batch size:

  * albert-tf, each batch padded to its own longest sentence (bucketed by length);
  * albert-tf, every batch padded to 512 (what fixed-length pipelines do);
  * keras-hub's AlbertTextClassifier with its default preprocessor
    (sequence_length=512), fed raw strings, its AlbertTokenizer built from
    our tokenizer's spiece.model.

Each is timed on its second epoch, so tracing and compilation are left out.

    python bench/finetune_speed.py --tokenizer runs/demo/tokenizer [--sentences 512]
"""

import argparse
import os
import time

import numpy as np

from benchlib.machine import cpu_flags, cpu_name
from benchlib.output import emit_table


def timed_epochs(fit_epoch, epochs=2):
    times = []
    for epoch in range(epochs):
        start = time.perf_counter()
        fit_epoch(epoch)
        times.append(time.perf_counter() - start)
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", required=True, help="An albert-tf tokenizer directory.")
    parser.add_argument("--sentences", type=int, default=512, help="Subset size (default 512).")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--hidden-size", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--write", help="Also write the table to this Markdown file.")
    args = parser.parse_args()

    import keras
    import keras_hub
    import tensorflow as tf

    from albert_tf import AlbertBackbone, AlbertConfig
    from albert_tf.models import AlbertClassifier
    from albert_tf.optimizers import AdamW
    from input_pipeline import movie_reviews
    from input_pipeline.finetuning import TextEncoder, TextExample, make_dataset
    from input_pipeline.tokenizer import AlbertTokenizer

    rows = movie_reviews.rotten_tomatoes_sentences()
    rows = [rows[i] for i in np.random.default_rng(0).permutation(len(rows))[: args.sentences]]
    texts, labels = [t for t, _ in rows], [y for _, y in rows]
    tokenizer = AlbertTokenizer.load(args.tokenizer)
    heads = max(1, args.hidden_size // 64)
    config = AlbertConfig(
        vocab_size=tokenizer.vocab_size, embedding_size=128, hidden_size=args.hidden_size,
        num_hidden_layers=args.layers, num_attention_heads=heads, intermediate_size=4 * args.hidden_size,
        max_position_embeddings=512,
    )
    encoder = TextEncoder(tokenizer, 512, truncate=True)
    inputs = encoder.encode_all([TextExample(t, None, y, "rt") for t, y in rows])
    lengths = [len(x["token_ids"]) for x in inputs]
    steps = -(-len(rows) // args.batch_size)

    def optimizer():
        return AdamW(learning_rate=2e-5, weight_decay=0.01, global_clipnorm=1.0)

    results = []

    def albert_tf_epoch(**dataset_kwargs):
        keras.utils.set_random_seed(0)
        model = AlbertClassifier(AlbertBackbone(config), 2)
        model.compile(optimizer=optimizer(), jit_compile=False)
        dataset = make_dataset(inputs, labels, args.batch_size, shuffle=True, **dataset_kwargs)
        tokens = sum(int(np.prod(b[0]["token_ids"].shape)) for b in dataset)
        times = timed_epochs(lambda e: model.fit(dataset, epochs=1, verbose=0))
        return times, tokens

    for name, kwargs in (("albert-tf, per-batch padding (bucketed)", dict(bucket=True)),
                         ("albert-tf, per-batch padding", dict(bucket=False)),
                         ("albert-tf, padded to 512", dict(pad_to=512))):
        times, tokens = albert_tf_epoch(**kwargs)
        results.append((name, times[1], tokens))
        print(f"{name}: {times[1]:.1f}s (first epoch {times[0]:.1f}s)")

    keras.utils.set_random_seed(0)
    hub_backbone = keras_hub.models.AlbertBackbone(
        vocabulary_size=config.vocab_size, num_layers=config.num_hidden_layers, num_heads=heads,
        embedding_dim=config.embedding_size, hidden_dim=config.hidden_size,
        intermediate_dim=config.intermediate_size, max_sequence_length=512,
    )
    with open(os.path.join(args.tokenizer, "spiece.model"), "rb") as f:
        hub_tokenizer = keras_hub.models.AlbertTokenizer(proto=f.read())
    preprocessor = keras_hub.models.AlbertTextClassifierPreprocessor(hub_tokenizer)  # sequence_length=512
    classifier = keras_hub.models.AlbertTextClassifier(hub_backbone, 2, preprocessor=preprocessor)
    classifier.compile(optimizer=optimizer(), jit_compile=False,
                       loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    strings = tf.data.Dataset.from_tensor_slices((texts, labels)).shuffle(len(texts), seed=0)
    times = timed_epochs(lambda e: classifier.fit(strings.batch(args.batch_size), epochs=1, verbose=0))
    results.append(("keras-hub AlbertTextClassifier, default preprocessing (512)", times[1], steps * args.batch_size * 512))
    print(f"keras-hub: {times[1]:.1f}s (first epoch {times[0]:.1f}s)")

    base = results[0][1]
    lines = [
        f"One epoch, {len(rows)} Rotten Tomatoes sentences (a seeded subset of 8,530; mean "
        f"{np.mean(lengths):.1f} / max {max(lengths)} pieces), batch {args.batch_size}, {steps} steps; "
        f"ALBERT E=128 H={config.hidden_size} L={config.num_hidden_layers}; {cpu_name()}, {os.cpu_count()} cores, "
        f"flags: {' '.join(cpu_flags()) or 'none'}; second epoch timed.",
        "",
        "| pipeline | epoch time (s) | padded tokens | vs per-batch bucketed |",
        "|---|---|---|---|",
    ] + [f"| {n} | {t:.1f} | {tok:,} | {t / base:.1f}x |" for n, t, tok in results]
    emit_table("\n".join(lines), args.write)


if __name__ == "__main__":
    main()
