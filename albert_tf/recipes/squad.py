"""SQuAD v1.1 / v2.0 question answering: context windows in, answer spans out."""

import numpy as np

from albert_tf.models import AlbertQuestionAnswerer
from albert_tf.models.question_answering import END_POSITIONS, START_POSITIONS
from albert_tf.recipes.encoded import Encoded, notes_for
from albert_tf.recipes.prediction import predict_examples
from albert_tf.recipes.squad_answers import best_null_threshold, squad_predictions, squad_scores
from input_pipeline import finetuning as data
from albert_tf.utils.errors import UserError

class SquadRecipe:
    metrics = ("f1", "exact_match")
    label_pad = 0

    def __init__(self, name, version_2):
        self.name = name
        self.version_2 = version_2

    def label_names(self, train_path, config):
        return None

    def build_model(self, backbone, label_names, config):
        return AlbertQuestionAnswerer(backbone)

    def read(self, path, config, labelled=True, label_names=None):
        result = data.read_squad(path, on_error=config.on_error, labelled=labelled)
        if labelled and not self.version_2 and any(e.is_impossible for e in result.examples):
            raise UserError(f"{path} has unanswerable questions: use --task squad_v2.")
        return result

    def encode(self, path, tokenizer, config, label_names, labelled=True):
        return self.encode_read(self.read(path, config, labelled), tokenizer, config, label_names, labelled)

    def encode_read(self, result, tokenizer, config, label_names=None, labelled=True):
        """Context windows of a `ReadResult`'s questions (`extra`: the `SquadFeature` of each window)."""
        featurizer = data.SquadFeaturizer(tokenizer, config.max_seq_length, config.doc_stride,
                                          config.max_query_length)
        feats = featurizer.featurize(result.examples)
        labels = [{START_POSITIONS: f.start_position, END_POSITIONS: f.end_position} for f in feats]
        notes = notes_for(result, "questions", featurizer.num_truncated_questions,
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
