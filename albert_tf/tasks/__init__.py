"""Fine-tuning: task registry, metrics, SQuAD post-processing and the training loop."""

from albert_tf.tasks.config import FinetuneConfig
from albert_tf.tasks.finetune import (
    FinetuneInterrupted, finetune, load_run, run_max_seq_length, run_max_windows, run_truncate_from,
)
from albert_tf.tasks.prediction import predict_examples
from albert_tf.tasks.registry import TASKS, get_task
