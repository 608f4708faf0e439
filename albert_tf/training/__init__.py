"""Pretraining at any scale: the strategy.run training loop, its config and evaluation."""

from albert_tf.training.config import TrainerConfig
from albert_tf.training.embedding_init import initial_word_embeddings, ppmi_svd_init, ppmi_svd_vectors
from albert_tf.training.evaluation import evaluate_pretraining, most_frequent_masked_id
from albert_tf.training.progress import read_log
from albert_tf.training.trainer import (
    Trainer,
    TrainingDiverged,
    build_pretrainer,
    trainer_optimizer,
)
