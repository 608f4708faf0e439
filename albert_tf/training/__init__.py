"""Pretraining at any scale: the strategy.run training loop, its config and evaluation.

The names load on first use (PEP 562), so that `training.config` loads
without TensorFlow: `albert-tf pretrain` and `demo` build their flags from it
and report a bad value before TensorFlow loads.
"""

from albert_tf.utils.lazy import lazy_names

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
    "DamagedData": "albert_tf.training.trainer",
    "build_pretrainer": "albert_tf.training.step_runner",
    "trainer_optimizer": "albert_tf.training.step_runner",
}

__all__, __getattr__, __dir__ = lazy_names(__name__, _EXPORTS)
