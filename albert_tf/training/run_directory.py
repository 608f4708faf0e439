"""`RunDirectory`: a pretraining run's files, the checks that let a rerun resume it, and its `final/`.

A rerun must train the same model on the same data with the same
optimization; only the fields in `RESUMABLE_CHANGES` may differ, and
anything else is refused before a file is written. `final/` survives a kill
at any moment (see `checkpoints`): a rerun rebuilds a missing or stale one.
The directory's layout is drawn, and its names defined, in `albert_tf.utils.layout`.
"""

import dataclasses
import json
import os

from albert_tf.config import AlbertConfig
from albert_tf.model_dirs import CONFIG_FILE, ENTRY_FILES, TOKENIZER_DIR, WEIGHTS_FILE
from albert_tf.models.pretrained import save_pretrained
from albert_tf.training import checkpoints
from albert_tf.utils import files
from albert_tf.utils.errors import UserError
from albert_tf.utils.layout import CHECKPOINT_DIR, FINAL_DIR, FINAL_STEP_FILE, TRAINING_CONFIG_FILE

# TrainerConfig fields a resumed run may change: the schedule (extend a run,
# or lower the learning rate after a divergence) and bookkeeping. Anything
# else would continue the checkpoint under a different recipe. "jit_compile"
# is compile_step's name in the training_config.json of older run directories.
# mixed_precision may change too: the weights and optimizer slots are float32
# under every policy, so a checkpoint restores under any of them (older runs
# saved "float32" where the default is now "auto").
RESUMABLE_CHANGES = ("num_steps", "learning_rate", "warmup_steps", "compile_step", "jit_compile", "steps_per_loop",
                     "remat", "mixed_precision", "checkpoint_every", "keep_checkpoints", "log_every", "eval_every",
                     "eval_steps")


class RunDirectory:
    """The files of one pretraining run at `path` (see the module docstring).

    Args:
        path: the run directory (local, gs:// or ram://).
        is_chief: whether this worker writes; other workers only check.
        print_fn: where messages go.
    """

    def __init__(self, path, is_chief=True, print_fn=print):
        self.path = path
        self.is_chief = is_chief
        self._print = print_fn
        self.checkpoint_dir = os.path.join(path, CHECKPOINT_DIR)
        self.final_dir = os.path.join(path, FINAL_DIR)

    def write_run_files(self, model_config, config, tokenizer, run_info):
        """Writes (or checks, on resume) the run directory's configs and tokenizer.

        Args:
            model_config: the `AlbertConfig` trained.
            config: the `TrainerConfig`.
            tokenizer: an `AlbertTokenizer`, or None.
            run_info: JSON-serializable dict written next to the trainer
                config (data, strategy, the resolved precision).

        Raises:
            ValueError: the directory holds a run of another model, trainer
                config (outside `RESUMABLE_CHANGES`) or data source, listing
                every differing field with its saved and its new value.
        """
        # JSON round trip: tuples and lists, ints and floats compare as they will be read back.
        training = json.loads(json.dumps({"trainer": config.to_dict(), **run_info}))
        self._check_resume(model_config, training)
        if not self.is_chief:
            return
        checkpoints.remove_debris(self.path)
        checkpoints.remove_debris(self.checkpoint_dir)
        files.makedirs(self.checkpoint_dir)
        # Whole files (`files.write_text`): other workers read them while the chief writes them.
        files.write_text(os.path.join(self.path, CONFIG_FILE), model_config.to_json())
        # Next to the checkpoints too, so the checkpoint directory alone rebuilds the model.
        files.write_text(os.path.join(self.checkpoint_dir, CONFIG_FILE), model_config.to_json())
        files.write_text(
            os.path.join(self.path, TRAINING_CONFIG_FILE), json.dumps(training, indent=2, sort_keys=True) + "\n"
        )
        if tokenizer is not None:
            tokenizer.save(os.path.join(self.path, TOKENIZER_DIR))

    def final_holds(self, step):
        """Whether `final/` is a complete `save_pretrained` directory of the weights at `step`."""
        try:
            saved_step = json.loads(files.read_text(os.path.join(self.final_dir, FINAL_STEP_FILE)))["step"]
        except (OSError, ValueError, KeyError, TypeError):
            return False
        return saved_step == step and files.isfile(os.path.join(self.final_dir, WEIGHTS_FILE))

    def save_final(self, model, tokenizer, step):
        """`save_pretrained(model)` into a staging directory renamed to `final/`: never a partial final/."""
        with files.publish(self.final_dir, ENTRY_FILES + (FINAL_STEP_FILE,)) as staging:
            save_pretrained(model, staging)
            # The model directory carries its tokenizer, so finetune, export
            # and convert need only RUN_DIR/final.
            if tokenizer is not None:
                tokenizer.save(os.path.join(staging, TOKENIZER_DIR))
            files.write_text(os.path.join(staging, FINAL_STEP_FILE), json.dumps({"step": step}))

    def _check_resume(self, model_config, training):
        """Compares this run with the one saved in the directory; see `write_run_files`."""
        config_path = os.path.join(self.path, CONFIG_FILE)
        differences = {}
        if files.isfile(config_path):
            saved = dataclasses.asdict(AlbertConfig.load(config_path))
            differences["model"] = _differences(saved, dataclasses.asdict(model_config), "model.")
        training_path = os.path.join(self.path, TRAINING_CONFIG_FILE)
        if files.isfile(training_path):
            try:
                saved = json.loads(files.read_text(training_path))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
                raise UserError(f"{training_path} is unreadable ({e}); restore it or use a new run directory.") from e
            _check_loss_scaling_kept(saved, training, self.path)
            trainer = _differences(saved.get("trainer", training["trainer"]), training["trainer"], "trainer.")
            changed = [d for d in trainer if d.split(":")[0].removeprefix("trainer.") in RESUMABLE_CHANGES]
            differences["trainer config"] = [d for d in trainer if d not in changed]
            if "data" in saved and "data" in training:
                differences["data source"] = _differences(saved["data"], training["data"], "data.")
            if changed and self.is_chief and not any(differences.values()):
                self._print("Resuming with changed settings: " + "; ".join(changed))
        kinds = [kind for kind, found in differences.items() if found]
        if kinds:
            lines = [line for kind in kinds for line in differences[kind]]
            raise UserError(
                f"{self.path} holds a run of a different {' and '.join(kinds)}; resuming would continue "
                "its checkpoints under another setup. Differences (saved -> this run):\n  "
                + "\n  ".join(lines)
                + f"\nUse a new run directory, or the saved values (only {', '.join(RESUMABLE_CHANGES)} "
                "may change on resume)."
            )


def _check_loss_scaling_kept(saved, training, run_dir):
    """Refuses a resume into or out of mixed_float16, whose optimizer state is checkpointed differently.

    Under mixed_float16 the optimizer is wrapped in Keras' LossScaleOptimizer,
    which checkpoints the inner optimizer's slots under its own names: the
    checkpoint would restore the weights and silently start the slots (LAMB's
    moments) from zero. Between float32 and mixed_bfloat16 nothing differs.
    """
    # Runs written before the resolved precision was recorded named it in the trainer config.
    before = saved.get("resolved", {}).get("mixed_precision", saved.get("trainer", {}).get("mixed_precision"))
    after = training["resolved"]["mixed_precision"]
    if before != after and "mixed_float16" in (before, after):
        raise UserError(
            f"{run_dir} was trained in {before} and this run would resume it in {after}. mixed_float16 keeps "
            "its optimizer state inside a loss-scale wrapper, so the optimizer's moments would restart from "
            f"zero. Resume with --mixed-precision {before}, or start a new run directory."
        )


_ABSENT = "(absent)"


def _differences(saved, new, prefix=""):
    """["name: saved -> new", ...] for every differing leaf of two JSON-like dicts (nested names dotted)."""
    lines = []
    for key in sorted(set(saved) | set(new), key=str):
        old_value, new_value = saved.get(key, _ABSENT), new.get(key, _ABSENT)
        if isinstance(old_value, dict) and isinstance(new_value, dict):
            lines += _differences(old_value, new_value, f"{prefix}{key}.")
        elif old_value != new_value:
            lines.append(f"{prefix}{key}: {old_value!r} -> {new_value!r}")
    return lines
