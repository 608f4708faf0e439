"""Multiple choice (RACE): one article, a question, four answers."""

import numpy as np

from albert_tf.models import AlbertMultipleChoice
from albert_tf.recipes import metrics as metric_fns
from albert_tf.recipes.encoded import Encoded, notes_for
from albert_tf.recipes.prediction import predict_examples
from input_pipeline import finetuning as data

class ChoiceRecipe:
    name = "race"
    metrics = ("accuracy",)
    label_pad = 0

    def label_names(self, train_path, config):
        return None

    def build_model(self, backbone, label_names, config):
        return AlbertMultipleChoice(backbone, dropout=config.dropout)

    def read(self, path, config, labelled=True, label_names=None):
        return data.read_race(path, labelled=labelled, on_error=config.on_error)

    def encode(self, path, tokenizer, config, label_names, labelled=True):
        return self.encode_read(self.read(path, config, labelled), tokenizer, config, label_names, labelled)

    def encode_read(self, result, tokenizer, config, label_names=None, labelled=True):
        """Encoded questions of a `ReadResult`: one row of every option's input per question."""
        encoder = data.ChoiceEncoder(tokenizer, config.max_seq_length)
        inputs = encoder.encode_all(result.examples)
        labels = [e.label for e in result.examples] if labelled else None
        return Encoded(inputs, labels, result.examples,
                       notes=notes_for(result, "questions", encoder.num_truncated, "with the article cut to fit"),
                       skipped=result.skipped)

    def _choices(self, model, encoded, config):
        outputs = predict_examples(model, encoded.inputs, config.eval_batch_size, config.pad_to)
        return [int(np.argmax(o["logits"])) for o in outputs]

    def evaluate(self, model, encoded, config):
        return {"accuracy": metric_fns.accuracy(encoded.labels, self._choices(model, encoded, config))}

    def predictions(self, model, encoded, config):
        return [{"answer": chr(ord("A") + c)} for c in self._choices(model, encoded, config)]
