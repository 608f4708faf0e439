"""Fine-tuning: task registry, metrics, SQuAD post-processing and the training loop.

The names load on first use (PEP 562), so that `tasks.config` and
`tasks.names` load without TensorFlow: `albert-tf finetune` builds its flags
from them and reports a bad one before TensorFlow loads.
"""

from input_pipeline.lazy import lazy_names

# Public name -> module that defines it.
_EXPORTS = {
    "FinetuneConfig": "albert_tf.tasks.config",
    "FinetuneInterrupted": "albert_tf.tasks.finetune",
    "finetune": "albert_tf.tasks.finetune",
    "load_run": "albert_tf.tasks.finetune",
    "run_max_seq_length": "albert_tf.tasks.finetune",
    "run_max_windows": "albert_tf.tasks.finetune",
    "run_truncate_from": "albert_tf.tasks.finetune",
    "predict_examples": "albert_tf.tasks.prediction",
    "TASKS": "albert_tf.tasks.registry",
    "get_task": "albert_tf.tasks.registry",
}

__all__, __getattr__, __dir__ = lazy_names(__name__, _EXPORTS)
