"""The serving functions an export holds, for any model built on `AlbertBackbone`.

A model is described generically (`describe_model`): its named int32 inputs
(the backbone inputs, plus e.g. `mask_positions`) and its dict of outputs. Its
class declares its kind (`export_kind`), and that picks the post-processing:

| kind               | model outputs                 | added to every signature | added to text signatures            |
|--------------------|-------------------------------|--------------------------|-------------------------------------|
| backbone           | sequence_output, pooled_output| -                        | tokens, padding_mask                |
| pretrainer         | mlm_logits, sop_logits        | -                        | tokens, padding_mask                |
| classifier         | logits (batch, classes)       | probabilities            | label_ids, labels*                  |
| multilabel         | logits (batch, labels)        | probabilities, predicted, labels | -                           |
| multiple_choice    | logits (batch, choices)       | probabilities            | label_ids                           |
| tagger             | logits (batch, seq, labels)   | probabilities            | label_ids, labels*, tokens, padding_mask |
| regressor          | predictions                   | -                        | -                                   |
| question_answering | start_logits, end_logits      | -                        | answer, answer_start, answer_end, score, null_score, tokens, padding_mask |
(* when the model has `label_names`.)
A multilabel model's `probabilities` are independent sigmoids; `predicted` is 1
where a label's probability is at or above its threshold (the model config's
`thresholds`), and `labels` (batch, labels) holds that label's name there, ""
elsewhere: every row has the same width, as a signature's outputs must.

Signatures:
    serving_default   the model's id inputs -> outputs; inputs are checked in-graph
                      (shapes agree, length <= max_length, ids in range).
    serve_text        raw strings -> outputs, tokenized in-graph: `text` (batch,);
                      QA: `question`, `context` (batch,); multiple choice:
                      `text` (batch,) and `choices` (batch, num_choices).
    serve_text_pair   `text`, `text_pair` (batch,) (not for QA / multiple choice).
    serve_examples    classifiers (multilabel too) and regressors: serialized tf.Examples (`inputs`,
                      (batch,)) holding a `text` bytes feature and, in every example
                      of a batch or in none, `text_pair`. TF-Serving's Classify
                      (method `tensorflow/serving/classify`: `classes`, `scores`, both
                      (batch, classes)) and Regress (`tensorflow/serving/regress`:
                      `outputs`, (batch,)) APIs answer through it, as TF Model
                      Garden's `serve_examples` reads its text features.
Any model input besides the backbone inputs (e.g. the pretrainer's
`mask_positions`) is an input of the text signatures too.
"""

import dataclasses

import tensorflow as tf

from albert_tf.config import AlbertConfig
from albert_tf.export.signature_names import (  # noqa: F401 - the signatures' public names
    CLASSIFY_METHOD, EXAMPLES_INPUT, EXAMPLES_SIGNATURE, ID_SIGNATURE, PREDICT_METHOD, REGRESS_METHOD, TEXT_FEATURE,
    TEXT_PAIR_FEATURE, TEXT_PAIR_SIGNATURE, TEXT_SIGNATURE)
from input_pipeline import features
from albert_tf.utils.config_base import check_positive_int
from albert_tf.utils.errors import UserError
from input_pipeline.finetuning import text_inputs
from input_pipeline.finetuning.squad import MAX_ANSWER_TOKENS, MAX_QUESTION_TOKENS
from input_pipeline.tokenizer import SEP_ID

BACKBONE, PRETRAINER, CLASSIFIER, MULTIPLE_CHOICE = (
    "backbone", "pretrainer", "classifier", "multiple_choice"
)
TAGGER, REGRESSOR, QUESTION_ANSWERING = "tagger", "regressor", "question_answering"
MULTI_LABEL = "multilabel"
KINDS = (BACKBONE, PRETRAINER, CLASSIFIER, MULTI_LABEL, MULTIPLE_CHOICE, TAGGER, REGRESSOR, QUESTION_ANSWERING)
TOKEN_LEVEL_KINDS = (BACKBONE, PRETRAINER, TAGGER, QUESTION_ANSWERING)
# Kinds whose one-text outputs can be averaged over a long text's windows.
WINDOWED_KINDS = (CLASSIFIER, MULTI_LABEL, REGRESSOR)
# Kinds TF-Serving's Classify API answers (every label with its score).
CLASSIFY_KINDS = (CLASSIFIER, MULTI_LABEL)


# A QA model's `serve_text` returns answer spans of at most MAX_ANSWER_TOKENS
# pieces; its question is cut to MAX_QUESTION_TOKENS pieces and the context
# fills the rest of the window (only the first window of a long context is
# read: no doc-stride windows in-graph).


@dataclasses.dataclass(frozen=True)
class ModelInterface:
    """What an exporter needs to know about a model.

    Attributes:
        kind: one of the kinds in the module docstring.
        config: the backbone's `AlbertConfig`.
        inputs: input name -> Keras shape, e.g. (None, None) or (None, 4, None).
        outputs: output name -> Keras shape.
        label_names: class / tag names, or None.
        thresholds: a multilabel model's threshold of each label, else None.
    """

    kind: str
    config: AlbertConfig
    inputs: dict
    outputs: dict
    label_names: tuple = None
    thresholds: tuple = None

    @property
    def extra_inputs(self):
        """Model inputs that are not backbone inputs (e.g. mask_positions)."""
        return tuple(n for n in self.inputs if n not in features.BACKBONE_INPUTS)


def describe_model(model, label_names=None):
    """Describes a Keras model whose inputs are backbone inputs and outputs a dict.

    Args:
        model: an `AlbertBackbone`, `AlbertPretrainer` or task model (a
            functional Keras model with a `.backbone` or a `.config`).
        label_names: overrides the model's own `label_names`.

    Returns:
        A `ModelInterface`.
    """
    config = getattr(getattr(model, "backbone", model), "config", None)
    if not isinstance(config, AlbertConfig):
        raise ValueError(
            "`model` must be an AlbertBackbone or a model with a `.backbone` AlbertBackbone. "
            f"Received: {type(model).__name__}"
        )
    model_inputs, model_outputs = model.input, model.output
    if not isinstance(model_inputs, dict) or not isinstance(model_outputs, dict):
        raise ValueError(
            "`model` must take a dict of named inputs and return a dict of named outputs. "
            f"Received: inputs {type(model_inputs).__name__}, outputs {type(model_outputs).__name__}"
        )
    missing = [n for n in features.BACKBONE_INPUTS if n not in model_inputs]
    if missing:
        raise ValueError(f"`model` lacks the backbone inputs {missing}. Received: {sorted(model_inputs)}")
    inputs = {n: tuple(model_inputs[n].shape) for n in model_inputs}
    outputs = {n: tuple(model_outputs[n].shape) for n in model_outputs}
    if label_names is None:
        label_names = getattr(model, "label_names", None)
    if label_names is None and hasattr(model, "get_config"):
        try:
            label_names = model.get_config().get("label_names")
        except NotImplementedError:
            label_names = None
    thresholds = getattr(model, "thresholds", None)
    return ModelInterface(
        kind=_kind(model),
        config=config,
        inputs=inputs,
        outputs=outputs,
        label_names=tuple(label_names) if label_names is not None else None,
        thresholds=tuple(thresholds) if thresholds is not None else None,
    )


def model_tokenizer(model, tokenizer=None):
    """`tokenizer`, else the tokenizer of the model's preprocessor (None when it has none)."""
    if tokenizer is not None:
        return tokenizer
    preprocessor = getattr(model, "preprocessor", None)
    return preprocessor.tokenizer if preprocessor is not None else None


def _kind(model):
    kind = getattr(type(model), "export_kind", None)
    if kind not in KINDS:
        raise ValueError(
            f"`model` must declare its export kind: {type(model).__name__}.export_kind must be one of "
            f"{KINDS}. Received: export_kind={kind!r}"
        )
    return kind


def id_input_specs(interface, batch_size=None, seq_length=None):
    """tf.TensorSpecs of the id signature: int32, the model's ranks.

    The last axis of the backbone inputs (the sequence) is `seq_length`
    (None: any length); the first is `batch_size` (None: any).
    """
    specs = {}
    for name, shape in interface.inputs.items():
        shape = list(shape)
        shape[0] = batch_size
        if name in features.BACKBONE_INPUTS:
            shape[-1] = seq_length
        specs[name] = tf.TensorSpec(shape, tf.int32, name=name)
    return specs


def model_outputs(model, interface, inputs, forward=None):
    """Runs the model (inference mode) and adds `probabilities`; float outputs in float32.

    `forward`, when given, runs in the model's place: a function of the input
    dict, such as `FrozenForward.graph_function`'s (weights as constants).
    """
    outputs = forward(inputs) if forward is not None else model(inputs, training=False)
    outputs = {
        name: tf.cast(value, tf.float32) if value.dtype.is_floating else value
        for name, value in outputs.items()
    }
    if interface.kind in (CLASSIFIER, MULTI_LABEL, MULTIPLE_CHOICE, TAGGER):
        outputs.update(label_scores(interface, outputs["logits"]))
    return outputs


def label_scores(interface, logits):
    """`probabilities` of the logits: a softmax over the classes, or (multilabel) each label's sigmoid, with the
    labels at or above their thresholds (`predicted`, `labels`; see the module docstring)."""
    if interface.kind != MULTI_LABEL:
        return {"probabilities": tf.nn.softmax(logits, axis=-1)}
    probabilities = tf.sigmoid(logits)  # (batch, labels)
    predicted = probabilities >= tf.constant(interface.thresholds, tf.float32)
    count = len(interface.thresholds)
    names = tf.constant(list(interface.label_names or [str(i) for i in range(count)]))
    labels = tf.where(predicted, tf.broadcast_to(names, tf.shape(probabilities)), "")
    return {"probabilities": probabilities, "predicted": tf.cast(predicted, tf.int32), "labels": labels}


def check_id_inputs(interface, inputs, max_length):
    """In-graph checks of the id signature's inputs; returns the inputs, gated on them."""
    c = interface.config
    ranks = [text_inputs.assert_rank(inputs[n], len(interface.inputs[n]), n) for n in inputs]
    with tf.control_dependencies(ranks):
        inputs = {name: tf.identity(value) for name, value in inputs.items()}
    token_ids = inputs[features.TOKEN_IDS]
    seq = tf.shape(token_ids)[-1]
    checks = [
        tf.debugging.assert_positive(seq, message="`token_ids` must hold at least one token per row."),
        tf.debugging.assert_less_equal(
            seq, max_length,
            message=f"Sequences must be at most max_length={max_length} tokens, the exported "
            "maximum (the text signatures truncate raw text to it).",
        ),
        tf.debugging.assert_non_negative(token_ids, message="`token_ids` must be >= 0."),
        tf.debugging.assert_less(
            token_ids, c.vocab_size, message=f"`token_ids` must be < vocab_size={c.vocab_size}."
        ),
    ]
    for name in (features.SEGMENT_IDS, features.PADDING_MASK):
        checks.append(tf.debugging.assert_equal(
            tf.shape(inputs[name]), tf.shape(token_ids),
            message=f"`{name}` must have the shape of `token_ids`.",
        ))
    segment_ids = inputs[features.SEGMENT_IDS]
    checks += [
        tf.debugging.assert_non_negative(segment_ids, message="`segment_ids` must be >= 0."),
        tf.debugging.assert_less(
            segment_ids, c.type_vocab_size,
            message=f"`segment_ids` must be < type_vocab_size={c.type_vocab_size}.",
        ),
        tf.debugging.Assert(
            tf.reduce_all(tf.logical_or(inputs[features.PADDING_MASK] == 0, inputs[features.PADDING_MASK] == 1)),
            ["`padding_mask` must hold only 0 and 1."],
        ),
    ]
    if features.MASK_POSITIONS in inputs:
        positions = inputs[features.MASK_POSITIONS]
        checks += [
            tf.debugging.assert_non_negative(positions, message="`mask_positions` must be >= 0."),
            tf.debugging.assert_less(
                positions, seq, message="`mask_positions` must be < the sequence length."
            ),
        ]
    with tf.control_dependencies(checks):
        return {name: tf.identity(value) for name, value in inputs.items()}


def check_max_windows(interface, max_windows):
    """`max_windows` when it suits the model: 1, or more for a classifier, multilabel or regressor model."""
    check_positive_int("max_windows", max_windows)
    if max_windows > 1 and interface.kind not in WINDOWED_KINDS:
        kinds = ", ".join(WINDOWED_KINDS[:-1]) + " and " + WINDOWED_KINDS[-1]
        raise UserError(f"`max_windows` applies to {kinds} models; this one is a "
                         f"{interface.kind}. Received: max_windows={max_windows!r}")
    return max_windows


def build_signatures(model, interface, tokenizer, max_length, truncate_from="end", max_windows=1, forward=None):
    """The SavedModel's signatures: name -> concrete function.

    Args:
        model: the Keras model.
        interface: its `ModelInterface`.
        tokenizer: an `AlbertTokenizer`, or None for the id signature only.
        max_length: longest sequence; the text signatures truncate to it.
        truncate_from: which pieces of a too-long text they drop ("end",
            "start" or "middle"; `input_pipeline.finetuning.text_inputs.pack_texts`).
        max_windows: classifiers and regressors: `serve_text` reads a text
            longer than `max_length` as up to this many windows and averages
            their logits (predictions), as fine-tuning's `max_windows` does.
        forward: what every signature runs in the model's place (see
            `model_outputs`); None calls the model.
    """
    check_max_windows(interface, max_windows)

    @tf.function
    def serve_ids(**inputs):
        return model_outputs(model, interface, check_id_inputs(interface, inputs, max_length), forward)

    signatures = {ID_SIGNATURE: serve_ids.get_concrete_function(**id_input_specs(interface))}
    if tokenizer is None:
        return signatures
    tokenizer.check_vocab_size(interface.config.vocab_size)
    text_outputs = _TextOutputs(model, interface, tokenizer, max_length, truncate_from, max_windows, forward)
    string = lambda name, shape=(None,): tf.TensorSpec(shape, tf.string, name=name)
    extra = {n: s for n, s in id_input_specs(interface).items() if n in interface.extra_inputs}

    if interface.kind == QUESTION_ANSWERING:
        @tf.function
        def serve_qa(question, context, **extra_inputs):
            return text_outputs(question, context, extra_inputs)

        signatures[TEXT_SIGNATURE] = serve_qa.get_concrete_function(
            question=string("question"), context=string("context"), **extra
        )
    elif interface.kind == MULTIPLE_CHOICE:
        num_choices = interface.inputs[features.TOKEN_IDS][1]

        @tf.function
        def serve_choices(text, choices, **extra_inputs):
            return text_outputs.choices(text, choices, extra_inputs)

        signatures[TEXT_SIGNATURE] = serve_choices.get_concrete_function(
            text=string("text"), choices=string("choices", (None, num_choices)), **extra
        )
    else:
        @tf.function
        def serve_text(text, **extra_inputs):
            return text_outputs(text, None, extra_inputs)

        @tf.function
        def serve_text_pair(text, text_pair, **extra_inputs):
            return text_outputs(text, text_pair, extra_inputs)

        signatures[TEXT_SIGNATURE] = serve_text.get_concrete_function(text=string("text"), **extra)
        signatures[TEXT_PAIR_SIGNATURE] = serve_text_pair.get_concrete_function(
            text=string("text"), text_pair=string("text_pair"), **extra
        )
    if interface.kind in (*CLASSIFY_KINDS, REGRESSOR) and not extra:
        # Calls the two text signatures' functions, traced above, rather than tracing their packing again.
        text_only, text_pair = signatures[TEXT_SIGNATURE], signatures[TEXT_PAIR_SIGNATURE]

        @tf.function
        def serve_examples(inputs):
            return text_outputs.examples(
                inputs, lambda texts: text_only(text=texts), lambda texts, pairs: text_pair(text=texts, text_pair=pairs)
            )

        signatures[EXAMPLES_SIGNATURE] = serve_examples.get_concrete_function(string(EXAMPLES_INPUT))
    return signatures


def signature_methods(signatures, interface):
    """Signature name -> the SignatureDef method name TF-Serving's APIs check."""
    examples_method = CLASSIFY_METHOD if interface.kind in CLASSIFY_KINDS else REGRESS_METHOD
    return {name: examples_method if name == EXAMPLES_SIGNATURE else PREDICT_METHOD for name in signatures}


class _TextOutputs:
    """Raw strings -> packed ids -> model -> outputs with the kind's post-processing."""

    def __init__(self, model, interface, tokenizer, max_length, truncate_from, max_windows=1, forward=None):
        self.model, self.interface, self.tokenizer, self.forward = model, interface, tokenizer, forward
        self.max_length, self.truncate_from, self.max_windows = max_length, truncate_from, max_windows
        with tf.init_scope():
            self.pieces = tf.constant([tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size)])
            self.label_names = (
                tf.constant(list(interface.label_names)) if interface.label_names else None
            )

    def __call__(self, texts, text_pairs, extra_inputs):
        if text_pairs is None and self.max_windows > 1:
            return self._windows(texts, extra_inputs)
        max_first = MAX_QUESTION_TOKENS if self.interface.kind == QUESTION_ANSWERING else None
        inputs = text_inputs.tf_pack_texts(self.tokenizer, texts, text_pairs, self.max_length, max_first,
                                        self.truncate_from)
        inputs.update(extra_inputs)
        return self._postprocess(inputs, self._run(inputs))

    def _windows(self, texts, extra_inputs):
        """One text as its windows; outputs averaged over each text's windows."""
        inputs, text_index = text_inputs.tf_pack_windows(self.tokenizer, texts, self.max_length, self.max_windows,
                                                      self.truncate_from)
        inputs.update(extra_inputs)
        outputs = self._run(inputs)
        averaged = {name: tf.math.segment_mean(outputs[name], text_index)
                    for name in ("logits", "predictions") if name in outputs}
        if "logits" in averaged:
            averaged.update(label_scores(self.interface, averaged["logits"]))
        return self._postprocess(inputs, averaged)

    def examples(self, serialized, text_only, text_pair):
        """Serialized tf.Examples -> TF-Serving's Classify (`classes`, `scores`) or Regress (`outputs`) tensors.

        `text_pair`, in every example or in none, makes each a pair; a
        missing `text`, a feature of the wrong type or `text_pair` in some
        examples only fails the request (InvalidArgumentError: TF-Serving's 400).
        `text_only(texts)` and `text_pair(texts, pairs)` give the outputs of
        the texts alone and of the pairs: the text signatures' functions.
        """
        parsed = tf.io.parse_example(serialized, {
            TEXT_FEATURE: tf.io.FixedLenFeature([], tf.string),
            TEXT_PAIR_FEATURE: tf.io.VarLenFeature(tf.string),
        })
        texts, pairs = parsed[TEXT_FEATURE], parsed[TEXT_PAIR_FEATURE]
        counts = tf.math.bincount(tf.cast(pairs.indices[:, 0], tf.int32), minlength=tf.size(texts),
                                  maxlength=tf.size(texts))
        with_pair = tf.reduce_all(counts == 1)
        check = tf.debugging.Assert(
            tf.logical_or(with_pair, tf.reduce_all(counts == 0)),
            [f"Each example holds one `{TEXT_PAIR_FEATURE}` string, in every example of the request or in none."],
        )
        with tf.control_dependencies([check]):
            texts = tf.identity(texts)
        outputs = tf.cond(
            with_pair,
            # One value per example, in row order: exactly (batch,).
            lambda: self._scores(text_pair(texts, tf.ensure_shape(pairs.values, [None]))),
            lambda: self._scores(text_only(texts)),
        )
        if self.interface.kind == REGRESSOR:
            return {"outputs": outputs}
        num_classes = self.interface.outputs["logits"][-1]
        names = self.label_names if self.label_names is not None else tf.strings.as_string(tf.range(num_classes))
        return {"classes": tf.tile(names[None], [tf.shape(outputs)[0], 1]), "scores": outputs}

    def _scores(self, outputs):
        return outputs["predictions"] if self.interface.kind == REGRESSOR else outputs["probabilities"]

    def choices(self, texts, choices, extra_inputs):
        """texts (batch,), choices (batch, C): pack each (text, choice) pair, then (batch, C, seq)."""
        inputs = text_inputs.tf_pack_choices(self.tokenizer, texts, choices, self.max_length)
        inputs.update(extra_inputs)
        return self._postprocess(inputs, self._run(inputs))

    def _run(self, inputs):
        return model_outputs(
            self.model, self.interface, check_id_inputs(self.interface, inputs, self.max_length), self.forward
        )

    def _postprocess(self, inputs, outputs):
        kind = self.interface.kind
        if kind in (CLASSIFIER, MULTIPLE_CHOICE, TAGGER):
            outputs["label_ids"] = tf.argmax(outputs["logits"], axis=-1, output_type=tf.int32)
            if self.label_names is not None and kind != MULTIPLE_CHOICE:
                outputs["labels"] = tf.gather(self.label_names, outputs["label_ids"])
        if kind == QUESTION_ANSWERING:
            outputs.update(self._best_span(inputs, outputs))
        if kind in TOKEN_LEVEL_KINDS:
            outputs["tokens"] = tf.gather(self.pieces, inputs[features.TOKEN_IDS])
            outputs["padding_mask"] = inputs[features.PADDING_MASK]
        return outputs

    def _best_span(self, inputs, outputs):
        """Highest start + end logit over spans inside the context, at most MAX_ANSWER_TOKENS long."""
        token_ids = inputs[features.TOKEN_IDS]  # (batch, seq)
        start, end = outputs["start_logits"], outputs["end_logits"]  # (batch, seq)
        seq = tf.shape(token_ids)[1]
        # Context tokens: second segment, not padding, not its closing [SEP].
        in_context = (
            (inputs[features.SEGMENT_IDS] == 1)
            & (inputs[features.PADDING_MASK] == 1)
            & (token_ids != SEP_ID)
        )
        positions = tf.range(seq)
        span_length = positions[None, :] - positions[:, None]  # (seq, seq): end - start
        allowed = (span_length >= 0) & (span_length < MAX_ANSWER_TOKENS)
        allowed = allowed[None] & in_context[:, :, None] & in_context[:, None, :]  # (batch, seq, seq)
        scores = start[:, :, None] + end[:, None, :]
        scores = tf.where(allowed, scores, tf.fill(tf.shape(scores), -1e30))
        best = tf.argmax(tf.reshape(scores, [tf.shape(scores)[0], -1]), axis=-1, output_type=tf.int32)
        answer_start, answer_end = best // seq, best % seq
        in_answer = (positions[None, :] >= answer_start[:, None]) & (positions[None, :] <= answer_end[:, None])
        answer_ids = tf.ragged.boolean_mask(token_ids, in_answer)
        return {
            # Detokenized pieces: the preprocessed (e.g. lowercased) form of the span.
            "answer": self.tokenizer.tf_decode(answer_ids),
            "answer_start": answer_start,
            "answer_end": answer_end,
            "score": tf.reduce_max(tf.reshape(scores, [tf.shape(scores)[0], -1]), axis=-1),
            # [CLS] start + end: compare with `score` for SQuAD 2.0-style "no answer".
            "null_score": start[:, 0] + end[:, 0],
        }
