"""HF transformers' ALBERT (PyTorch) as the numerical reference for the converters.

Builds random HF models, runs them and our models on the same padded batch,
and writes TF1 checkpoints under the original variable names. The HF -> TF1
name table here is written independently of `albert_tf.models.checkpoint_weights`, so
TF1 tests check that mapping rather than reuse it.
"""

import numpy as np
import tensorflow as tf
import torch
import transformers

from input_pipeline import features

# A small default-shaped ALBERT, in HF config names. initializer_range 0.2
# (not 0.02) puts FFN inputs where tanh and erf GELU differ by ~1e-3, well
# above the parity tolerance, so the tests can tell the two apart.
TINY = dict(
    vocab_size=300, embedding_size=16, hidden_size=64, num_hidden_layers=3,
    num_attention_heads=4, intermediate_size=128, max_position_embeddings=64,
    hidden_act="gelu_new", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    initializer_range=0.2,
)


def make_hf_model(cls=transformers.AlbertForPreTraining, seed=0, **overrides):
    """A randomly initialized HF model in eval mode; biases and LayerNorms randomized too."""
    torch.manual_seed(seed)
    model = cls(transformers.AlbertConfig(**{**TINY, **overrides})).eval()
    # HF initializes biases to 0 and LayerNorms to 1; random values make
    # every tensor's mapping (and any transpose) show up in the outputs.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "LayerNorm" in name or "layer_norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model


def batch(vocab_size, lengths=(12, 9, 5), seed=0):
    """A padded batch: token_ids, segment_ids, padding_mask (batch, seq), as numpy int32."""
    rng = np.random.default_rng(seed)
    seq = max(lengths)
    mask = np.array([[1] * n + [0] * (seq - n) for n in lengths], np.int32)
    token_ids = rng.integers(5, vocab_size, size=mask.shape).astype(np.int32) * mask
    segment_ids = np.array([[0] * (n // 2) + [1] * (seq - n // 2) for n in lengths], np.int32)
    segment_ids = segment_ids * mask
    return {
        features.TOKEN_IDS: token_ids,
        features.SEGMENT_IDS: segment_ids,
        features.PADDING_MASK: mask,
    }


def hf_outputs(model, inputs):
    """sequence_output, pooled_output, mlm_logits (every position), sop_logits as numpy."""
    kwargs = dict(
        input_ids=torch.tensor(inputs[features.TOKEN_IDS], dtype=torch.long),
        token_type_ids=torch.tensor(inputs[features.SEGMENT_IDS], dtype=torch.long),
        attention_mask=torch.tensor(inputs[features.PADDING_MASK], dtype=torch.long),
    )
    with torch.no_grad():
        encoder = model.albert if hasattr(model, "albert") else model
        encoded = encoder(**kwargs)
        out = {
            "sequence_output": encoded.last_hidden_state.numpy(),
            "pooled_output": encoded.pooler_output.numpy(),
        }
        if isinstance(model, transformers.AlbertForPreTraining):
            heads = model(**kwargs)
            out["mlm_logits"] = heads.prediction_logits.numpy()
            out["sop_logits"] = heads.sop_logits.numpy()
    return out


def our_outputs(model, inputs):
    """The same four outputs from our backbone or pretrainer (MLM at every position)."""
    backbone = getattr(model, "backbone", model)
    out = {k: np.asarray(v) for k, v in backbone(inputs).items()}
    if hasattr(model, "mlm_head"):
        batch_size, seq = inputs[features.TOKEN_IDS].shape
        positions = np.tile(np.arange(seq, dtype=np.int32), (batch_size, 1))
        heads = model({**inputs, features.MASK_POSITIONS: positions})
        out["mlm_logits"] = np.asarray(heads["mlm_logits"])
        out["sop_logits"] = np.asarray(heads["sop_logits"])
    return out


def max_differences(ours, reference, padding_mask):
    """Max abs difference per output; per-token outputs only at real (non-padding) tokens."""
    real = padding_mask.astype(bool)
    diffs = {}
    for name, ref in reference.items():
        a, b = ours[name], ref
        if name in ("sequence_output", "mlm_logits"):
            a, b = a[real], b[real]
        diffs[name] = float(np.max(np.abs(a - b)))
    return diffs


# HF name fragment -> original TF1 name fragment, written out by hand.
_TF1_BLOCK = {
    "attention.query": "attention_1/self/query",
    "attention.key": "attention_1/self/key",
    "attention.value": "attention_1/self/value",
    "attention.dense": "attention_1/output/dense",
    "attention.LayerNorm": "LayerNorm",
    "ffn": "ffn_1/intermediate/dense",
    "ffn_output": "ffn_1/intermediate/output/dense",
    "full_layer_layer_norm": "LayerNorm_1",
}
_TF1_OTHER = {
    "albert.embeddings.word_embeddings": "bert/embeddings/word_embeddings",
    "albert.embeddings.position_embeddings": "bert/embeddings/position_embeddings",
    "albert.embeddings.token_type_embeddings": "bert/embeddings/token_type_embeddings",
    "albert.embeddings.LayerNorm": "bert/embeddings/LayerNorm",
    "albert.encoder.embedding_hidden_mapping_in": "bert/encoder/embedding_hidden_mapping_in",
    "albert.pooler": "bert/pooler/dense",
    "predictions.dense": "cls/predictions/transform/dense",
    "predictions.LayerNorm": "cls/predictions/transform/LayerNorm",
}


def tf1_variables(hf_model):
    """The HF AlbertForPreTraining weights under original TF1 names and layouts."""
    out = {}
    for name, p in hf_model.state_dict().items():
        value = p.detach().numpy()
        if name.startswith("predictions.decoder"):
            continue  # tied
        if name == "predictions.bias":
            out["cls/predictions/output_bias"] = value
            continue
        if name.startswith("sop_classifier.classifier."):
            # Stored (2, H) in TF1, like torch: not transposed.
            leaf = "output_weights" if name.endswith("weight") else "output_bias"
            out[f"cls/seq_relationship/{leaf}"] = value
            continue
        base, leaf = name.rsplit(".", 1)
        if ".albert_layer_groups." in base:
            parts = base.split(".")  # albert encoder albert_layer_groups g albert_layers i ...
            g, i, rest = parts[3], parts[5], ".".join(parts[6:])
            tf1 = f"bert/encoder/transformer/group_{g}/inner_group_{i}/{_TF1_BLOCK[rest]}"
        else:
            tf1 = _TF1_OTHER[base]
        if "embeddings" in base and "LayerNorm" not in base:
            out[tf1] = value
        elif "LayerNorm" in base or "layer_norm" in base:
            out[f"{tf1}/{'gamma' if leaf == 'weight' else 'beta'}"] = value
        elif leaf == "weight":
            out[f"{tf1}/kernel"] = value.T
        else:
            out[f"{tf1}/bias"] = value
    return out


def write_tf1_checkpoint(prefix, variables):
    """Writes `variables` (name -> array) as a V2 checkpoint with exactly those names."""
    names = sorted(variables)
    tf.raw_ops.SaveV2(
        prefix=prefix,
        tensor_names=names,
        shape_and_slices=[""] * len(names),
        tensors=[tf.constant(variables[n]) for n in names],
    )


def original_layout(seed=0, **overrides):
    """(a random HF AlbertForPreTraining, the TF1 variables of the original model it computes).

    The original TF1 code builds no E -> H projection when E == H, and picks
    layer i's group as `int(i / L * G)` in floating point, creating variables
    only for the groups some layer uses. HF always has the projection and
    groups layers by `int(i / (L / G))`. So the HF model gets an identity
    projection when E == H, and each HF group a copy of the group the
    original gives the same layers; the TF1 variables leave out the
    projection (E == H) and the groups the original never uses. The formulas
    are written out here, not taken from albert_tf.config.
    """
    model = make_hf_model(seed=seed, **overrides)
    c = model.config
    layers, groups = c.num_hidden_layers, c.num_hidden_groups
    hf_groups = model.albert.encoder.albert_layer_groups
    states = [{k: v.clone() for k, v in g.state_dict().items()} for g in hf_groups]
    original = {}
    for i in range(layers):
        hf_group, original_group = int(i / (layers / groups)), int(i / layers * groups)
        assert original.setdefault(hf_group, original_group) == original_group, "HF cannot express this"
        hf_groups[hf_group].load_state_dict(states[original_group])
    projection = model.albert.encoder.embedding_hidden_mapping_in
    if c.embedding_size == c.hidden_size:
        with torch.no_grad():
            projection.weight.copy_(torch.eye(c.hidden_size))
            projection.bias.zero_()
    variables = tf1_variables(model)
    unused = [f"/group_{g}/" for g in range(groups) if g not in original.values()]
    return model, {
        name: value for name, value in variables.items()
        if not any(u in name for u in unused)
        and not (c.embedding_size == c.hidden_size and "embedding_hidden_mapping_in" in name)
    }
