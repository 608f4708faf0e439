"""Multi-label classification on sentences and pairs: sigmoid outputs, per-label thresholds tuned on dev."""

import numpy as np

from albert_tf.models import AlbertMultiLabelClassifier
from albert_tf.models.multilabel import DEFAULT_THRESHOLD
from albert_tf.recipes import multilabel_metrics
from albert_tf.recipes.class_weights import resolve_class_weights
from albert_tf.recipes.encoded import check_label_set
from albert_tf.recipes.names import MULTILABEL_TASK
from albert_tf.recipes.prediction import predict_examples
from albert_tf.recipes.sentence import SentenceRecipe
from albert_tf.utils.errors import UserError
from input_pipeline import finetuning as data


class MultiLabelRecipe(SentenceRecipe):
    """Any number of labels per text, from a table (`input_pipeline.finetuning.multilabel`).

    Each epoch is scored at 0.5 for every label (or `--threshold`);
    the scores also hold each label's threshold tuned on the evaluation set for
    F1 (`thresholds`) and the F1s at those (`tuned_micro_f1`,
    `tuned_macro_f1`: optimistic, being tuned and scored on the same set).
    `finetune` keeps the best epoch's tuned thresholds in its model's config.
    """

    def __init__(self):
        super().__init__(MULTILABEL_TASK)
        self.metrics = ("micro_f1", "macro_f1", "exact_match")

    def read(self, path, config, labelled=True, label_names=None, lines=None, fmt=None):
        return data.read_multilabel_table(
            path, config.text_column, config.text_pair_column,
            config.label_column if labelled and not config.label_columns else None, label_names,
            separator=config.label_separator, label_columns=config.label_columns if labelled else None,
            allow_empty=config.allow_empty_labels, on_error=config.on_error, lines=lines, fmt=fmt,
        )

    def label_names(self, train_path, config):
        found = data.read_multilabel_label_set(train_path, config.label_column, config.label_separator,
                                               config.label_columns)
        if not config.label_names:
            return check_label_set(found, f"{train_path}'s labels")
        # A label no training example has cannot be learned (and one the file has but --labels lacks is
        # refused at its row by the reader).
        unseen = [name for name in config.label_names if name not in found]
        if unseen and not config.label_columns:
            raise UserError(f"--labels: label(s) {unseen} are on no row of {train_path}; drop them or add examples.")
        return check_label_set(config.label_names, "--labels")

    def class_weights(self, config, train, label_names):
        return resolve_class_weights(config.class_weights, [e.label for e in train.examples], label_names,
                                     multilabel=True)

    def build_model(self, backbone, label_names, config, class_weights=None):
        thresholds = None if config.threshold is None else [config.threshold] * len(label_names)
        return AlbertMultiLabelClassifier(
            backbone, len(label_names), label_names=label_names, thresholds=thresholds,
            positive_weights=class_weights, dropout=config.dropout, pooling=config.pooling,
        )

    def _probabilities(self, model, encoded, config):
        """Sigmoid probabilities (examples, labels); a text's windows' logits averaged first."""
        outputs = predict_examples(model, encoded.inputs, config.eval_batch_size, config.pad_to)
        logits = np.stack([o["logits"] for o in outputs]).astype("float64")
        if encoded.extra is not None:
            starts = np.cumsum([0] + encoded.extra)
            logits = np.stack([logits[a:b].mean(0) for a, b in zip(starts[:-1], starts[1:])])
        return 1.0 / (1.0 + np.exp(-logits))

    def evaluate(self, model, encoded, config):
        probabilities = self._probabilities(model, encoded, config)
        targets = np.stack([e.label for e in encoded.examples])
        names = model.label_names
        # At 0.5 (or --threshold), not at the model's thresholds: those an earlier epoch tuned would score this one.
        fixed = [DEFAULT_THRESHOLD if config.threshold is None else config.threshold] * len(names)
        scores = multilabel_metrics.scores(targets, probabilities, fixed, names)
        if config.threshold is None:
            tuned = multilabel_metrics.tune_thresholds(targets, probabilities)
            at_tuned = multilabel_metrics.scores(targets, probabilities, tuned, names)
            scores.update(tuned_micro_f1=at_tuned["micro_f1"], tuned_macro_f1=at_tuned["macro_f1"],
                          thresholds=tuned)
        return scores

    def predictions(self, model, encoded, config):
        probabilities = self._probabilities(model, encoded, config)
        names = model.label_names
        thresholds = model.thresholds if config.threshold is None else [config.threshold] * len(names)
        rows = []
        for p, chosen in zip(probabilities, multilabel_metrics.decide(probabilities, thresholds)):
            rows.append({"labels": [name for name, c in zip(names, chosen) if c],
                         "probabilities": {name: float(x) for name, x in zip(names, p)}})
        return rows
