"""Built-once fixtures of the multi-label tests: texts with several labels, a tiny model fine-tuned on them."""

import functools
import json
import os
import tempfile

import numpy as np

import export_fixtures
from cli_helpers import run_cli

LABELS = ["food", "music", "sports"]
_WORDS = {"food": ["pizza", "bread", "cheese", "soup"], "music": ["guitar", "song", "piano", "drums"],
          "sports": ["football", "tennis", "goal", "match"]}
_FILLER = ["the", "a", "and", "today", "we", "liked", "saw", "with"]


def rows(n, seed):
    """`n` (text, labels) rows: each label's words appear in its texts; one or two labels a row."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        labels = sorted(rng.choice(LABELS, size=int(rng.integers(1, 3)), replace=False))
        words = [str(w) for label in labels for w in rng.choice(_WORDS[label], 2)] + list(rng.choice(_FILLER, 3))
        rng.shuffle(words)
        out.append((" ".join(words), labels))
    return out


def write_jsonl(path, data):
    with open(path, "w", encoding="utf-8") as f:
        for text, labels in data:
            f.write(json.dumps({"text": text, "labels": list(labels)}) + "\n")
    return path


@functools.lru_cache(maxsize=None)
def model_dir():
    """A random-init tiny backbone with the export tests' tokenizer, saved as a pretrained directory."""
    from albert_tf import AlbertBackbone

    directory = os.path.join(export_fixtures.scratch_dir(), "multilabel-pretrained")
    AlbertBackbone(export_fixtures.config()).save_pretrained(directory)
    export_fixtures.tokenizer().save(os.path.join(directory, "tokenizer"))
    return directory


@functools.lru_cache(maxsize=None)
def finetuned():
    """(run directory, data directory) of `finetune --task multilabel` on JSON Lines (3 epochs, seconds)."""
    data = tempfile.mkdtemp(prefix="multilabel-data-", dir=export_fixtures.scratch_dir())
    train = write_jsonl(os.path.join(data, "train.jsonl"), rows(96, 0))
    dev = write_jsonl(os.path.join(data, "dev.jsonl"), rows(32, 1))
    out = os.path.join(data, "run")
    run_cli("finetune", "--task", "multilabel", "--model", model_dir(), "--train", train, "--eval", dev,
            "--out", out, "--label-column", "labels", "--pooling", "cls", "--epochs", "3", "--batch-size", "16",
            "--max-seq-length", "48", "--learning-rate", "3e-3", "--seed", "0")
    return out, data
