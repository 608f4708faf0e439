"""Pretraining at any scale: the strategy.run training loop, its config and evaluation.

The names load on first use (PEP 562), so that `training.config` loads
without TensorFlow: `albert-tf pretrain` and `demo` build their flags from it
and report a bad value before TensorFlow loads.
"""

import importlib

# Public name -> module that defines it.
_EXPORTS = {
    "TrainerConfig": "albert_tf.training.config",
    "initial_word_embeddings": "albert_tf.training.embedding_init",
    "ppmi_svd_init": "albert_tf.training.embedding_init",
    "ppmi_svd_vectors": "albert_tf.training.embedding_init",
    "evaluate_pretraining": "albert_tf.training.evaluation",
    "most_frequent_masked_id": "albert_tf.training.evaluation",
    "read_log": "albert_tf.training.progress",
    "Trainer": "albert_tf.training.trainer",
    "TrainingDiverged": "albert_tf.training.trainer",
    "build_pretrainer": "albert_tf.training.trainer",
    "trainer_optimizer": "albert_tf.training.trainer",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
