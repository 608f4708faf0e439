"""Where models and their tokenizers live on disk, for every command and script.

A model directory is a `save_pretrained` directory (config.json,
albert_tf.json, model.weights.h5). Runs hold one: `pretrain` writes
`RUN/final/`, `finetune` writes `RUN/best/`. The tokenizer travels with the
data and the models, always under the one name `TOKENIZER_DIR`:

    data/tokenizer/           create-data: the tokenizer the ids come from
    runs/base/tokenizer/      pretrain: the run's
    runs/base/final/tokenizer/
    runs/sst2/tokenizer/      finetune
    runs/sst2/best/tokenizer/

so a model directory copied on its own still tokenizes, and any of the run
directory, `final/` or `best/` names the same model.
"""

import os

from albert_tf.saving import CONFIG_FILE, MODEL_FILE
from input_pipeline.tokenizer import MODEL_FILE as SPIECE_FILE
from input_pipeline.tokenizer import AlbertTokenizer

TOKENIZER_DIR = "tokenizer"
FINAL_DIR = "final"
BEST_DIR = "best"


def is_model_dir(path):
    return os.path.isfile(os.path.join(path, CONFIG_FILE)) and os.path.isfile(os.path.join(path, MODEL_FILE))


def resolve_model_dir(path):
    """The model directory `path` names: itself, or a run's `best/` or `final/`.

    Raises:
        ValueError: naming `path` when it is missing or holds no model.
    """
    if not os.path.isdir(path):
        raise ValueError(f"{path}: no such directory.")
    if is_model_dir(path):
        return path
    for sub in (BEST_DIR, FINAL_DIR):
        if is_model_dir(os.path.join(path, sub)):
            return os.path.join(path, sub)
    raise ValueError(
        f"{path} holds no model: expected {CONFIG_FILE} and {MODEL_FILE} there or in its "
        f"{BEST_DIR}/ (finetune) or {FINAL_DIR}/ (pretrain) subdirectory."
    )


def tokenizer_candidates(path):
    """Where a tokenizer for the model or run directory `path` may be, in order.

    The directory itself (a tokenizer or HF directory), its `tokenizer/`, and
    the run's `tokenizer/` when `path` is a run's `final/` or `best/`.
    """
    candidates = [path, os.path.join(path, TOKENIZER_DIR)]
    parent = os.path.dirname(os.path.normpath(path))
    if os.path.basename(os.path.normpath(path)) in (FINAL_DIR, BEST_DIR):
        candidates.append(os.path.join(parent, TOKENIZER_DIR))
    return candidates


def find_tokenizer(path, tokenizer_dir=None, required=True):
    """The tokenizer that goes with the model, run or data directory `path`.

    Args:
        path: a model directory, a run directory, or a create-data directory.
        tokenizer_dir: an explicit tokenizer directory; wins when given.
        required: raise when none is found (else return None).

    Returns:
        An `AlbertTokenizer`, or None when not `required` and none is found.
    """
    if tokenizer_dir is not None:
        return AlbertTokenizer.load(tokenizer_dir)
    candidates = tokenizer_candidates(path)
    for candidate in candidates:
        if os.path.isfile(os.path.join(candidate, SPIECE_FILE)):
            return AlbertTokenizer.load(candidate)
    if required:
        raise ValueError(
            f"No tokenizer for {path}: no {SPIECE_FILE} in {', '.join(candidates)}. Pass --tokenizer DIR "
            "(a train-tokenizer output)."
        )
    return None
