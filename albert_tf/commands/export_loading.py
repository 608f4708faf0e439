"""What `export` and `serve` load: a model directory's model as exports hold it, and its run's settings."""

import os

from albert_tf.model_dirs import MODEL_FILE
from input_pipeline.finetuning.examples import check_label_name


def load_model_to_export(model_dir):
    """(model, the fine-tuning run's settings) of a resolved model directory, as every export writes it.

    A LoRA model has its factors merged into its kernels: the same outputs, and an exported graph without
    LoRA matmuls. `albert-tf serve --model DIR` exports through here too.
    """
    # Deferred for start-up: these import TensorFlow, and the flags are read (their errors reported) before.
    from albert_tf.loading import load_pretrained
    from albert_tf.recipes.finetune import run_settings

    model = load_pretrained(model_dir)
    # A model directory edited by hand may hold labels `finetune` refuses: they would shift labels.txt.
    for name in getattr(model, "label_names", None) or ():
        check_label_name(name, os.path.join(model_dir.path, MODEL_FILE))
    backbone = getattr(model, "backbone", model)
    if backbone.lora_rank is not None:
        print(f"Merging the LoRA factors (rank {backbone.lora_rank}) into the attention kernels"
              + (f" and the word-embedding table's (rank {backbone.lora_embedding_rank}) into it"
                 if backbone.lora_embedding_rank else "") + ".")
        backbone.merge_lora()
    return model, run_settings(model_dir.path)
