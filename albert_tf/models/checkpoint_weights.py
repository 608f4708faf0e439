"""The one table from checkpoint tensors to this package's Keras variables.

Every weight of an `AlbertBackbone` / `AlbertPretrainer` gets one
`WeightEntry`: a canonical name, the Keras variable, and the names and layouts
it has in the original TF1 checkpoints and in HuggingFace transformers. Both
name schemes are derived here from one list of layers, so the readers
(`albert_tf.hf_checkpoint`, `albert_tf.convert.tf1`) only read files. The
models are recognised by their parts (`mlm_head`, `blocks`), not imported:
the models load checkpoints through this module.

Layouts: Keras `Dense` kernels are (in, out), as TF1 stores them; torch
`Linear` weights are (out, in), so HF kernels are transposed. The one TF1
exception is the SOP classifier, stored as `output_weights` (2, H).

Two structural differences between the sources are handled here too: a
backbone without the E -> H projection (the original's E == H models) has no
entry for it, and a group no layer uses (the original's formula, e.g.
L = G = 22) has no entries, as the original creates no variables for it.
"""

import dataclasses

import numpy as np

from albert_tf.utils.errors import UserError

# Parts of a model, in the order a checkpoint lists them. A checkpoint may
# lack "pooler" and "sop" (HF's AlbertForMaskedLM has neither), in which case
# they are initialized fresh.
BACKBONE, POOLER, MLM, SOP = "backbone", "pooler", "mlm", "sop"

# The E -> H projection's names; the original has it only when E != H.
TF1_PROJECTION = "bert/encoder/embedding_hidden_mapping_in"
HF_PROJECTION = "encoder.embedding_hidden_mapping_in"

# kind -> the variables of such a layer:
#   (Keras attribute, canonical suffix, TF1 suffix, HF suffix, TF1 transposed, HF transposed)
_KINDS = {
    "dense": (
        ("kernel", "kernel", "/kernel", ".weight", False, True),
        ("bias", "bias", "/bias", ".bias", False, False),
    ),
    # Original `cls/seq_relationship`: a hand-made (2, H) matrix, not a tf.layers.dense.
    "classifier": (
        ("kernel", "kernel", "/output_weights", ".weight", True, True),
        ("bias", "bias", "/output_bias", ".bias", False, False),
    ),
    "layer_norm": (
        ("gamma", "gamma", "/gamma", ".weight", False, False),
        ("beta", "beta", "/beta", ".bias", False, False),
    ),
    "embedding": (("embeddings", "embeddings", "", ".weight", False, False),),
    "vector": (("output_bias", "output_bias", "", "", False, False),),
}

# The layers of one transformer block: (attribute path, TF1 name, HF name, kind).
_BLOCK_LAYERS = (
    ("attention.query", "attention_1/self/query", "attention.query", "dense"),
    ("attention.key", "attention_1/self/key", "attention.key", "dense"),
    ("attention.value", "attention_1/self/value", "attention.value", "dense"),
    ("attention.output_dense", "attention_1/output/dense", "attention.dense", "dense"),
    ("attention.layer_norm", "LayerNorm", "attention.LayerNorm", "layer_norm"),
    ("feed_forward.intermediate", "ffn_1/intermediate/dense", "ffn", "dense"),
    ("feed_forward.output_dense", "ffn_1/intermediate/output/dense", "ffn_output", "dense"),
    ("feed_forward.layer_norm", "LayerNorm_1", "full_layer_layer_norm", "layer_norm"),
)


@dataclasses.dataclass(frozen=True)
class WeightEntry:
    """One variable and its names.

    Attributes:
        name: canonical name, e.g. "encoder/group_0/inner_0/attention/query/kernel".
        part: BACKBONE, POOLER, MLM or SOP.
        variable: the Keras variable, shape in Keras layout.
        tf1: full name in an original TF1 checkpoint ("bert/..." or "cls/...").
        hf: name in HF transformers, without the "albert." prefix that
            models with heads put before backbone weights.
        tf1_transposed / hf_transposed: stored as the transpose of `variable`.
        group: the group of a transformer-block weight, None for the others.
        hf_in_group: for a block weight, what `hf` would be in another
            group ("{group}" in place of the index); "" for the others.
    """

    name: str
    part: str
    variable: object
    tf1: str
    hf: str
    tf1_transposed: bool
    hf_transposed: bool
    group: object = None
    hf_in_group: str = ""

    @property
    def shape(self):
        return tuple(self.variable.shape)

    def stored_shape(self, transposed):
        return self.shape[::-1] if transposed else self.shape


def weight_entries(model):
    """Every weight of `model` (an `AlbertBackbone` or `AlbertPretrainer`), in a fixed order.

    Raises:
        ValueError: for another model type, or for partial sharing, which
            neither the original nor HF transformers can express.
    """
    if _is_pretrainer(model):
        backbone, heads = model.backbone, model
    elif _is_backbone(model):
        backbone, heads = model, None
    else:
        raise ValueError(
            "Only an AlbertBackbone or an AlbertPretrainer maps to TF1/HF checkpoints; "
            f"for a task model pass its `.backbone`. Received: {type(model).__name__}"
        )
    c = backbone.config
    if c.sharing != "all":
        raise UserError(
            f"`sharing={c.sharing!r}` has no equivalent in the original ALBERT or in HF "
            "transformers (both share whole blocks only, `sharing='all'`); this model "
            "cannot be converted."
        )

    # (part, kind, layer, canonical name, TF1 name, HF name)
    layers = [
        (BACKBONE, "embedding", backbone.embeddings.word_embeddings,
         "embeddings/word_embeddings", "bert/embeddings/word_embeddings",
         "embeddings.word_embeddings"),
        (BACKBONE, "embedding", backbone.embeddings.position_embeddings,
         "embeddings/position_embeddings", "bert/embeddings/position_embeddings",
         "embeddings.position_embeddings"),
        (BACKBONE, "embedding", backbone.embeddings.token_type_embeddings,
         "embeddings/token_type_embeddings", "bert/embeddings/token_type_embeddings",
         "embeddings.token_type_embeddings"),
        (BACKBONE, "layer_norm", backbone.embeddings.layer_norm,
         "embeddings/layer_norm", "bert/embeddings/LayerNorm", "embeddings.LayerNorm"),
    ]
    if backbone.embedding_projection is not None:
        layers.append((BACKBONE, "dense", backbone.embedding_projection,
                       "encoder/embedding_projection", TF1_PROJECTION, HF_PROJECTION))
    groups = {}  # canonical layer name -> (group, HF name with "{group}" for its index)
    # An unused group's list is empty (see `AlbertBackbone`): it has no entries.
    for g, group in enumerate(backbone.blocks):
        for i, block in enumerate(group):
            for path, tf1, hf, kind in _BLOCK_LAYERS:
                layer = block
                for attribute in path.split("."):
                    layer = getattr(layer, attribute)
                name = f"encoder/group_{g}/inner_{i}/{path.replace('.', '/')}"
                hf_in_group = f"encoder.albert_layer_groups.{{group}}.albert_layers.{i}.{hf}"
                groups[name] = (g, hf_in_group)
                layers.append((
                    BACKBONE, kind, layer, name,
                    f"bert/encoder/transformer/group_{g}/inner_group_{i}/{tf1}",
                    hf_in_group.format(group=g),
                ))
    layers.append((POOLER, "dense", backbone.pooler, "pooler", "bert/pooler/dense", "pooler"))
    if heads is not None:
        mlm, sop = heads.mlm_head, heads.sop_head
        layers += [
            (MLM, "dense", mlm.transform, "mlm_head/transform",
             "cls/predictions/transform/dense", "predictions.dense"),
            (MLM, "layer_norm", mlm.layer_norm, "mlm_head/layer_norm",
             "cls/predictions/transform/LayerNorm", "predictions.LayerNorm"),
            # The decoder matrix is the word embedding table (tied): only the bias is its own.
            (MLM, "vector", mlm, "mlm_head", "cls/predictions/output_bias", "predictions.bias"),
            (SOP, "classifier", sop.dense, "sop_head/dense",
             "cls/seq_relationship", "sop_classifier.classifier"),
        ]

    entries = []
    for part, kind, layer, name, tf1, hf in layers:
        group, hf_in_group = groups.get(name, (None, ""))
        for attribute, suffix, tf1_suffix, hf_suffix, tf1_t, hf_t in _KINDS[kind]:
            entries.append(WeightEntry(
                name=f"{name}/{suffix}", part=part, variable=getattr(layer, attribute),
                tf1=tf1 + tf1_suffix, hf=hf + hf_suffix,
                tf1_transposed=tf1_t, hf_transposed=hf_t,
                group=group, hf_in_group=hf_in_group + hf_suffix if hf_in_group else "",
            ))
    return entries


def hf_group_sources(config):
    """{HF group index: the group of a model with `config` whose weights it must hold}.

    HF transformers always builds G groups and picks layer i's with its own
    formula (`group_formula="hf"`). A model grouped otherwise (the
    original's formula, e.g. L = G = 22, where layers 14 and 15 share group
    14) is written to HF with each HF group holding a copy of the group
    those same layers use here, so HF computes the same function.

    Raises:
        ValueError: when two layers HF puts in one group use different groups
            here: HF cannot express that model.
    """
    ours, theirs = config.group_indices(), config.replace(group_formula="hf").group_indices()
    sources, first_layer = {}, {}
    for layer, (g, h) in enumerate(zip(ours, theirs)):
        if sources.setdefault(h, g) != g:
            raise UserError(
                f"HF transformers puts layers {first_layer[h]} and {layer} in one group ({h}), but this "
                f"model gives them groups {sources[h]} and {g} (group_formula={config.group_formula!r}, "
                f"num_hidden_layers={config.num_hidden_layers}, num_hidden_groups={config.num_hidden_groups}): "
                "HF cannot express this model."
            )
        first_layer.setdefault(h, layer)
    return sources


@dataclasses.dataclass(frozen=True)
class ConversionReport:
    """What a conversion produced.

    Attributes:
        model: the converted `AlbertPretrainer` or `AlbertBackbone`.
        newly_initialized: canonical names of weights the source did not
            hold and that were initialized fresh (the pooler and SOP head of
            an AlbertForMaskedLM source); empty otherwise.
    """

    model: object
    newly_initialized: tuple


@dataclasses.dataclass(frozen=True)
class Scheme:
    """How one checkpoint format names and lays out the entries.

    Attributes:
        label: "HF" or "TF1", for messages.
        name_of: entry -> the name in the checkpoint.
        transposed: entry -> whether the checkpoint stores the transpose.
    """

    label: str
    name_of: object
    transposed: object
    is_head: object


def _is_pretrainer(model):
    return hasattr(model, "mlm_head") and hasattr(model, "sop_head")


def _is_backbone(model):
    return hasattr(model, "blocks") and hasattr(model, "embedding_projection")


def tf1_scheme():
    """TF1 names: the heads are under "cls/"."""
    return Scheme("TF1", lambda e: e.tf1, lambda e: e.tf1_transposed, lambda name: name.startswith("cls/"))


def hf_scheme(backbone_prefix):
    """HF names; `backbone_prefix` is "albert." for models with heads, "" for AlbertModel."""
    return Scheme(
        "HF",
        lambda e: (backbone_prefix if e.part in (BACKBONE, POOLER) else "") + e.hf,
        lambda e: e.hf_transposed,
        lambda name: bool(backbone_prefix) and not name.startswith(backbone_prefix),
    )


def load_checkpoint(model, shapes, read, scheme, source):
    """Loads every tensor of a checkpoint into `model` (an `AlbertBackbone` or `AlbertPretrainer`).

    A pretrainer from a source without the SOP head (HF's AlbertForMaskedLM)
    keeps a freshly initialized SOP head, and a fresh pooler too when that is
    also absent. A backbone takes the backbone of a checkpoint with heads
    (the heads' tensors are left out), and keeps a fresh pooler when the
    checkpoint has none.

    Args:
        model: the model, built from the checkpoint's config.
        shapes: dict, every tensor name in the checkpoint (after the caller
            removed what it knows to ignore) -> shape.
        read: name -> numpy array.
        scheme: a `Scheme`.
        source: the checkpoint's path, for messages.

    Returns:
        A `ConversionReport`.

    Raises:
        ValueError: listing every missing name, unexpected name and shape
            mismatch, before any weight is assigned.
    """
    entries = weight_entries(model)
    present = {e.part for e in entries if scheme.name_of(e) in shapes}
    if _is_pretrainer(model):
        fresh = set()
        if SOP not in present:
            fresh.add(SOP)
            if POOLER not in present:
                fresh.add(POOLER)
    else:
        heads = {name for name in shapes if scheme.is_head(name)}
        shapes = {name: shape for name, shape in shapes.items() if name not in heads}
        # An MLM-only checkpoint (AlbertForMaskedLM) has no pooler to take.
        fresh = {POOLER} if heads and POOLER not in present else set()
    loaded = [e for e in entries if e.part not in fresh]
    check_names_and_shapes(loaded, shapes, scheme, source)
    for e in loaded:
        value = np.asarray(read(scheme.name_of(e)))
        if scheme.transposed(e):
            value = value.T
        e.variable.assign(value.astype(e.variable.dtype))
    newly_initialized = [e.name for e in entries if e.part in fresh]
    return ConversionReport(model, tuple(newly_initialized))


def check_names_and_shapes(entries, shapes, scheme, source):
    """Raises a ValueError listing every difference between `entries` and a checkpoint."""
    expected = {scheme.name_of(e): e for e in entries}
    missing = sorted(set(expected) - set(shapes))
    unexpected = sorted(set(shapes) - set(expected))
    mismatched = [
        f"{name}: checkpoint {tuple(shapes[name])}, model expects "
        f"{e.stored_shape(scheme.transposed(e))}"
        for name, e in expected.items()
        if name in shapes and tuple(shapes[name]) != e.stored_shape(scheme.transposed(e))
    ]
    if not (missing or unexpected or mismatched):
        return
    lines = [f"{source} does not match the model its config describes:"]
    if missing:
        lines.append(f"  missing {len(missing)} {scheme.label} tensors: {missing}")
    if unexpected:
        lines.append(f"  unexpected {len(unexpected)} {scheme.label} tensors: {unexpected}")
    if mismatched:
        lines.append(f"  {len(mismatched)} shape mismatches: " + "; ".join(mismatched))
    raise UserError("\n".join(lines))
