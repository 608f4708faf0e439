"""The fine-tuning tasks: how each reads, encodes, builds its model and is scored.

A `Task` turns a file into `Encoded` data (model inputs, labels, and what
post-processing needs), builds the matching task model, and scores or
formats that model's outputs. `TASKS` maps each `--task` name to one.
"""

import dataclasses

import numpy as np

from albert_tf.models import (
    AlbertClassifier, AlbertMultipleChoice, AlbertQuestionAnswerer, AlbertRegressor, AlbertTagger,
)
from albert_tf.models.question_answering import END_POSITIONS, START_POSITIONS
from albert_tf.tasks import metrics as metric_fns
from albert_tf.tasks.prediction import predict_examples
from albert_tf.tasks.squad import best_null_threshold, squad_predictions, squad_scores
from input_pipeline import finetuning as data
from input_pipeline.features import IGNORE_LABEL


@dataclasses.dataclass
class Encoded:
    """A file made ready for a model.

    Attributes:
        inputs: list of dicts of int32 arrays, one per model input row.
        labels: list of labels (None for unlabelled data).
        examples: the examples read (for post-processing and messages).
        extra: task-specific data (SQuAD features, tagging word positions).
        notes: human-readable counts (skipped rows, truncated texts).
        skipped: the reader's `Skipped` rows (with `skip_invalid`).
    """

    inputs: list
    labels: list | None
    examples: list
    extra: list | None = None
    notes: list = dataclasses.field(default_factory=list)
    skipped: list = dataclasses.field(default_factory=list)


def check_label_set(label_names, where, what="labels"):
    """`label_names` when it has two or more distinct entries; a ValueError saying why otherwise.

    A classifier over one class learns nothing and scores 1.0 on any file with
    that label, so a training file with a single label (or a --label-names
    list of one) is refused before any training starts.
    """
    names = list(label_names)
    if len(names) < 2:
        found = f"a single {what[:-1]}, {names[0]!r}" if names else f"no {what}"
        raise ValueError(f"{where} has {found}; a classifier needs at least 2. "
                         f"Check the file (or --label-column), or use --task regression for scores.")
    return names


def _notes(result, what, truncated=0, truncated_what="truncated to max_seq_length"):
    notes = [result.summary(what)]
    if truncated:
        notes.append(f"{data.counted(truncated, what)} {truncated_what}")
    return notes


class SentenceTask:
    """Sentence or sentence-pair classification / regression (GLUE or a generic table)."""

    label_pad = 0

    def __init__(self, name, glue=None, regression=False):
        self.name = name
        self.glue = glue
        self.regression = regression if glue is None else glue.label_names is None
        self.metrics = glue.metrics if glue else (("pearson", "spearman") if self.regression else ("accuracy",))

    def read(self, path, config, labelled=True, label_names=None):
        if self.glue:
            return data.read_glue(path, self.name, labelled=labelled, on_error=config.on_error)
        return data.read_table(
            path, config.text_column, config.text_pair_column,
            config.label_column if labelled else None,
            None if self.regression else label_names, on_error=config.on_error,
        )

    def label_names(self, train_path, config):
        if self.regression:
            return None
        if self.glue:
            return list(self.glue.label_names)
        if config.label_names:
            return check_label_set(config.label_names, "--label-names")
        return check_label_set(data.read_label_set(train_path, config.label_column),
                               f"{train_path}'s column {config.label_column!r}")

    def build_model(self, backbone, label_names, config):
        if self.regression:
            return AlbertRegressor(backbone, dropout=config.dropout, pooling=config.pooling)
        return AlbertClassifier(
            backbone, len(label_names), label_names=label_names, dropout=config.dropout, pooling=config.pooling
        )

    def encode(self, path, tokenizer, config, label_names, labelled=True):
        """Encoded examples; with `config.max_windows` > 1 every window is a row.

        Then `inputs` and `labels` hold one row per window (each window
        trains with its text's label) and `extra` the number of windows of
        each example, which `evaluate` and `predictions` average over.
        """
        result = self.read(path, config, labelled, label_names)
        encoder = data.TextEncoder(tokenizer, config.max_seq_length, truncate=config.truncate,
                                   truncate_from=config.truncate_from, max_windows=config.max_windows)
        if config.max_windows == 1:
            inputs = encoder.encode_all(result.examples)
            labels = [e.label for e in result.examples] if labelled else None
            return Encoded(inputs, labels, result.examples,
                           notes=_notes(result, "examples", encoder.num_truncated), skipped=result.skipped)
        windows = [encoder.encode_windows(e) for e in result.examples]
        inputs = [w for group in windows for w in group]
        labels = [e.label for e, group in zip(result.examples, windows) for _ in group] if labelled else None
        notes = _notes(result, "examples", encoder.num_truncated,
                       f"cut to max_windows={config.max_windows} windows")
        notes.append(f"{data.counted(encoder.num_windowed, 'examples')} read as several windows "
                     f"({len(inputs)} windows in all)")
        return Encoded(inputs, labels, result.examples, extra=[len(group) for group in windows], notes=notes,
                       skipped=result.skipped)

    def _predicted(self, model, encoded, config):
        """(predicted labels or scores, outputs), one per example: window outputs averaged."""
        outputs = predict_examples(model, encoded.inputs, config.eval_batch_size, config.pad_to)
        if encoded.extra is not None:
            starts = np.cumsum([0] + encoded.extra)
            outputs = [{k: np.mean([o[k] for o in outputs[a:b]], axis=0) for k in outputs[a]}
                       for a, b in zip(starts[:-1], starts[1:])]
        if self.regression:
            return np.array([float(o["predictions"]) for o in outputs]), outputs
        return np.array([int(np.argmax(o["logits"])) for o in outputs]), outputs

    def evaluate(self, model, encoded, config):
        predicted, _ = self._predicted(model, encoded, config)
        names = list(self.metrics)
        if not self.glue and not self.regression and model.num_classes == 2 and "f1" not in names:
            names.append("f1")
        return metric_fns.compute(names, np.array([e.label for e in encoded.examples]), predicted)

    def predictions(self, model, encoded, config):
        predicted, outputs = self._predicted(model, encoded, config)
        if self.regression:
            return [{"score": float(p)} for p in predicted]
        rows = []
        for p, o in zip(predicted, outputs):
            probabilities = _softmax(o["logits"])
            rows.append({"label": model.label_names[p] if model.label_names else int(p),
                         "probability": float(probabilities[p]),
                         "probabilities": [float(x) for x in probabilities]})
        return rows


class TaggingTask:
    name = "tagging"
    metrics = ("accuracy",)
    label_pad = IGNORE_LABEL

    def label_names(self, train_path, config):
        if config.label_names:
            return check_label_set(config.label_names, "--label-names", "tags")
        return check_label_set(data.tag_set(data.read_tagging(train_path, on_error=config.on_error).examples),
                               str(train_path), "tags")

    def build_model(self, backbone, label_names, config):
        return AlbertTagger(backbone, len(label_names), label_names=label_names, dropout=config.dropout)

    def encode(self, path, tokenizer, config, label_names, labelled=True):
        result = data.read_tagging(path, labelled=labelled, on_error=config.on_error)
        encoder = data.TaggingEncoder(tokenizer, config.max_seq_length, label_names, truncate=config.truncate)
        encoded = [encoder.encode(e) for e in result.examples]
        return Encoded(
            [x for x, _, _ in encoded], [y for _, y, _ in encoded] if labelled else None,
            result.examples, extra=[first for _, _, first in encoded],
            notes=_notes(result, "sentences", encoder.num_truncated), skipped=result.skipped,
        )

    def _tags(self, model, encoded, config):
        outputs = predict_examples(model, encoded.inputs, config.eval_batch_size, config.pad_to)
        return [np.argmax(o["logits"][first], -1) for o, first in zip(outputs, encoded.extra)]

    def evaluate(self, model, encoded, config):
        predicted = self._tags(model, encoded, config)
        truth = [np.asarray(y)[first] for y, first in zip(encoded.labels, encoded.extra)]
        return {"accuracy": metric_fns.accuracy(np.concatenate(truth), np.concatenate(predicted))}

    def predictions(self, model, encoded, config):
        return [{"tokens": list(e.words[: len(tags)]), "tags": [model.label_names[t] for t in tags]}
                for e, tags in zip(encoded.examples, self._tags(model, encoded, config))]


class SquadTask:
    metrics = ("f1", "exact_match")
    label_pad = 0

    def __init__(self, name, version_2):
        self.name = name
        self.version_2 = version_2

    def label_names(self, train_path, config):
        return None

    def build_model(self, backbone, label_names, config):
        return AlbertQuestionAnswerer(backbone)

    def encode(self, path, tokenizer, config, label_names, labelled=True):
        result = data.read_squad(path, on_error=config.on_error, labelled=labelled)
        if labelled and not self.version_2 and any(e.is_impossible for e in result.examples):
            raise ValueError(f"{path} has unanswerable questions: use --task squad_v2.")
        featurizer = data.SquadFeaturizer(tokenizer, config.max_seq_length, config.doc_stride,
                                          config.max_query_length)
        feats = featurizer.featurize(result.examples)
        labels = [{START_POSITIONS: f.start_position, END_POSITIONS: f.end_position} for f in feats]
        notes = _notes(result, "questions", featurizer.num_truncated_questions,
                       f"questions cut to max_query_length={config.max_query_length}")
        notes.append(f"{len(feats)} windows (doc_stride={config.doc_stride})")
        return Encoded([f.inputs for f in feats], labels, result.examples, extra=feats, notes=notes,
                       skipped=result.skipped)

    def _answers(self, model, encoded, config, threshold=None):
        outputs = predict_examples(model, encoded.inputs, config.eval_batch_size, config.pad_to)
        return squad_predictions(
            encoded.examples, encoded.extra, [o["start_logits"] for o in outputs],
            [o["end_logits"] for o in outputs], config.n_best_size, config.max_answer_length,
            self.version_2, config.null_score_diff_threshold if threshold is None else threshold,
        )

    def evaluate(self, model, encoded, config):
        if not self.version_2:
            answers = self._answers(model, encoded, config)
            return squad_scores(encoded.examples, {k: p.text for k, p in answers.items()})
        # As the original run_squad.py: spans once, then the threshold applied
        # here, and the F1-best threshold found on this (dev) set reported too.
        spans = self._answers(model, encoded, config, threshold=np.inf)
        answers = {k: "" if p.null_score_diff > config.null_score_diff_threshold else p.text
                   for k, p in spans.items()}
        scores = squad_scores(encoded.examples, answers)
        scores["best_f1"], scores["best_f1_threshold"] = best_null_threshold(encoded.examples, spans)
        return scores

    def predictions(self, model, encoded, config):
        answers = self._answers(model, encoded, config)
        return [{"id": e.qas_id, "answer": answers[e.qas_id].text,
                 "null_score_diff": answers[e.qas_id].null_score_diff} for e in encoded.examples]


class ChoiceTask:
    name = "race"
    metrics = ("accuracy",)
    label_pad = 0

    def label_names(self, train_path, config):
        return None

    def build_model(self, backbone, label_names, config):
        return AlbertMultipleChoice(backbone, dropout=config.dropout)

    def encode(self, path, tokenizer, config, label_names, labelled=True):
        result = data.read_race(path, labelled=labelled, on_error=config.on_error)
        encoder = data.ChoiceEncoder(tokenizer, config.max_seq_length)
        inputs = encoder.encode_all(result.examples)
        labels = [e.label for e in result.examples] if labelled else None
        return Encoded(inputs, labels, result.examples,
                       notes=_notes(result, "questions", encoder.num_truncated, "with the article cut to fit"),
                       skipped=result.skipped)

    def _choices(self, model, encoded, config):
        outputs = predict_examples(model, encoded.inputs, config.eval_batch_size, config.pad_to)
        return [int(np.argmax(o["logits"])) for o in outputs]

    def evaluate(self, model, encoded, config):
        return {"accuracy": metric_fns.accuracy(encoded.labels, self._choices(model, encoded, config))}

    def predictions(self, model, encoded, config):
        return [{"answer": chr(ord("A") + c)} for c in self._choices(model, encoded, config)]


def _softmax(logits):
    z = np.exp(logits - np.max(logits))
    return z / z.sum()


TASKS = {
    **{name: SentenceTask(name, glue=spec) for name, spec in data.GLUE_TASKS.items()},
    "classification": SentenceTask("classification"),
    "regression": SentenceTask("regression", regression=True),
    "tagging": TaggingTask(),
    "squad": SquadTask("squad", version_2=False),
    "squad_v2": SquadTask("squad_v2", version_2=True),
    "race": ChoiceTask(),
}


def get_task(name):
    if name not in TASKS:
        raise ValueError(f"Unknown task {name!r}. Valid tasks: {sorted(TASKS)}")
    return TASKS[name]
