"""Sentence and sentence-pair classification / regression: GLUE, CSV/TSV/JSONL tables."""

import numpy as np

from albert_tf.models import AlbertClassifier, AlbertRegressor
from albert_tf.recipes import metrics as metric_fns
from albert_tf.recipes.class_weights import resolve_class_weights
from albert_tf.recipes.encoded import Encoded, check_label_set, notes_for
from albert_tf.recipes.prediction import predict_examples
from input_pipeline import finetuning as data

class SentenceRecipe:
    """Sentence or sentence-pair classification / regression (GLUE or a generic table)."""

    label_pad = 0

    def __init__(self, name, glue=None, regression=False):
        self.name = name
        self.glue = glue
        self.regression = regression if glue is None else glue.label_names is None
        self.metrics = glue.metrics if glue else (("pearson", "spearman") if self.regression else ("accuracy",))

    def read(self, path, config, labelled=True, label_names=None, lines=None, fmt=None):
        """A `ReadResult` of the table at `path`, or of its `lines` already read (then `fmt` names a CSV's format)."""
        if self.glue:
            return data.read_glue(path, self.name, labelled=labelled, on_error=config.on_error, lines=lines)
        return data.read_table(
            path, config.text_column, config.text_pair_column,
            config.label_column if labelled else None,
            None if self.regression else label_names, on_error=config.on_error, lines=lines, fmt=fmt,
        )

    def label_names(self, train_path, config):
        if self.regression:
            return None
        if self.glue:
            return list(self.glue.label_names)
        if config.label_names:
            return check_label_set(config.label_names, "--labels")
        return check_label_set(data.read_label_set(train_path, config.label_column),
                               f"{train_path}'s column {config.label_column!r}")

    def class_weights(self, config, train, label_names):
        """The `--class-weights` of a classification task, one per class, from its training `Encoded`."""
        return resolve_class_weights(config.class_weights, [e.label for e in train.examples], label_names,
                                     multilabel=False)

    def build_model(self, backbone, label_names, config, class_weights=None):
        if self.regression:
            return AlbertRegressor(backbone, dropout=config.dropout, pooling=config.pooling)
        return AlbertClassifier(
            backbone, len(label_names), label_names=label_names, dropout=config.dropout, pooling=config.pooling,
            class_weights=class_weights,
        )

    def encode(self, path, tokenizer, config, label_names, labelled=True):
        return self.encode_read(self.read(path, config, labelled, label_names), tokenizer, config, label_names, labelled)

    def encode_read(self, result, tokenizer, config, label_names=None, labelled=True):
        """Encoded examples of a `ReadResult`; with `config.max_windows` > 1 every window is a row.

        Then `inputs` and `labels` hold one row per window (each window
        trains with its text's label) and `extra` the number of windows of
        each example, which `evaluate` and `predictions` average over.
        """
        encoder = data.TextEncoder(tokenizer, config.max_seq_length, truncate=config.truncate,
                                   truncate_from=config.truncate_from, max_windows=config.max_windows)
        if config.max_windows == 1:
            inputs = encoder.encode_all(result.examples)
            labels = [e.label for e in result.examples] if labelled else None
            return Encoded(inputs, labels, result.examples,
                           notes=notes_for(result, "examples", encoder.num_truncated), skipped=result.skipped)
        windows = [encoder.encode_windows(e) for e in result.examples]
        inputs = [w for group in windows for w in group]
        labels = [e.label for e, group in zip(result.examples, windows) for _ in group] if labelled else None
        notes = notes_for(result, "examples", encoder.num_truncated,
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


def _softmax(logits):
    z = np.exp(logits - np.max(logits))
    return z / z.sum()
