"""Which vector a sentence-level head reads ("auto", "cls", "mean"), without Keras.

`FinetuneConfig`'s --pooling flag reads these before TensorFlow loads;
`albert_tf.models.classifier` pools.
"""

POOLINGS = ("auto", "cls", "mean")

# "auto" reads [CLS] from this width up: the released checkpoints (base to
# xxlarge), whose pooler SOP trained for a million steps. Narrower models are
# the ones a short run pretrains, and their pooled [CLS] is nearly the same
# vector for every input (docs/pretraining.md#where-representations-collapse).
AUTO_CLS_MIN_HIDDEN_SIZE = 768


def check_pooling(pooling):
    if pooling not in POOLINGS:
        raise ValueError(f"`pooling` must be one of {POOLINGS}. Received: pooling={pooling!r}")
    return pooling


def resolve_pooling(pooling, hidden_size):
    """`pooling` with "auto" replaced: "cls" for H >= 768, "mean" below."""
    if check_pooling(pooling) != "auto":
        return pooling
    return "cls" if hidden_size >= AUTO_CLS_MIN_HIDDEN_SIZE else "mean"
