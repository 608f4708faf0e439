"""`AlbertPreprocessor`: raw strings -> model inputs, in the TensorFlow graph, as a Keras layer.

The layer runs `input_pipeline.finetuning.text_inputs.tf_pack_texts`, the packer of the
exported `serve_text` signatures, so `fit`, `predict`, `tf.data` pipelines and
the exports all see the same ids. It is TensorFlow code (tensorflow-text's
SentencePiece), like any tf.data preprocessing, whatever the Keras backend.
"""

import base64
import contextlib
import dataclasses

import keras
import numpy as np
import tensorflow as tf

from input_pipeline.finetuning import text_inputs
from input_pipeline.packing import check_truncate_from
from input_pipeline.text_normalization import Preprocessing
from input_pipeline.tokenizer import AlbertTokenizer

# Longest packed sequence when `sequence_length` is None: the released
# models' max_position_embeddings.
DEFAULT_SEQUENCE_LENGTH = 512
# The in-graph checks of `tf_pack_texts` (empty text, rank) fail with these
# messages; eager calls and `fit`/`predict` turn them into ValueErrors.
_TEXT_ERRORS = ("must not be empty", "must have rank")


def is_text(x):
    """Whether `x` (a batch, a pair of batches, a tf.data element spec) holds strings."""
    for leaf in tf.nest.flatten(x):
        if isinstance(leaf, (str, bytes)):
            return True
        if isinstance(leaf, (tf.Tensor, tf.TensorSpec, tf.RaggedTensor)) and leaf.dtype == tf.string:
            return True
        if isinstance(leaf, np.ndarray) and leaf.dtype.kind in "USO":
            return True
    return False


def as_text_structure(x):
    """A batch of texts as a string tensor; a pair (tuple or list of two batches) as a tuple.

    A list of Python strings is a batch of single texts; a tuple or list of two
    non-string sequences is a pair (texts, text_pairs) or, when the second is
    2-D, (texts, choices).
    """
    if isinstance(x, (tuple, list)) and len(x) == 2 and not any(isinstance(e, (str, bytes)) for e in x):
        return tuple(_as_string_tensor(e) for e in x)
    return _as_string_tensor(x)


def _as_string_tensor(x):
    if isinstance(x, (tf.Tensor, tf.RaggedTensor)):
        return x
    if isinstance(x, (list, tuple, np.ndarray)) and len(x) == 0:
        raise ValueError("The batch of texts is empty. Received: 0 texts")
    try:
        return tf.convert_to_tensor(x)
    except (ValueError, TypeError) as e:
        raise ValueError(f"Texts must be strings (a batch of shape (batch,)). Received: {x!r:.200}") from e


@contextlib.contextmanager
def text_errors_as_value_errors():
    """Re-raises the in-graph text checks' InvalidArgumentError as ValueError (same message)."""
    try:
        yield
    except tf.errors.InvalidArgumentError as e:
        if any(marker in e.message for marker in _TEXT_ERRORS):
            raise ValueError(e.message) from e
        raise


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertPreprocessor(keras.layers.Layer):
    """Tokenizes and packs raw strings in-graph, exactly as the `serve_text` signature.

    One text becomes `[CLS] A [SEP]`, a pair `[CLS] A [SEP] B [SEP]` (segment
    ids 0, then 1), truncated as BERT's `truncate_seq_pair` to
    `sequence_length` tokens and padded to the longest row of the batch, or to
    `sequence_length` with `pad_to_sequence_length=True` (fixed shapes: TPU,
    TFLite). A (texts, choices) pair with 2-D choices packs every
    (text, choice) for multiple choice.

    Args:
        tokenizer: an `AlbertTokenizer`; its SentencePiece model and
            preprocessing are part of the layer's config.
        sequence_length: longest packed sequence, special tokens included;
            None: `DEFAULT_SEQUENCE_LENGTH` (512). A task model refuses a
            length above its `max_position_embeddings`.
        pad_to_sequence_length: pad every batch to `sequence_length`.
        max_first_length: cut text A to this many pieces and give text B the
            rest instead of `truncate_seq_pair` (question answering: the
            question, then the context).
        truncate_from: which pieces of a too-long text go: "end" (BERT's),
            "start" (keep its end) or "middle" (keep its first quarter and its
            end); `input_pipeline.packing.keep_pieces`.

    Call arguments:
        x: tf.string (batch,) texts; or a tuple (texts, text_pairs) of two
            (batch,) string tensors; or (texts (batch,), choices (batch, C)).
            Python lists and numpy arrays of str are accepted.

    Returns:
        dict of int32 tensors token_ids, segment_ids, padding_mask, each
        (batch, seq), or (batch, C, seq) for choices.
    """

    def __init__(self, tokenizer, sequence_length=None, pad_to_sequence_length=False,
                 max_first_length=None, truncate_from="end", **kwargs):
        if not isinstance(tokenizer, AlbertTokenizer):
            raise ValueError(f"`tokenizer` must be an AlbertTokenizer. Received: {type(tokenizer).__name__}")
        if sequence_length is not None and (
            isinstance(sequence_length, bool) or not isinstance(sequence_length, int) or sequence_length < 3
        ):
            # 3: [CLS] A [SEP] with one piece; pairs need 5, checked when packing.
            raise ValueError(
                f"`sequence_length` must be None or an integer >= 3. Received: sequence_length={sequence_length!r}"
            )
        if pad_to_sequence_length and sequence_length is None:
            raise ValueError(
                "`pad_to_sequence_length=True` needs a `sequence_length` to pad to. "
                "Received: sequence_length=None"
            )
        if max_first_length is not None and (
            isinstance(max_first_length, bool) or not isinstance(max_first_length, int) or max_first_length < 1
        ):
            raise ValueError(f"`max_first_length` must be a positive integer. Received: {max_first_length!r}")
        check_truncate_from(truncate_from)
        super().__init__(**kwargs)
        # Strings are not Keras tensors: let them reach `call` unconverted.
        self._convert_input_args = False
        self._allow_non_tensor_positional_args = True
        self.tokenizer = tokenizer
        self.sequence_length = sequence_length
        self.pad_to_sequence_length = bool(pad_to_sequence_length)
        self.max_first_length = max_first_length
        self.truncate_from = truncate_from
        self.built = True

    @property
    def max_length(self):
        """The longest packed sequence this layer produces."""
        return self.sequence_length or DEFAULT_SEQUENCE_LENGTH

    def call(self, x):
        x = as_text_structure(x)
        texts, pairs = x if isinstance(x, tuple) else (x, None)
        _check_texts(texts, "texts", rank=1)
        choices = pairs is not None and pairs.shape.rank == 2
        if pairs is not None:
            _check_texts(pairs, "text_pairs", rank=2 if choices else 1)
            if None not in (texts.shape[0], pairs.shape[0]) and texts.shape[0] != pairs.shape[0]:
                raise ValueError(
                    "`texts` and `text_pairs` must hold the same number of rows. "
                    f"Received: {texts.shape[0]} and {pairs.shape[0]}"
                )
        with text_errors_as_value_errors() if tf.executing_eagerly() else contextlib.nullcontext():
            if choices:
                packed = text_inputs.tf_pack_choices(self.tokenizer, texts, pairs, self.max_length)
            else:
                packed = text_inputs.tf_pack_texts(
                    self.tokenizer, texts, pairs, self.max_length, self.max_first_length, self.truncate_from
                )
        if self.pad_to_sequence_length:
            packed = {name: self._pad(value) for name, value in packed.items()}
        return packed

    def _pad(self, value):
        """Pads the last (sequence) axis to `sequence_length`; PAD_ID, segment 0 and mask 0 are all 0."""
        rank = value.shape.rank
        padding = [[0, 0]] * (rank - 1) + [[0, self.sequence_length - tf.shape(value)[-1]]]
        padded = tf.pad(value, padding)
        padded.set_shape(value.shape[:-1].concatenate([self.sequence_length]))
        return padded

    def get_config(self):
        return {
            **super().get_config(),
            "tokenizer": tokenizer_config(self.tokenizer),
            "sequence_length": self.sequence_length,
            "pad_to_sequence_length": self.pad_to_sequence_length,
            "max_first_length": self.max_first_length,
            "truncate_from": self.truncate_from,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["tokenizer"] = tokenizer_from_config(config["tokenizer"])
        return cls(**config)


def tokenizer_config(tokenizer):
    """An `AlbertTokenizer` as JSON-able values: the SentencePiece model in base64."""
    return {
        "model_proto": base64.b64encode(tokenizer.model_proto).decode("ascii"),
        "language": tokenizer.language,
        "preprocessing": dataclasses.asdict(tokenizer.preprocessing),
    }


def tokenizer_from_config(config):
    """Inverse of `tokenizer_config`."""
    if isinstance(config, AlbertTokenizer):
        return config
    return AlbertTokenizer(
        base64.b64decode(config["model_proto"]),
        Preprocessing.from_config(config["preprocessing"], config["language"]),
        config["language"],
    )


def _check_texts(texts, name, rank):
    if texts.dtype != tf.string:
        raise ValueError(f"`{name}` must be strings. Received dtype {texts.dtype.name}")
    if texts.shape.rank is not None and texts.shape.rank != rank:
        raise ValueError(
            f"`{name}` must have rank {rank} (a batch of {'texts' if rank == 1 else 'choices per text'}). "
            f"Received shape {texts.shape}"
        )
