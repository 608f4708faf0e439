"""HuggingFace transformers directories <-> albert-tf directories.

`convert_from_hf` writes the albert-tf directory of a HF `save_pretrained`
directory of AlbertModel, AlbertForPreTraining or AlbertForMaskedLM (read by
`albert_tf.hf_checkpoint`, loaded by `albert_tf.loading.load_hf`).
`to_hf` / `convert_to_hf` write one that `AlbertForPreTraining.from_pretrained`
(or `AlbertModel.from_pretrained`, for a backbone; `AlbertForSequenceClassification`,
for a classifier, regressor or multilabel model pooled on [CLS]) loads with no missing or unexpected keys, with the
safetensors numpy API.

The tokenizer goes along both ways: `spiece.model` plus a
tokenizer_config.json whose AlbertTokenizer options (`remove_space`,
`keep_accents`, `do_lower_case`) are our `Preprocessing` (whitespace
collapse, accent stripping, lowercasing), so `AutoTokenizer.from_pretrained`
encodes text as `AlbertTokenizer.encode` does.
"""

import dataclasses
import json
import os

import keras
import numpy as np
from safetensors.numpy import save

from albert_tf.hf_checkpoint import BACKBONE_PREFIX
from albert_tf.hub import write_source
from albert_tf.model_dirs import (
    CONFIG_FILE, ENTRY_FILES, SAFETENSORS_FILE, SPECIAL_TOKENS_FILE, TOKENIZER_CONFIG_FILE, TOKENIZER_DIR, hf_tokenizer,
)
from albert_tf.models import (
    AlbertBackbone, AlbertClassifier, AlbertMultiLabelClassifier, AlbertPretrainer, AlbertRegressor, checkpoint_weights,
)
from albert_tf.models.pretrained import save_pretrained
from albert_tf.loading import load_hf, load_pretrained
from input_pipeline.tokenizer import CLS_PIECE, MASK_PIECE, PAD_PIECE, SEP_PIECE, UNK_PIECE
from albert_tf.utils import files
from albert_tf.utils.errors import UserError
from input_pipeline.tokenizer import MODEL_FILE as SPIECE_FILE


def from_hf(src_dir):
    """Builds the model held by a HF `save_pretrained` directory.

    Returns:
        An `AlbertPretrainer` for AlbertForPreTraining / AlbertForMaskedLM
        sources, an `AlbertBackbone` for AlbertModel. AlbertForMaskedLM has
        no pooler and no SOP head: those are newly initialized (listed by
        `load_hf`).

    Raises:
        ValueError: unreadable files, or tensors that do not match the config
            (listing every difference).
    """
    return load_hf(src_dir).model


def convert_from_hf(src_dir, out_dir, overwrite=False, source=None):
    """Converts a HF directory to an albert-tf pretrained directory (`save_pretrained`).

    Its `spiece.model`, when present, becomes `out_dir/tokenizer`. `source`
    (an `albert_tf.hub.ResolvedModel`) is recorded in `out_dir` when the
    directory came from a hub.
    Everything is read and checked before `out_dir` is created; a non-empty
    `out_dir` is refused unless `overwrite`.

    Returns:
        A `checkpoint_weights.ConversionReport`.
    """
    with files.publish_output(out_dir, overwrite, ENTRY_FILES, "out_dir") as staging:
        report = load_hf(src_dir)
        tokenizer = hf_tokenizer(src_dir)
        save_pretrained(report.model, staging)
        if tokenizer is not None:
            tokenizer.save(os.path.join(staging, TOKENIZER_DIR))
        if source is not None:
            write_source(source, staging)
    return report


def hf_tokenizer_files(tokenizer, max_length):
    """{file name: content} of a HF AlbertTokenizer matching `tokenizer`."""
    special = {"bos_token": CLS_PIECE, "eos_token": SEP_PIECE, "unk_token": UNK_PIECE, "sep_token": SEP_PIECE,
               "pad_token": PAD_PIECE, "cls_token": CLS_PIECE, "mask_token": MASK_PIECE}
    preprocessing = tokenizer.preprocessing
    config = {
        "tokenizer_class": "AlbertTokenizer",
        "remove_space": preprocessing.collapse_whitespace,
        "keep_accents": not preprocessing.strip_accents,
        "do_lower_case": preprocessing.lower_case,
        "model_max_length": max_length,
        **special,
    }
    return {
        SPIECE_FILE: tokenizer.standalone_model_proto(),  # the preprocessing built in, for bare runtimes
        TOKENIZER_CONFIG_FILE: (json.dumps(config, indent=2, sort_keys=True) + "\n").encode(),
        SPECIAL_TOKENS_FILE: (json.dumps(special, indent=2, sort_keys=True) + "\n").encode(),
    }


# transformers' `problem_type` of each model that converts to AlbertForSequenceClassification.
_PROBLEM_TYPES = {
    AlbertClassifier: "single_label_classification",
    AlbertRegressor: "regression",
    AlbertMultiLabelClassifier: "multi_label_classification",
}


def hf_architecture(model):
    """The transformers class `model` converts to.

    Returns:
        "AlbertModel" for an `AlbertBackbone`, "AlbertForPreTraining" for an
        `AlbertPretrainer`, "AlbertForSequenceClassification" for a
        classifier, regressor or multilabel model pooled on [CLS].

    Raises:
        UserError: another task model, or one that pools the mean token
            (HF's head reads the pooled [CLS] vector).
    """
    if isinstance(model, AlbertPretrainer):
        return "AlbertForPreTraining"
    if isinstance(model, AlbertBackbone):
        return "AlbertModel"
    if type(model) not in _PROBLEM_TYPES:
        raise UserError(f"The model is an {type(model).__name__}: convert --to hf takes a backbone or a pretraining "
                        "run, or a classification, regression or multilabel run pooled on [CLS] (--pooling cls).")
    if model.pooling != "cls":
        raise UserError(f"HF's AlbertForSequenceClassification reads the pooled [CLS] vector; this model pools "
                        f"{model.pooling!r}. Fine-tune with --pooling cls to convert it.")
    return "AlbertForSequenceClassification"


def hf_kind(model):
    """What `model` converts to, for messages: its transformers class, and the problem type of a sequence head."""
    architecture = hf_architecture(model)
    problem = _PROBLEM_TYPES.get(type(model))
    return architecture if problem is None else f"{architecture} ({problem})"


def hf_tensors(model):
    """`model`'s weights as HF names them -> float32 numpy arrays (HF layout).

    HF's AlbertModel always has the E -> H projection and all G groups, each
    picked by HF's formula: a backbone without the projection gets an
    identity kernel and a zero bias (the same function), and each HF group
    holds the weights of the group those layers use here
    (`checkpoint_weights.hf_group_sources`). A sequence head becomes HF's
    `classifier` Linear.

    Raises:
        ValueError: partial sharing, or a grouping HF cannot express.
        UserError: a model with no HF form (`hf_architecture`).
    """
    architecture = hf_architecture(model)
    backbone = getattr(model, "backbone", model)
    sequence_head = architecture == "AlbertForSequenceClassification"
    prefix = "" if architecture == "AlbertModel" else BACKBONE_PREFIX
    scheme = checkpoint_weights.hf_scheme(prefix)
    entries = checkpoint_weights.weight_entries(backbone if sequence_head else model)
    sources = checkpoint_weights.hf_group_sources(backbone.config)
    tensors = {}
    for e in entries:
        # float32 whatever the variable dtype: what HF checkpoints hold by default.
        value = np.asarray(keras.ops.convert_to_numpy(e.variable), dtype=np.float32)
        value = np.ascontiguousarray(value.T if scheme.transposed(e) else value)
        if e.group is None:
            tensors[scheme.name_of(e)] = value
            continue
        for hf_group, group in sources.items():
            if group == e.group:
                tensors[scheme.name_of(dataclasses.replace(e, hf=e.hf_in_group.format(group=hf_group)))] = value
    if backbone.embedding_projection is None:
        hidden = backbone.config.hidden_size
        name = prefix + checkpoint_weights.HF_PROJECTION
        tensors[name + ".weight"] = np.eye(hidden, dtype=np.float32)
        tensors[name + ".bias"] = np.zeros(hidden, np.float32)
    if sequence_head:
        kernel, bias = (np.asarray(keras.ops.convert_to_numpy(v), np.float32) for v in model.head.weights)
        tensors["classifier.weight"] = np.ascontiguousarray(kernel.T)  # torch Linear: (labels, H)
        tensors["classifier.bias"] = bias
    return tensors


def hf_config(model):
    """The HF config.json dict for `model` (raises as `hf_architecture`)."""
    architecture = hf_architecture(model)
    backbone = getattr(model, "backbone", model)
    values = backbone.config.to_dict()
    values.pop("sharing")  # always "all" here (checked by `weight_entries`); not an HF field
    # Not HF fields either: the HF model has the projection (`hf_tensors`) and groups by HF's formula.
    values.pop("embedding_projection", None)
    values.pop("group_formula", None)
    values["architectures"] = [architecture]
    if architecture == "AlbertForSequenceClassification":
        values.update(_sequence_head_config(model))
    return values


def _sequence_head_config(model):
    """The config.json fields of a classifier, regressor or multilabel model as AlbertForSequenceClassification.

    transformers picks the loss (and its pipeline the activation) by
    `problem_type`: cross-entropy and a softmax for single-label, MSE and
    the raw score for regression, BCE-with-logits and a sigmoid for
    multi-label. `num_labels` follows from `id2label`.
    """
    names = model.label_names or [f"LABEL_{i}" for i in range(model.head.units)]  # transformers' own default names
    values = {
        "problem_type": _PROBLEM_TYPES[type(model)],
        "id2label": {str(i): name for i, name in enumerate(names)},
        "label2id": {name: i for i, name in enumerate(names)},
        "classifier_dropout_prob": model.dropout,
    }
    if isinstance(model, AlbertMultiLabelClassifier):
        # Not read by transformers: albert-tf's per-label decision thresholds, for the user's own code.
        values["label_thresholds"] = dict(zip(names, model.thresholds))
    return values


def to_hf(model, out_dir, tokenizer=None, overwrite=False, source=None):
    """Writes `model` as a HF `save_pretrained` directory (config.json + model.safetensors).

    An `AlbertPretrainer` becomes AlbertForPreTraining, an `AlbertBackbone`
    AlbertModel, a classifier, regressor or multilabel model pooled on [CLS]
    AlbertForSequenceClassification (`hf_architecture`). The tied decoder is not written, as transformers' own
    `save_pretrained` does not write it. With `tokenizer`, its spiece.model
    and a matching tokenizer_config.json are written too; with `source` (an
    `albert_tf.hub.ResolvedModel`), the hub model it came from.

    Raises:
        ValueError: for partial sharing (no HF equivalent), another model
            type (a `UserError`, as `hf_architecture`), or a non-empty `out_dir` without `overwrite`; nothing is
            written then.
    """
    with files.publish_output(out_dir, overwrite, ENTRY_FILES, "out_dir") as staging:
        tensors = hf_tensors(model)
        config = hf_config(model)
        tokenizer_files = {} if tokenizer is None else hf_tokenizer_files(tokenizer, config["max_position_embeddings"])
        files.write_text(os.path.join(staging, CONFIG_FILE), json.dumps(config, indent=2, sort_keys=True) + "\n")
        # transformers refuses safetensors files without a known "format".
        files.write_bytes(os.path.join(staging, SAFETENSORS_FILE), save(tensors, metadata={"format": "pt"}))
        for name, content in tokenizer_files.items():
            files.write_bytes(os.path.join(staging, name), content)
        if source is not None:
            write_source(source, staging)


def convert_to_hf(src_dir, out_dir, tokenizer=None, overwrite=False, source=None):
    """Converts an albert-tf pretrained directory to a HF directory; returns the model.

    `tokenizer` (an `AlbertTokenizer`) is written along when given; `source` as in `to_hf`.
    """
    with files.publish_output(out_dir, overwrite, ENTRY_FILES, "out_dir") as staging:
        model = load_pretrained(src_dir)
        # Written plainly into the staging directory.
        to_hf(model, staging, tokenizer, source=source)
    return model
