"""`AlbertTask`: what every fine-tuning model shares.

A task model is a functional `keras.Model` built on an `AlbertBackbone`. It
owns its loss (so `compile(optimizer=...)` then `fit` is enough), its metrics,
`label_names` for exports, and a config that rebuilds it from JSON alone.
Subclasses build their graph in `__init__`, call `_init_task`, and define
`task_loss` and `update_task_metrics`.

With a `preprocessor` (an `AlbertPreprocessor`), `fit`, `evaluate` and
`predict` also take raw strings, as keras-hub's tasks do: in-memory texts are
sliced and batched with tf.data, and the preprocessor is mapped over the
batches (also over a tf.data.Dataset of strings). The functional graph stays
on token ids, so id inputs still work and exports are unchanged.
"""

import contextlib
import warnings

import keras
from keras import ops

from albert_tf.model_dirs import find_tokenizer
from albert_tf.models.backbone import AlbertBackbone
from albert_tf.models.pretrained import (
    PretrainedMixin, load_converted_dir, load_saved_model, open_model_dir, warn_newly_initialized,
)
from albert_tf.models.quantization import TFLiteQuantizationOnly
from albert_tf.models.retracing import RetracesOnNewVariables
from albert_tf.utils.errors import UserError

# Batch size of in-memory texts when `batch_size` is not given (Keras' default).
DEFAULT_BATCH_SIZE = 32


def _share_of_replicas(loss):
    """This replica's share of the loss: Keras sums the replicas' gradients.

    `fit` under a `tf.distribute` strategy expects `compute_loss` to return
    loss / num_replicas (its built-in losses do the same), so the summed
    gradient is that of the mean over replicas; its loss metric scales back.
    """
    if keras.backend.backend() != "tensorflow":
        return loss
    # Imported here because model code must also run on the JAX backend, where
    # TensorFlow's distribution strategies play no part.
    import tensorflow as tf

    replicas = tf.distribute.get_strategy().num_replicas_in_sync
    return loss if replicas == 1 else loss * (1.0 / replicas)


def _preprocessing():
    # Imported on use: the preprocessor is TensorFlow code (tf.data, tensorflow-text),
    # and the models themselves also run on JAX without it.
    from albert_tf import preprocessor

    return preprocessor


class AlbertTask(RetracesOnNewVariables, TFLiteQuantizationOnly, PretrainedMixin, keras.Model):
    """Base of the task models: loss, metrics, config, the backbone and the preprocessor.

    Every subclass sets the class attribute `export_kind` (one of
    `albert_tf.export.signatures.KINDS`): it says which post-processing the
    exported signatures add. A model without one cannot be exported.
    `text_labels_reason` is None when labels for raw text make sense, else why
    `fit` / `evaluate` refuse raw strings (labels that need the token layout).
    """

    text_labels_reason = None
    # Whether the MLM and SOP heads of a pretraining checkpoint (HF, TF1) load into this class.
    loads_pretraining_heads = False

    def _init_task(self, backbone, label_names, task_metrics, preprocessor=None, **task_config):
        self.backbone = backbone
        self.label_names = label_names
        self._task_metrics = list(task_metrics)
        # Constructor arguments other than backbone/preprocessor/name/trainable, for get_config.
        self._task_config = dict(task_config, label_names=label_names)
        self.preprocessor = preprocessor

    @property
    def config(self):
        return self.backbone.config

    @property
    def preprocessor(self):
        """The `AlbertPreprocessor` that turns raw strings into this model's inputs, or None."""
        return getattr(self, "_preprocessor", None)

    @preprocessor.setter
    def preprocessor(self, preprocessor):
        if preprocessor is not None:
            if not isinstance(preprocessor, _preprocessing().AlbertPreprocessor):
                raise ValueError(
                    f"`preprocessor` must be an AlbertPreprocessor or None. Received: {type(preprocessor).__name__}"
                )
            preprocessor.tokenizer.check_vocab_size(self.config.vocab_size)
            limit = self.config.max_position_embeddings
            if preprocessor.max_length > limit:
                raise ValueError(
                    f"The preprocessor packs up to {preprocessor.max_length} tokens "
                    f"(sequence_length={preprocessor.sequence_length}) but the backbone has "
                    f"max_position_embeddings={limit}. Pass sequence_length<={limit}."
                )
        self._preprocessor = preprocessor

    # ---- raw text in fit / evaluate / predict ---------------------------------------

    def __call__(self, *args, **kwargs):
        inputs = args[0] if args else kwargs.get("inputs")
        if not isinstance(inputs, dict) and _preprocessing().is_text(inputs):
            raise ValueError(
                f"Calling {type(self).__name__} on strings does not preprocess them: the model "
                "takes token ids. Use `predict`, `fit` or `evaluate` (they apply the preprocessor), "
                "or call `model(model.preprocessor(texts))`."
            )
        return super().__call__(*args, **kwargs)

    # Arguments after `batch_size` are keyword-only: Keras' positional order
    # (epochs, verbose, ...) differs from these overrides'.
    def fit(self, x=None, y=None, batch_size=None, *, sample_weight=None, validation_data=None,
            validation_split=0.0, shuffle=True, **kwargs):
        text = self._takes_text(x, training=True)
        if text:
            if validation_split:
                raise ValueError(
                    "`validation_split` is not supported with raw text; pass `validation_data`. "
                    f"Received: validation_split={validation_split}"
                )
            x = self._text_dataset(x, y, sample_weight, batch_size, shuffle=shuffle)
            y = sample_weight = batch_size = None
            shuffle = False  # done by the dataset; Keras would warn that it ignores it
        if validation_data is not None:
            vx, vy, vsw = _unpack_validation(validation_data)
            if self._takes_text(vx, training=True):
                text = True
                validation_batch_size = kwargs.pop("validation_batch_size", None) or batch_size
                validation_data = self._text_dataset(vx, vy, vsw, validation_batch_size)
        with _text_errors(text), warnings.catch_warnings():
            # Heads that read the sequence output (mean pooling, tags, spans)
            # leave the pooler without a gradient by design; Keras would warn
            # about exactly those two variables in every user's fit.
            warnings.filterwarnings("ignore", message=POOLER_WITHOUT_GRADIENT)
            return super().fit(
                x, y, batch_size=batch_size, sample_weight=sample_weight,
                validation_data=validation_data, validation_split=validation_split,
                shuffle=shuffle, **kwargs,
            )

    def make_train_function(self, force=False):
        """Keras' train function (`fit`, `train_on_batch`), with the compiled optimizer's variables made first.

        Keras on TensorFlow without a distribution strategy makes them inside
        the first trace of the train step, and a `tf.function` whose first
        trace made variables is traced again: two traces of the forward pass,
        the gradient and the update before the first step (a tiny classifier's
        `fit` took 3.1 to 4.2 s of CPU with them, 1.6 to 2.1 s with one).
        Under a strategy Keras makes them first itself.
        """
        optimizer = getattr(self, "optimizer", None)
        if optimizer is not None and not optimizer.built:
            strategy = getattr(self, "distribute_strategy", None)  # TensorFlow's trainer only
            with strategy.scope() if strategy is not None else contextlib.nullcontext():
                optimizer.build(self.trainable_variables)
        return super().make_train_function(force)

    def evaluate(self, x=None, y=None, batch_size=None, *, sample_weight=None, **kwargs):
        text = self._takes_text(x, training=True)
        if text:
            x = self._text_dataset(x, y, sample_weight, batch_size)
            y = sample_weight = batch_size = None
        with _text_errors(text):
            return super().evaluate(x, y, batch_size=batch_size, sample_weight=sample_weight, **kwargs)

    def predict(self, x, batch_size=None, **kwargs):
        text = self._takes_text(x, training=False)
        if text:
            x = self._text_dataset(x, None, None, batch_size)
            batch_size = None
        with _text_errors(text):
            return super().predict(x, batch_size=batch_size, **kwargs)

    def _takes_text(self, x, training):
        """Whether `x` is raw text (ValueError when this model cannot take it)."""
        if isinstance(x, dict) or x is None:  # token ids: the graph's own inputs
            return False
        import tensorflow as tf

        spec = x.element_spec if isinstance(x, tf.data.Dataset) else x
        if isinstance(spec, tuple) and isinstance(x, tf.data.Dataset):
            spec = spec[0]  # (x, y, ...): only x may be text
        if isinstance(spec, dict) or not _preprocessing().is_text(spec):
            return False
        if self.preprocessor is None:
            raise ValueError(
                f"{type(self).__name__} received raw strings but has no preprocessor. Pass "
                "`preprocessor=AlbertPreprocessor(tokenizer)` or load with `from_pretrained`."
            )
        if training and self.text_labels_reason:
            raise ValueError(
                f"{type(self).__name__} cannot train or evaluate on raw strings: "
                f"{self.text_labels_reason} `predict` takes raw strings."
            )
        return True

    def _text_dataset(self, x, y, sample_weight, batch_size, shuffle=False):
        """Batches of (inputs, y, sample_weight): in-memory texts batched, then the preprocessor mapped.

        A tf.data.Dataset must already be batched, with elements `x`, `(x,)`,
        `(x, y)` or `(x, y, sample_weight)`; a pair of texts without labels is
        `((texts, text_pairs),)`.
        """
        import tensorflow as tf

        text = _preprocessing()
        if isinstance(x, tf.data.Dataset):
            if y is not None or sample_weight is not None or batch_size is not None:
                raise ValueError(
                    "With a tf.data.Dataset, labels and weights come from the dataset and it is "
                    "already batched: pass no `y`, `sample_weight` or `batch_size`."
                )
            dataset = x
        else:
            data = keras.utils.pack_x_y_sample_weight(text.as_text_structure(x), y, sample_weight)
            dataset = tf.data.Dataset.from_tensor_slices(data)
            if shuffle:
                dataset = dataset.shuffle(dataset.cardinality(), reshuffle_each_iteration=True)
            dataset = dataset.batch(batch_size or DEFAULT_BATCH_SIZE)

        # tf.data passes an element's components as arguments: `x` (a text pair
        # is one component, a tuple), then `y` and `sample_weight` if present.
        def preprocess(x, y=None, sample_weight=None):
            return keras.utils.pack_x_y_sample_weight(self.preprocessor(x), y, sample_weight)

        return dataset.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)

    def task_loss(self, y, y_pred, sample_weight=None, x=None):
        raise NotImplementedError

    def update_task_metrics(self, y, y_pred, sample_weight=None, x=None):
        raise NotImplementedError

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        if y is None:
            raise ValueError(
                f"{type(self).__name__} needs labels to compute its loss. Received: y=None"
            )
        loss = self.task_loss(y, y_pred, sample_weight, x)
        # Regularisation losses added by layers, if any.
        for extra in self.losses:
            loss = loss + ops.cast(extra, "float32")
        return _share_of_replicas(loss)

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        self.update_task_metrics(y, y_pred, sample_weight, x)
        return self.get_metrics_result()

    @property
    def metrics(self):
        tracked = [self._loss_tracker] if getattr(self, "_loss_tracker", None) else []
        return tracked + list(getattr(self, "_task_metrics", ()))

    def get_config(self):
        preprocessor = self.preprocessor
        return {
            "backbone": keras.saving.serialize_keras_object(self.backbone),
            **self._task_config,
            "preprocessor": keras.saving.serialize_keras_object(preprocessor) if preprocessor else None,
            "name": self.name,
            "trainable": self.trainable,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["backbone"] = keras.saving.deserialize_keras_object(config["backbone"])
        if config.get("preprocessor") is not None:
            _preprocessing()  # registers AlbertPreprocessor for deserialization
            config["preprocessor"] = keras.saving.deserialize_keras_object(config["preprocessor"])
        return cls(**config)

    @classmethod
    def from_pretrained(cls, directory, **task_kwargs):
        """This task on the model saved in `directory`, with the directory's tokenizer.

        `directory` is a model directory, a run directory (its `best/` or
        `final/`), or a hub handle (`hf://albert/albert-base-v2`; see
        `albert_tf.hub`). When it holds this task class, that model is loaded as
        saved (`task_kwargs` must agree with its config). Otherwise (a
        pretrainer, a backbone, another task) this task is built on its
        backbone with a new head from `task_kwargs` (e.g. `num_classes=2`).
        Unless the model already has one, or `preprocessor=` is given, the
        directory's tokenizer (`albert_tf.model_dirs.find_tokenizer`) is
        attached as an `AlbertPreprocessor` truncating at
        min(512, max_position_embeddings).

        Returns:
            An instance of this class.
        """
        model_dir = open_model_dir(directory)
        if model_dir.converts_on_load:
            # A HF checkpoint's pretraining heads load into a class that has them.
            def build(config, has_heads):
                backbone = AlbertBackbone(config)
                return cls(backbone) if has_heads and cls.loads_pretraining_heads else backbone

            report = load_converted_dir(model_dir, build)
            warn_newly_initialized(model_dir.path, report)
            model = report.model
        else:
            model = load_saved_model(model_dir)
        preprocessor = task_kwargs.pop("preprocessor", None)
        if isinstance(model, cls):
            _check_same_task(model, task_kwargs, directory)
        else:
            backbone = model if isinstance(model, AlbertBackbone) else getattr(model, "backbone", None)
            if not isinstance(backbone, AlbertBackbone):
                raise UserError(f"{directory} holds a {type(model).__name__}, which has no AlbertBackbone.")
            preprocessor = preprocessor or getattr(model, "preprocessor", None)
            model = cls(backbone, **task_kwargs)
        if preprocessor is not None:
            model.preprocessor = preprocessor
        elif model.preprocessor is None:
            tokenizer = find_tokenizer(model_dir, required=False)
            if tokenizer is not None:
                model.preprocessor = model.default_preprocessor(tokenizer)
        return model

    def default_preprocessor(self, tokenizer):
        """An `AlbertPreprocessor` of `tokenizer` packing at most min(512, max_position_embeddings)."""
        text = _preprocessing()
        length = min(text.DEFAULT_SEQUENCE_LENGTH, self.config.max_position_embeddings)
        return text.AlbertPreprocessor(tokenizer, sequence_length=length)


def _check_same_task(model, task_kwargs, directory):
    config = model.get_config()
    differ = {k: v for k, v in task_kwargs.items() if k not in config or config[k] != v}
    if differ:
        raise ValueError(
            f"{directory} holds a {type(model).__name__} whose config differs from {differ}; "
            f"it is loaded as saved. For a new head on its backbone use "
            f"`{type(model).__name__}(AlbertBackbone.from_pretrained(directory), ...)`."
        )


POOLER_WITHOUT_GRADIENT = r"Gradients do not exist for variables \['pooler/kernel', 'pooler/bias'\]"


def _text_errors(text):
    """The in-graph text checks' errors as ValueErrors, when the data is raw text."""
    return _preprocessing().text_errors_as_value_errors() if text else contextlib.nullcontext()


def _unpack_validation(validation_data):
    """(x, y, sample_weight) of `fit`'s validation_data: a dataset or a tuple."""
    import tensorflow as tf

    if isinstance(validation_data, tf.data.Dataset):
        return validation_data, None, None
    return keras.utils.unpack_x_y_sample_weight(tuple(validation_data))
