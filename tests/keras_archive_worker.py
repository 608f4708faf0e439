"""Saves every albert-tf model as a `.keras` archive, or loads them in a fresh process.

    python tests/keras_archive_worker.py save DIR
    python tests/keras_archive_worker.py load DIR albert_tf_first|keras_first

`save` writes NAME.keras and NAME.npz (the inputs and the outputs) per model;
tests/models/test_keras_archives.py calls it in the test process.
`load` imports albert_tf and keras in the given order and nothing else of the
project, loads every archive with `keras.models.load_model`, and writes
DIR/loaded-ORDER.json: per model its class and the largest output difference.
"""

import json
import os
import sys


def _lora(backbone, embedding_rank=0):
    """LoRA on `backbone` with random B factors, so the factors change the outputs."""
    import numpy as np

    backbone.enable_lora(2, lora_alpha=4, embedding_rank=embedding_rank)
    rng = np.random.default_rng(7)
    for variable in backbone.weights:
        if "lora" in variable.path and variable.path.endswith("_b"):
            variable.assign(rng.normal(0.0, 0.2, variable.shape).astype("float32"))


def save(directory):
    import numpy as np

    from albert_tf import (
        AlbertBackbone, AlbertClassifier, AlbertMultiLabelClassifier, AlbertMultipleChoice, AlbertPretrainer,
        AlbertQuestionAnswerer, AlbertRegressor, AlbertTagger,
    )
    from albert_tf.optimizers import build_optimizer
    from data_fixtures import VOCAB_SIZE, small_tokenizer
    from helpers import backbone_batch, pretraining_batch, tiny_config

    config = tiny_config(vocab_size=VOCAB_SIZE)
    builds = {
        "AlbertBackbone": lambda b: b,
        "AlbertPretrainer": AlbertPretrainer,
        "AlbertClassifier": lambda b: AlbertClassifier(b, 3, label_names=["a", "b", "c"]),
        "AlbertRegressor": AlbertRegressor,
        "AlbertTagger": lambda b: AlbertTagger(b, 4),
        "AlbertQuestionAnswerer": AlbertQuestionAnswerer,
        "AlbertMultipleChoice": AlbertMultipleChoice,
        "AlbertMultiLabelClassifier": lambda b: AlbertMultiLabelClassifier(b, 3, thresholds=[0.2, 0.5, 0.7]),
    }
    for lora in (False, True):
        for name, build in builds.items():
            model = build(AlbertBackbone(config))
            backbone = model if name == "AlbertBackbone" else model.backbone
            if lora:
                _lora(backbone, embedding_rank=2)
            if name == "AlbertPretrainer":
                inputs = pretraining_batch(config)[0]
            elif name == "AlbertMultipleChoice":
                inputs = {k: v.reshape(2, 3, 12) for k, v in backbone_batch(config, batch=6).items()}
            else:
                inputs = backbone_batch(config)
            if name == "AlbertClassifier":  # the optimizer's classes travel in the compile config
                model.compile(optimizer=build_optimizer("adamw", learning_rate=1e-3, warmup_steps=1, total_steps=4,
                                                        weight_decay=0.01))
            outputs = model(inputs)
            outputs = outputs if isinstance(outputs, dict) else {"output": outputs}
            stem = os.path.join(directory, name + ("-lora" if lora else ""))
            model.save(stem + ".keras")
            np.savez(stem + ".npz", **{f"in/{k}": v for k, v in inputs.items()},
                     **{f"out/{k}": np.asarray(v) for k, v in outputs.items()})

    # The raw-text preprocessor attached by from_pretrained, with LoRA.
    pretrained = os.path.join(directory, "pretrained")
    AlbertBackbone(config).save_pretrained(os.path.join(pretrained, "final"))
    small_tokenizer().save(os.path.join(pretrained, "tokenizer"))
    model = AlbertClassifier.from_pretrained(os.path.join(pretrained, "final"), num_classes=2)
    assert model.preprocessor is not None
    _lora(model.backbone)
    texts = np.array(["a gorgeous, witty film", "flat and dull"])
    stem = os.path.join(directory, "AlbertClassifier-preprocessor")
    model.save(stem + ".keras")
    np.savez(stem + ".npz", texts=texts, **{"out/logits": model.predict(texts, verbose=0)["logits"]})


def load(directory, order):
    if order == "albert_tf_first":
        import importlib.util

        import albert_tf  # noqa: F401
        # Libraries probe for Keras this way (no import); the registration must survive it.
        assert importlib.util.find_spec("keras") is not None and "keras" not in sys.modules
        import keras
    else:
        import keras
        import albert_tf  # noqa: F401
    import numpy as np

    results = {"models_imported_before_load": "albert_tf.models" in sys.modules}
    for file in sorted(os.listdir(directory)):
        if not file.endswith(".keras"):
            continue
        stem = os.path.join(directory, file[: -len(".keras")])
        model = keras.models.load_model(stem + ".keras")
        saved = np.load(stem + ".npz")
        if "texts" in saved:
            outputs = model.predict(saved["texts"], verbose=0)
        else:
            outputs = model({k[3:]: saved[k] for k in saved if k.startswith("in/")})
        outputs = outputs if isinstance(outputs, dict) else {"output": outputs}
        diff = max(float(np.max(np.abs(np.asarray(outputs[k[4:]]) - saved[k]))) for k in saved if k.startswith("out/"))
        results[os.path.basename(stem)] = {
            "class": type(model).__name__, "diff": diff,
            "lora_rank": (model if hasattr(model, "lora_rank") else model.backbone).lora_rank,
            "optimizer": type(model.optimizer).__module__ + "." + type(model.optimizer).__name__
            if getattr(model, "optimizer", None) is not None else None,
            "preprocessor": getattr(model, "preprocessor", None) is not None,
        }
    results["registered"] = sorted(
        name for name, cls in keras.saving.get_custom_objects().items()
        if name.startswith("albert_tf>") and cls.__module__ != "albert_tf.keras_registry"
    )
    with open(os.path.join(directory, f"loaded-{order}.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    if sys.argv[1] == "save":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the tests' helpers
        save(sys.argv[2])
    else:
        load(sys.argv[2], sys.argv[3])
