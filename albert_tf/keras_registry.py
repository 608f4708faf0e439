"""`import albert_tf` is enough for `keras.models.load_model` to find albert-tf's classes.

A `.keras` archive names each class by its registered name
("albert_tf>AlbertClassifier") and module. Keras 3 looks the name up in its
registry of custom objects, which `register_keras_serializable` fills when the
defining module is imported; it imports a module by itself only for its own
packages (keras, keras_hub, keras_cv, keras_nlp: see `_retrieve_class_or_fn` in
keras/src/saving/serialization_lib.py), and it reads no plugin entry points.
So a third-party package's archive loads only in a process that registered its
classes.

`import albert_tf` must not load Keras (the CLI and data workers start without
TensorFlow), so it registers, once Keras is imported, one stand-in per name:
the stand-in's `from_config` imports the modules that define the classes
(their decorators then replace every stand-in with the real class) and hands
the config to the real class. "Once Keras is imported" needs an import hook:
Python gives no other notice of a module's import (post-import hooks, PEP 369,
were withdrawn). The hook is a `sys.meta_path` finder that wraps the loader of
Keras' spec; wrapt's `register_post_import_hook` does the same, and importing
wrapt would cost `import albert_tf` tens of milliseconds.
"""

import importlib
import importlib.util
import sys

PACKAGE = "albert_tf"

# Every class albert-tf registers with Keras (tests/models/test_keras_archives.py keeps this in step).
SERIALIZABLE = (
    "AdamW", "AlbertBackbone", "AlbertClassifier", "AlbertEmbedding", "AlbertMultiLabelClassifier", "AlbertMultipleChoice", "AlbertPreprocessor",
    "AlbertPretrainer", "AlbertQuestionAnswerer", "AlbertRegressor", "AlbertTagger", "FeedForward", "FoldChoices",
    "Lamb", "LoraDense", "LoraEmbedding", "MaskedLMHead", "SelfAttention", "SentenceOrderHead", "TransformerBlock",
    "UnfoldChoices", "WarmupLinearDecay",
)

# Importing these runs every `register_keras_serializable` decorator of the package.
DEFINING_MODULES = ("albert_tf.models", "albert_tf.preprocessor", "albert_tf.optimizers")


def register_when_keras_loads():
    """Registers the stand-ins now if Keras is loaded, else right after it is."""
    keras = sys.modules.get("keras")
    if keras is not None:
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
    """Finds nothing itself: hands on Keras' own spec with a loader that registers the stand-ins after Keras ran.

    It changes no object of Keras' or of the import system's (the spec is the
    one found for this import) and leaves `sys.meta_path` once Keras has run:
    a spec asked for without an import (`importlib.util.find_spec("keras")`,
    as libraries probe for Keras) leaves it in place.
    """

    def __init__(self):
        self._finding = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "keras" or self._finding:
            return None
        self._finding = True  # the finders after this one find Keras' spec
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._finding = False
        if spec is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _ThenRegister(spec.loader, self)
        return spec


class _ThenRegister:
    """Keras' loader, then `_register_stand_ins`."""

    def __init__(self, loader, finder):
        self.loader = loader
        self.finder = finder

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        # Keras keeps its own loader (resource reads, reloads).
        module.__loader__ = module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        _register_stand_ins(module)
        if self.finder in sys.meta_path:
            sys.meta_path.remove(self.finder)
