"""What the outputs of albert-tf hold: the names of their files and directories, and the paths built from them.

The one home of every name that more than one module reads or writes, and of
the layout of the run directories. Names only (and `files`): every floor
imports it, the data code included, and it loads no TensorFlow. A model
directory's own files (config.json, albert_tf.json, model.weights.h5,
tokenizer/) are `albert_tf.model_dirs`'.

create-data output (`input_pipeline.pretraining.tfrecord_shards`):
    metadata.json          the data config, vocabulary size, shards and their sizes
    pretraining-NNNNN.tfrecord  the examples
    tokenizer/             the tokenizer the ids come from

Pretraining run directory (`albert_tf.training.run_directory.RunDirectory`):
    config.json            the `AlbertConfig` (a model directory's config.json)
    training_config.json   the `TrainerConfig` and the caller's run info (data, strategy)
    tokenizer/             the tokenizer, when one is given
    checkpoints/           ckpt-STEP.* (model, optimizer, step) and a copy of config.json
    tensorboard/           summaries of the progress metrics
    train_log.jsonl        the progress records
    final/                 the trained `AlbertPretrainer`'s model directory with its tokenizer,
                           and trainer_step.json, the step it holds

Fine-tuning run directory (`albert_tf.recipes.finetune`):
    best/                  the best epoch's task model directory, with its tokenizer
    tokenizer/             the tokenizer it was trained with
    finetune.json          the resolved `FinetuneConfig`, label names, per-epoch metrics, the best epoch
    resume/                while the run is unfinished: its checkpoints
    distill.json           a distilled student's run (`albert_tf.recipes.distill`): the resolved distillation
                           settings, the student's and teacher's configs, per-epoch metrics
    distill_report.md      the teacher and the student compared (`albert-tf distill`'s report)

`albert-tf finetune --out OUT` (and `distill`) writes its run beside OUT, in
`.unfinished-NAME/` (`unfinished_dir`), which becomes OUT when the run ends.

TF-Serving export (`albert_tf.export.saved_model`), a base path of versions:
    batching_parameters.txt   TF-Serving's batching parameters `export` suggests (kept once there)
    N/saved_model.pb          version N's SavedModel, which a loader reads first
    N/assets.extra/tf_serving_warmup_requests  the requests TF-Serving replays at load
    N/assets.extra/albert_tf_export.json       what the export holds (TF-Serving ignores it)

TFLite export (`albert_tf.export.tflite`): model.tflite, export.json; labels.txt
is zipped into a classifier's model.tflite with its metadata. Web site
(`albert_tf.export.web`): index.html, classify.js, model/, mediapipe/.
"""

import os

from albert_tf.utils import files

# create-data's output.
DATA_METADATA_FILE = "metadata.json"

# A pretraining run directory.
TRAINING_CONFIG_FILE = "training_config.json"
CHECKPOINT_DIR = "checkpoints"
TENSORBOARD_DIR = "tensorboard"
TRAIN_LOG_FILE = "train_log.jsonl"
FINAL_DIR = "final"
# In final/: the step its weights were saved at, so a rerun can tell a current final/ from a stale one.
FINAL_STEP_FILE = "trainer_step.json"

# A fine-tuning run directory.
BEST_DIR = "best"
FINETUNE_RUN_FILE = "finetune.json"
RESUME_DIR = "resume"
DISTILL_RUN_FILE = "distill.json"
DISTILL_REPORT_FILE = "distill_report.md"
# The unfinished fine-tuning run beside --out, which a rerun of the same command resumes.
UNFINISHED_PREFIX = ".unfinished-"

# Exports.
SAVED_MODEL_FILE = "saved_model.pb"  # what a SavedModel loader reads first
# TF-Serving reads assets.extra/ of a version for its warmup records only
# (tensorflow_serving/servables/tensorflow/saved_model_warmup_util.cc), so other files can live there too.
ASSETS_EXTRA_DIR = "assets.extra"
WARMUP_FILE = os.path.join(ASSETS_EXTRA_DIR, "tf_serving_warmup_requests")
EXPORT_METADATA_FILE = os.path.join(ASSETS_EXTRA_DIR, "albert_tf_export.json")
# Beside the versions, where TF-Serving's version polling ignores it (not a number).
BATCHING_PARAMETERS_FILE = "batching_parameters.txt"
TFLITE_MODEL_FILE = "model.tflite"
TFLITE_METADATA_FILE = "export.json"
LABELS_FILE = "labels.txt"
WEB_PAGE_FILE = "index.html"
WEB_SCRIPT_FILE = "classify.js"
WEB_MODEL_DIR = "model"
WEB_MEDIAPIPE_DIR = "mediapipe"

# The model directory a run holds, as a reader of a run looks for it: a fine-tuned model before a pretrained one.
RUN_MODEL_DIRS = (BEST_DIR, FINAL_DIR)


def is_create_data_dir(path):
    """Whether `path` is a create-data output directory (it holds `DATA_METADATA_FILE`), not raw text."""
    return files.isfile(os.path.join(path, DATA_METADATA_FILE))


def run_dir_of(model_dir):
    """The run directory whose `final/` or `best/` is `model_dir`, or None when it is neither."""
    path = files.normpath(model_dir)
    return os.path.dirname(path) if os.path.basename(path) in RUN_MODEL_DIRS else None


def finetune_run_dir(directory):
    """The `finetune --out` directory of `directory`: the run above it where it is a run's `best/`, else itself."""
    path = files.normpath(directory)
    return os.path.dirname(path) if os.path.basename(path) == BEST_DIR else path


def unfinished_dir(out):
    """Where the fine-tuning run of `--out OUT` is written until it ends: OUT's parent's .unfinished-NAME."""
    parent, name = os.path.split(files.normpath(out))
    return os.path.join(parent, UNFINISHED_PREFIX + name)
