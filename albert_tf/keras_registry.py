"""`import albert_tf` is enough for `keras.models.load_model` to find albert-tf's classes.

A `.keras` archive names each class by its registered name
("albert_tf>AlbertClassifier") and module. Keras 3 looks the name up in its
registry of custom objects, which `register_keras_serializable` fills when the
defining module is imported; it imports a module by itself only for its own
packages (keras, keras_hub, keras_cv, keras_nlp: see `_retrieve_class_or_fn` in
keras/src/saving/serialization_lib.py). So a third-party package's archive
loads only in a process that registered its classes.

`import albert_tf` must not load Keras (the CLI and data workers start in
milliseconds), so it registers, as soon as Keras is imported, one stand-in per
name: the stand-in's `from_config` imports the modules that define the classes
(their decorators then replace every stand-in with the real class) and hands
the config to the real class.
"""

import importlib
import sys

PACKAGE = "albert_tf"

# Every class albert-tf registers with Keras (tests/test_keras_archives.py keeps this in step).
SERIALIZABLE = (
    "AdamW", "AlbertBackbone", "AlbertClassifier", "AlbertEmbedding", "AlbertMultipleChoice", "AlbertPreprocessor",
    "AlbertPretrainer", "AlbertQuestionAnswerer", "AlbertRegressor", "AlbertTagger", "FeedForward", "FoldChoices",
    "Lamb", "LoraDense", "LoraEmbedding", "MaskedLMHead", "SelfAttention", "SentenceOrderHead", "TransformerBlock",
    "UnfoldChoices", "WarmupLinearDecay",
)

# Importing these runs every `register_keras_serializable` decorator of the package.
DEFINING_MODULES = ("albert_tf.models", "albert_tf.preprocessor", "albert_tf.optimizers")


def register_when_keras_loads():
    """Registers the stand-ins now if Keras is loaded, else right after it is."""
    keras = sys.modules.get("keras")
    if keras is not None and hasattr(keras, "saving"):
        _register_stand_ins(keras)
    elif not any(isinstance(finder, _AfterKerasLoads) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterKerasLoads())


def register_all():
    """Imports the modules that define the classes; their decorators register them with Keras."""
    for module in DEFINING_MODULES:
        importlib.import_module(module)


def _register_stand_ins(keras):
    registry = keras.saving.get_custom_objects()  # Keras' live registry
    for name in SERIALIZABLE:
        registry.setdefault(f"{PACKAGE}>{name}", _stand_in(name, keras))


def _stand_in(name, keras):
    registered_name = f"{PACKAGE}>{name}"

    def from_config(cls, config):
        register_all()
        # The global registry: a load's custom-object scope holds a copy with the stand-ins.
        real = keras.saving.get_custom_objects()[registered_name]
        if real is cls:
            raise TypeError(f"{registered_name} is not defined by {', '.join(DEFINING_MODULES)}.")
        return real.from_config(config)

    return type(name, (), {
        "__doc__": f"Stands in for {registered_name} until albert-tf's models are imported.",
        "__module__": __name__,
        "from_config": classmethod(from_config),
    })


class _AfterKerasLoads:
    """A `sys.meta_path` finder that runs `_register_stand_ins` once `import keras` has finished.

    It finds nothing itself: it asks the finders after it for Keras' spec and
    wraps that spec's loader's `exec_module`, then leaves `sys.meta_path`.
    """

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "keras":
            return None
        sys.meta_path.remove(self)
        for finder in sys.meta_path:
            spec = finder.find_spec(fullname, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            return spec

        def exec_then_register(module):
            exec_module(module)
            _register_stand_ins(module)

        loader.exec_module = exec_then_register  # this spec's own loader instance
        return spec
