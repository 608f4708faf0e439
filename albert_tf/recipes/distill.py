"""Distillation: a smaller ALBERT student trained on a fine-tuned teacher's outputs.

The student learns from a mix of two losses (Hinton et al. 2015):

    loss = label_weight * label_loss + (1 - label_weight) * soft_loss
    soft_loss = T^2 * KL(softmax(teacher_logits / T) || softmax(student_logits / T))

`label_loss` is the task's own (cross-entropy, or squared error for
regression), averaged over the rows of a batch that have a label; rows of
unlabelled text (`unlabeled`) learn from the teacher alone. The T^2 keeps the
soft loss's gradients on the scale of the label loss's whatever T is. A
regression teacher's output is a score, not logits: its soft loss is the
squared error to the teacher's score, and T does not apply.

The soft loss is `keras.distillation.LogitsDistillation`'s. The rest of
`keras.distillation.Distiller` does not fit this run, for three reasons:
- it calls the teacher at every training step. The teacher is frozen and runs
  without dropout, so its outputs are the same every epoch: computing them once
  (`_TeacherRecipe.encode_training`) gives the same loss for one pass of the
  teacher instead of one per epoch;
- the fine-tuning run's machinery (`albert_tf.recipes.finetune`: the best epoch
  kept as a task model directory, resume checkpoints of the trained model's and
  optimizer's variables, `CustomLoop` under MultiWorkerMirroredStrategy) trains
  and saves one task model; a Distiller wraps two, and its saved form is not a
  task model that predict and export read;
- it takes a label for every row, where unlabelled text has none.
Its `FeatureDistillation` (hidden states of a teacher layer against a student
layer) is left out too: ALBERT's layers are one shared block applied L times,
so a layer is no named Keras layer whose output Keras could extract; and a
student that starts from the teacher's block (`student_init="teacher"`)
already holds the teacher's features.

Students: `student_config` derives one from the teacher's `AlbertConfig` by a
named size (`STUDENT_SIZES`) and explicit overrides. A student as wide as the
teacher can start from the teacher's own weights, running fewer layers of the
same shared block (`student_init="teacher"`); a narrower one with the teacher's
E from its embeddings, the E -> H projection and the block fresh
(`student_init="embeddings"`); any student can start fresh.
"""

import dataclasses
import json
import os

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from albert_tf.distribute import is_chief
from albert_tf.models import AlbertBackbone
from albert_tf.recipes.encoded import Encoded
from albert_tf.recipes.distill_config import STUDENT_SIZES
from albert_tf.recipes.finetune import finetune
from albert_tf.recipes.names import SENTENCE_TASK_NAMES
from albert_tf.recipes.prediction import predict_examples
from albert_tf.recipes.registry import get_recipe
from albert_tf.utils import files
from albert_tf.utils.errors import UserError
from albert_tf.utils.layout import DISTILL_RUN_FILE
from input_pipeline import finetuning as data
from input_pipeline.finetuning.examples import ReadResult, TextExample

# The tasks whose teachers distill: one vector per example, classified or scored.
DISTILL_TASKS = SENTENCE_TASK_NAMES
# Where the teacher's soft targets sit in a training label: one scalar per class (see `_TeacherRecipe`).
_SOFT = "teacher_{}"
_LABEL, _LABELLED = "label", "labelled"


def student_config(teacher, config):
    """The student's `AlbertConfig`: the teacher's (`AlbertConfig`) scaled by `config.student`, then its overrides.

    Raises:
        UserError: the student is not smaller than the teacher (no fewer
            operations per token), or its shape is invalid.
    """
    depth, width = STUDENT_SIZES[config.student]
    heads = config.student_heads or max(1, round(teacher.num_attention_heads * width))
    layers = config.student_layers or max(1, round(teacher.num_hidden_layers * depth))
    student = teacher.replace(
        num_hidden_layers=layers,
        hidden_size=config.student_hidden_size or heads * max(1, round(teacher.hidden_size * width / heads)),
        embedding_size=config.student_embedding_size or teacher.embedding_size,
        num_attention_heads=heads,
        intermediate_size=config.student_intermediate_size or max(1, round(teacher.intermediate_size * width)),
        num_hidden_groups=min(teacher.num_hidden_groups, layers),
    )
    if operations_per_token(student) >= operations_per_token(teacher):
        raise UserError(
            f"--student must be smaller than the teacher: it would run {describe(student)}, the teacher "
            f"{describe(teacher)}. Choose fewer layers or a smaller width.")
    return student


def operations_per_token(config):
    """Multiply-adds per token of the encoder's layers: L x (4 H^2 attention + 2 H I feed-forward)."""
    return config.num_hidden_layers * (4 * config.hidden_size ** 2 + 2 * config.hidden_size * config.intermediate_size)


def describe(config):
    """'L 1, H 128, E 64, heads 4, I 512', an `AlbertConfig`'s size."""
    return (f"L {config.num_hidden_layers}, H {config.hidden_size}, E {config.embedding_size}, "
            f"heads {config.num_attention_heads}, I {config.intermediate_size}")


def resolve_init(config, teacher, student):
    """"teacher", "embeddings" or "fresh": `config.student_init` with "auto" resolved (teacher where the shapes
    match, else embeddings where the embedding tables do).

    Raises:
        UserError: "teacher" for a student whose widths differ from the teacher's, or "embeddings" for one
            whose embedding tables do.
    """
    same = dataclasses.replace(teacher, num_hidden_layers=student.num_hidden_layers,
                               num_hidden_groups=student.num_hidden_groups) == student
    # The shared blocks' weights do not depend on L only with one group (G groups need L >= G, and hold G blocks).
    fits = same and teacher.num_hidden_groups == student.num_hidden_groups
    # The embedding layer's weights depend on V, E, the positions and the token types alone, not on H.
    tables = ("vocab_size", "embedding_size", "max_position_embeddings", "type_vocab_size")
    embeddings_fit = all(getattr(teacher, name) == getattr(student, name) for name in tables)
    if config.student_init == "auto":
        return "teacher" if fits else "embeddings" if embeddings_fit else "fresh"
    if config.student_init == "teacher" and not fits:
        raise UserError(f"--student-init teacher needs the teacher's widths and groups; the student has "
                        f"{describe(student)}, the teacher {describe(teacher)}. Use --student-init embeddings "
                        "or fresh.")
    if config.student_init == "embeddings" and not embeddings_fit:
        raise UserError(f"--student-init embeddings needs the teacher's embedding size E; the student has "
                        f"{describe(student)}, the teacher {describe(teacher)}. Use --student-init fresh.")
    return config.student_init


def start_student(teacher, shape, init):
    """The student's `AlbertBackbone` of `shape` (an `AlbertConfig`), started as `init` says from `teacher`'s
    backbone ("teacher", "embeddings" or "fresh", as `resolve_init` returns it); the teacher is left as it is."""
    student = AlbertBackbone(shape)
    if init == "teacher":
        # One shared block: the same weights whatever L, so the student's are the teacher's.
        student.set_weights(teacher.get_weights())
    elif init == "embeddings":
        # A narrower student keeps the teacher's E-wide tables; its projection to its own H starts fresh.
        student.embeddings.set_weights(teacher.embeddings.get_weights())
    return student


def distillation_loss(labels, teacher, student, labelled, temperature, label_weight, label_loss, regression):
    """The student's loss (the module's formula), a scalar.

    Args:
        labels: the true labels (batch,): class ids, or scores for regression;
            any value on unlabelled rows.
        teacher: float (batch, classes), the teacher's logits, or (batch, 1) its scores.
        student: float (batch, classes) logits, or (batch,) scores.
        labelled: float (batch,), 1 on rows with a true label.
        temperature: T.
        label_weight: the label loss's weight; the soft loss gets 1 - it.
        label_loss: fn(labels, sample_weight) -> the task's loss, mean over the
            whole batch with `sample_weight` 0 on the rows it leaves out.
        regression: whether the outputs are scores.
    """
    labelled = ops.cast(labelled, "float32")
    batch = ops.cast(ops.shape(labelled)[0], "float32")
    # The task's mean over the batch, rescaled to the mean over the rows that have a label (0 when none has).
    hard = label_loss(labels, labelled) * batch / ops.maximum(ops.sum(labelled), 1.0)
    if regression:
        soft = keras.distillation.LogitsDistillation(temperature=1.0, loss="mean_squared_error").compute_loss(
            ops.cast(teacher[:, 0], "float32"), ops.cast(student, "float32"))
    else:
        # The KLDivergence instance, not the default "kl_divergence" string: Keras 3.15 turns the string into a
        # bare function, which then skips the softmax and the T^2 that LogitsDistillation applies to the instance.
        soft = keras.distillation.LogitsDistillation(
            temperature=temperature, loss=keras.losses.KLDivergence()).compute_loss(
            ops.cast(teacher, "float32"), ops.cast(student, "float32"))
    return label_weight * hard + (1.0 - label_weight) * soft


class _Objective:
    """A student task model's loss and metrics on the labels `_TeacherRecipe` makes (a dict per row).

    Set on the student model's instance (`task_loss`, `update_task_metrics`),
    which then trains as the task model it is and saves as one: the loss is
    no part of a saved model.
    """

    def __init__(self, model, num_outputs, config, regression):
        self._task_loss, self._task_metrics = model.task_loss, model.update_task_metrics
        self._num_outputs, self._config, self._regression = num_outputs, config, regression

    def loss(self, y, y_pred, sample_weight=None, x=None):
        teacher = ops.stack([y[_SOFT.format(i)] for i in range(self._num_outputs)], axis=-1)  # (batch, classes)
        student = y_pred["predictions" if self._regression else "logits"]
        return distillation_loss(
            y[_LABEL], teacher, student, y[_LABELLED], self._config.temperature, self._config.label_weight,
            lambda labels, weight: self._task_loss(labels, y_pred, weight, x), self._regression)

    def update_metrics(self, y, y_pred, sample_weight=None, x=None):
        labels = y[_LABEL]
        if self._regression:
            # MeanSquaredError averages over the last axis first: one score per row there, so rows can be weighed.
            labels, y_pred = labels[:, None], {"predictions": y_pred["predictions"][:, None]}
        self._task_metrics(labels, y_pred, y[_LABELLED], x)


class _TeacherRecipe:
    """The task's recipe with training labels from the teacher: what `finetune` trains a student with.

    Every training row's label becomes a dict of scalars (scalars batch
    alike under every padding and shape setting): the true label
    (`_LABEL`; 0 on unlabelled rows), whether it has one (`_LABELLED`), and
    the teacher's output for each class (`_SOFT`). Evaluation reads the
    evaluation file's own labels, as fine-tuning does.
    """

    def __init__(self, recipe, teacher, label_names, config, unlabeled, init, log):
        self._recipe, self._teacher, self._label_names = recipe, teacher, label_names
        self._config, self._unlabeled, self._init, self._log = config, unlabeled, init, log
        self.metrics, self.label_pad = recipe.metrics, recipe.label_pad
        # What a resume must agree with: other distillation settings start the run over.
        self.resume_settings = {"distill": config.to_dict(), "unlabeled": [str(p) for p in unlabeled], "init": init}

    def label_names(self, train_path, config):
        return self._label_names

    def encode(self, path, tokenizer, config, label_names):
        return self._recipe.encode(path, tokenizer, config, label_names)

    def encode_training(self, path, tokenizer, config, label_names):
        """The training file and the unlabelled text, encoded, each row labelled as the class says."""
        labelled = self._recipe.encode(path, tokenizer, config, label_names)
        inputs, labels = list(labelled.inputs), [(y, 1.0) for y in labelled.labels]
        notes = list(labelled.notes)
        for unlabeled_path in self._unlabeled:
            result = read_unlabeled(self._recipe, unlabeled_path, config)
            encoded = self._recipe.encode_read(result, tokenizer, config, label_names, labelled=False)
            inputs += encoded.inputs
            labels += [(0.0 if self._recipe.regression else 0, 0.0)] * len(encoded.inputs)
            notes.append(f"{unlabeled_path}: " + "; ".join(encoded.notes) + " (unlabelled: the teacher's outputs)")
        self._log(f"the teacher labels {len(inputs)} training rows")
        outputs = predict_examples(self._teacher, inputs, config.eval_batch_size, config.pad_to)
        key = "predictions" if self._recipe.regression else "logits"
        rows = []
        for (label, weight), output in zip(labels, outputs):
            soft = np.atleast_1d(np.asarray(output[key], "float32"))
            rows.append({_LABEL: label, _LABELLED: np.float32(weight),
                         **{_SOFT.format(i): np.float32(v) for i, v in enumerate(soft)}})
        return Encoded(inputs, rows, labelled.examples, extra=labelled.extra, notes=notes, skipped=labelled.skipped)

    def build_model(self, backbone, label_names, config):
        model = self._recipe.build_model(backbone, label_names, config)
        if self._init == "teacher":
            model.head.set_weights(self._teacher.head.get_weights())
        objective = _Objective(model, 1 if self._recipe.regression else len(label_names), self._config,
                               self._recipe.regression)
        model.task_loss, model.update_task_metrics = objective.loss, objective.update_metrics
        return model

    def evaluate(self, model, encoded, config):
        return self._recipe.evaluate(model, encoded, config)


def read_unlabeled(recipe, path, config):
    """A `ReadResult` of unlabelled examples: a table (.csv/.tsv/.jsonl) with the task's text column(s), or
    plain text with one example per line.

    Raises:
        UserError: the file is missing, unreadable or holds no text, or is plain text for a pair task.
    """
    try:
        if os.path.splitext(str(path))[1].lower() in (".csv", ".tsv", ".json", ".jsonl"):
            result = recipe.read(path, config, labelled=False)
        else:
            pairs = bool(config.text_pair_column or (recipe.glue is not None and recipe.glue.text_b))
            if pairs:
                raise UserError(f"--unlabeled {path}: the teacher reads text pairs; give a .csv, .tsv or .jsonl "
                                "table with its text columns.")
            lines = files.read_text(path).splitlines()
            examples = [TextExample(line.strip(), None, None, f"{path}:{number}")
                        for number, line in enumerate(lines, 1) if line.strip()]
            result = ReadResult(examples, [])
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"--unlabeled {path}: cannot read it ({e}).") from None
    if not result.examples:
        raise UserError(f"--unlabeled {path}: holds no text.")
    return result


def check_unlabeled(recipe, paths, config):
    """Reads every --unlabeled file once, before anything is written (see `read_unlabeled`)."""
    for path in paths:
        read_unlabeled(recipe, path, config)


def check_eval_labels(recipe, eval_path, config, label_names):
    """Refuses an evaluation file whose labels are not among the teacher's `label_names`."""
    if recipe.regression:
        return
    found = data.read_label_set(eval_path, config.label_column) if not recipe.glue else label_names
    other = sorted(set(found) - set(label_names))
    if other:
        raise UserError(f"--eval {eval_path} has labels the teacher does not know: {other}; the teacher's are "
                        f"{list(label_names)}.")


def check_teacher_task(task, teacher="the teacher"):
    """Refuses a teacher whose task `DISTILL_TASKS` does not hold, naming those it does."""
    if task not in DISTILL_TASKS:
        raise UserError(f"--teacher {teacher} was fine-tuned on {task}; distill supports sentence and sentence-pair "
                        "classification and regression (classification, regression, the GLUE tasks), not tagging, "
                        "squad, squad_v2 or race.")


def distill(teacher, teacher_config, config, distill_config, tokenizer, train_path, eval_path, out_dir,
            unlabeled=(), log=print, verbose=0, strategy=None, stop_requested=None):
    """Trains a student on `teacher`'s outputs into a fine-tuning run directory, with distill.json.

    Args:
        teacher: the teacher's task model (`load_run`'s), a classifier or regressor.
        teacher_config: the teacher run's `FinetuneConfig`.
        config: the student's `FinetuneConfig` (its task, labels and pooling are the teacher's).
        distill_config: a `DistillConfig`.
        tokenizer: the teacher's tokenizer.
        train_path, eval_path: the task's data files.
        out_dir: the run directory (`finetune`'s layout, and `DISTILL_RUN_FILE`).
        unlabeled: paths of unlabelled text the teacher labels.
        log, verbose, strategy, stop_requested: as `finetune` takes them.

    Returns:
        `finetune`'s result, with "student" (its `AlbertConfig` as a dict) and "init".
    """
    check_teacher_task(teacher_config.task)
    recipe = get_recipe(teacher_config.task)
    check_unlabeled(recipe, unlabeled, config)
    check_eval_labels(recipe, eval_path, config, teacher.label_names)
    student_shape = student_config(teacher.backbone.config, distill_config)
    init = resolve_init(distill_config, teacher.backbone.config, student_shape)
    strategy = strategy or tf.distribute.get_strategy()
    keras.utils.set_random_seed(config.seed)
    with strategy.scope():
        student = start_student(teacher.backbone, student_shape, init)
    log(f"student {describe(student_shape)} ({init} start), teacher {describe(teacher.backbone.config)}")
    label_names = teacher.label_names if not recipe.regression else None
    # The teacher scored on the student's evaluation file: the report compares the two there.
    teacher_eval = recipe.evaluate(teacher, recipe.encode(eval_path, tokenizer, config, label_names), config)
    log(f"teacher on {eval_path}: " + ", ".join(f"{k} {v:.4f}" for k, v in teacher_eval.items()
                                                if isinstance(v, float)))
    teaching = _TeacherRecipe(recipe, teacher, label_names, distill_config, list(unlabeled), init, log)
    result = finetune(config, student, tokenizer, train_path, eval_path, out_dir, log=log, verbose=verbose,
                      strategy=strategy, stop_requested=stop_requested, recipe=teaching)
    record = {"distill": distill_config.to_dict(), "init": init, "student": student_shape.to_dict(),
              "teacher": teacher.backbone.config.to_dict(), "unlabeled": [str(p) for p in unlabeled],
              "metric": recipe.metrics[0], "teacher_eval": teacher_eval,
              "history": result["history"], "best_epoch": result["best_epoch"]}
    if is_chief(strategy):
        files.write_text(os.path.join(out_dir, DISTILL_RUN_FILE), json.dumps(record, indent=2))
    return {**result, "student": student_shape.to_dict(), "init": init}
