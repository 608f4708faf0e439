"""What the commands write honours the user's umask, as any file they write does.

Every output is staged beside its place and published whole
(`albert_tf.utils.files.publish`); staging must not make it private (tempfile's
0700 / 0600), or a TF-Serving process running as another user cannot read the
export. Each command runs under the umask, as a shell's `umask` sets it
(tests/cli_helpers.run_cli).
"""

import os
import stat

import pytest

from cli_helpers import run_cli
from journey_fixtures import TINY_MODEL

pytestmark = pytest.mark.slow


def _commands(tag):
    """Each command that writes an output, its outputs named with `tag`."""
    return [
        ["create-data", "--input", "corpus/", "--tokenizer", "tok/", "--out", f"data_{tag}/",
         "--max-seq-length", "32", "--dupe-factor", "1"],
        ["pretrain", *TINY_MODEL, "--data", f"data_{tag}/", "--out", f"runs/base_{tag}", "--batch-size", "4",
         "--steps", "1", "--compile-step", "none"],
        ["finetune", "--task", "sst2", "--model", "runs/base/final", "--train", "SST-2/train.tsv",
         "--eval", "SST-2/dev.tsv", "--out", f"runs/sst2_{tag}", "--batch-size", "16", "--epochs", "1"],
        ["export", "--model", f"runs/sst2_{tag}", "--format", "saved_model", "--out", f"saved_models/sst2_{tag}"],
        ["export", "--model", f"runs/sst2_{tag}", "--format", "tflite", "--out", f"tflite_{tag}"],
        ["convert", "--to", "hf", "--model", "runs/base", "--out", f"hf_{tag}"],
        ["predict", "--model", f"runs/sst2_{tag}", "--input", "SST-2/dev.tsv", "--output", f"predictions_{tag}.jsonl"],
    ]


def _modes(path):
    """{path: permission bits} of `path` and everything under it."""
    found = {path: stat.S_IMODE(os.stat(path).st_mode)}
    for root, dirs, names in os.walk(path):
        for name in dirs + names:
            found[os.path.join(root, name)] = stat.S_IMODE(os.stat(os.path.join(root, name)).st_mode)
    return found


@pytest.mark.parametrize("umask, dir_mode, file_mode", [(0o022, 0o755, 0o644), (0o077, 0o700, 0o600)])
def test_every_output_has_the_modes_the_umask_gives(tour, pretrained, umask, dir_mode, file_mode):
    tag = f"{umask:03o}"
    for args in _commands(tag):
        run_cli(*args, cwd=tour, umask=umask, timeout=1800)
    outputs = [f"data_{tag}", f"runs/base_{tag}", f"runs/sst2_{tag}", f"saved_models/sst2_{tag}", f"tflite_{tag}",
               f"hf_{tag}", f"predictions_{tag}.jsonl"]
    wrong = {}
    for output in outputs:
        for path, mode in _modes(str(tour / output)).items():
            expected = dir_mode if os.path.isdir(path) else file_mode
            if mode != expected:
                wrong[os.path.relpath(path, tour)] = f"{mode:04o}, expected {expected:04o}"
    assert not wrong, wrong
    # Outputs that are directories, and what the mode check above walked.
    assert (tour / f"saved_models/sst2_{tag}/1/saved_model.pb").is_file()
    assert (tour / f"runs/sst2_{tag}/best/model.weights.h5").is_file()
    assert (tour / f"runs/base_{tag}/final/model.weights.h5").is_file()
    assert (tour / f"tflite_{tag}/model.tflite").is_file() and (tour / f"hf_{tag}/config.json").is_file()
    # Nothing staged is left beside the outputs.
    for parent in (tour, tour / "runs", tour / "saved_models", tour / f"saved_models/sst2_{tag}"):
        assert not [n for n in os.listdir(parent) if n.startswith(".")], os.listdir(parent)
