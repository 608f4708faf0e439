"""Token tagging (NER, POS): one tag per word, scored on each word's first piece."""

import numpy as np

from albert_tf.models import AlbertTagger
from albert_tf.recipes import metrics as metric_fns
from albert_tf.recipes.encoded import Encoded, check_label_set, notes_for
from albert_tf.recipes.prediction import predict_examples
from input_pipeline import finetuning as data
from input_pipeline.features import IGNORE_LABEL

class TaggingRecipe:
    name = "tagging"
    metrics = ("accuracy",)
    label_pad = IGNORE_LABEL

    def label_names(self, train_path, config):
        if config.label_names:
            return check_label_set(config.label_names, "--labels", "tags")
        return check_label_set(data.tag_set(data.read_tagging(train_path, on_error=config.on_error).examples),
                               str(train_path), "tags")

    def build_model(self, backbone, label_names, config):
        return AlbertTagger(backbone, len(label_names), label_names=label_names, dropout=config.dropout)

    def read(self, path, config, labelled=True, label_names=None):
        return data.read_tagging(path, labelled=labelled, on_error=config.on_error)

    def encode(self, path, tokenizer, config, label_names, labelled=True):
        return self.encode_read(self.read(path, config, labelled), tokenizer, config, label_names, labelled)

    def encode_read(self, result, tokenizer, config, label_names=None, labelled=True):
        """Encoded sentences of a `ReadResult`: each word's first piece carries its tag."""
        encoder = data.TaggingEncoder(tokenizer, config.max_seq_length, label_names, truncate=config.truncate)
        encoded = [encoder.encode(e) for e in result.examples]
        return Encoded(
            [x for x, _, _ in encoded], [y for _, y, _ in encoded] if labelled else None,
            result.examples, extra=[first for _, _, first in encoded],
            notes=notes_for(result, "sentences", encoder.num_truncated), skipped=result.skipped,
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
