"""Pretrained models as the benchmarks name them: a model directory, or RUN_DIR/checkpoints/ckpt-STEP."""

import json
import os
import re

_CHECKPOINT = re.compile(r"^(?P<run>.*)/checkpoints/ckpt-(?P<step>\d+)$")


def run_dir(spec):
    """(run directory, checkpoint match or None) of a model given as a directory or RUN_DIR/checkpoints/ckpt-STEP."""
    match = _CHECKPOINT.match(spec.rstrip("/"))
    return (match["run"] if match else os.path.dirname(os.path.abspath(spec.rstrip("/")))), match


def load_model(spec):
    """(backbone, tokenizer, pretraining step or None) for a model directory or a run's checkpoint."""
    from albert_tf import AlbertConfig
    from albert_tf.model_dirs import find_tokenizer
    from albert_tf.models import AlbertBackbone, AlbertPretrainer

    directory, match = run_dir(spec)
    if match is None:
        step = None
        if os.path.basename(spec.rstrip("/")) == "final" and os.path.isfile(os.path.join(directory, "train_log.jsonl")):
            with open(os.path.join(directory, "train_log.jsonl")) as f:
                step = max(json.loads(line)["step"] for line in f if line.strip())
        return AlbertBackbone.from_pretrained(spec), find_tokenizer(spec), step
    import tensorflow as tf

    with open(os.path.join(directory, "config.json")) as f:
        model_config = AlbertConfig.from_dict(json.load(f))
    pretrainer = AlbertPretrainer(AlbertBackbone(model_config))
    tf.train.Checkpoint(model=pretrainer).read(spec).expect_partial().assert_existing_objects_matched()
    return pretrainer.backbone, find_tokenizer(directory), int(match["step"])


def pretraining_run(spec):
    """(run directory, examples per step or None) of a model given as `final/` or a checkpoint."""
    directory, _ = run_dir(spec)
    try:
        with open(os.path.join(directory, "training_config.json")) as f:
            batch = json.load(f)["trainer"]["global_batch_size"]
    except (OSError, KeyError, ValueError):
        batch = None
    return os.path.normpath(os.path.abspath(directory)), batch
