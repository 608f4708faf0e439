"""`AlbertConfig`: the one description of an ALBERT model's shape.

A frozen dataclass with named presets. It reads and writes the original
google-research/albert `albert_config.json` field names (and HuggingFace's
`config.json`, which uses the same names), so a released config file rebuilds
the same model here. Two fields describe layouts of other sources that the
original config files leave implicit: `embedding_projection` (the original
has no E -> H layer when E == H) and `group_formula` (how layers pick their
group: the original's and HF's floating-point formulas differ from exact
integer arithmetic in corner cases); `convert` sets them from the checkpoint.
"""

import dataclasses
import json

from albert_tf.utils.config_base import (
    JsonConfig, check_bool, check_choice, check_fraction, check_int_in, check_positive, check_positive_int,
    doc,
)
from albert_tf.utils.errors import UserError

SHARING_MODES = ("all", "attention", "ffn", "none")
# How layer i finds its group (`AlbertConfig.group_index`): exact integer
# arithmetic (albert-tf's own), or the floating-point formula of the original
# TF1 code or of HF transformers, which round differently in corner cases.
GROUP_FORMULAS = ("exact", "original", "hf")
ACTIVATIONS = ("gelu_new", "gelu", "relu", "tanh", "swish", "silu")

# Fields of the original `albert_config.json` (and HF's AlbertConfig) that this
# config holds under other names.
_ORIGINAL_TO_OURS = {
    "hidden_dropout_prob": "hidden_dropout",
    "attention_probs_dropout_prob": "attention_dropout",
    "classifier_dropout_prob": "classifier_dropout",
}
# Fields those files carry that change nothing here: ALBERT has no choice of
# position embedding type beyond "absolute", and the rest are HF bookkeeping.
_IGNORED_KEYS = frozenset(
    {
        "model_type",
        "architectures",
        "transformers_version",
        "torch_dtype",
        "dtype",
        "pad_token_id",
        "bos_token_id",
        "eos_token_id",
        "net_structure_type",
        "gap_size",
        "num_memory_blocks",
        "down_scale_factor",
        "layers_to_keep",
        "position_embedding_type",
        "tie_word_embeddings",
    }
)


# The largest size each field may take. A config is read from files of outside (a preset's config.json,
# a checkpoint's), and the weights it describes are allocated before they are read: these bounds keep that
# allocation sane. Each admits every published ALBERT (V 30000, E 128, H <= 4096, L <= 24, heads <= 64,
# FFN <= 16384, P 512, 2 segments; the paper's deepest ablation, 48 layers; its inner groups, 3) with
# room to grow: vocabularies of multilingual models (about 250,000 pieces), 4x xxlarge's widths, 64x its
# positions. `num_hidden_groups` is bounded by `num_hidden_layers`.
SIZE_BOUNDS = {
    "vocab_size": 1 << 20,
    "embedding_size": 1 << 14,
    "hidden_size": 1 << 14,
    "num_hidden_layers": 1 << 9,
    "num_attention_heads": 1 << 10,
    "intermediate_size": 1 << 16,
    "inner_group_num": 1 << 6,
    "max_position_embeddings": 1 << 15,
    "type_vocab_size": 1 << 10,
}
# What a weights file may hold beyond its parameters: names, attributes, headers.
FILE_MARGIN_BYTES = 1 << 20


@dataclasses.dataclass(frozen=True)
class AlbertConfig(JsonConfig):
    """Shape and regularisation of an ALBERT model; defaults are ALBERT-base v2.

    Each field's meaning is its `help` below (also the command line's help).
    """

    vocab_size: int = doc(30000, "V, rows of the word embedding table.")
    embedding_size: int = doc(128, "E, width of the factorized embeddings.")
    hidden_size: int = doc(768, "H, width of the transformer.")
    num_hidden_layers: int = doc(12, "L, how many times a block is applied.", flag="num-layers")
    num_attention_heads: int = doc(12, "Attention heads; must divide hidden_size.", flag="num-heads")
    intermediate_size: int = doc(3072, "FFN inner width.")
    num_hidden_groups: int = doc(1, "G, groups of distinct blocks; layer i uses group_index(i) (see group_formula).")
    inner_group_num: int = doc(1, "Distinct blocks inside each group, applied in order.")
    # Named as HF transformers names them: "gelu_new" is the tanh approximation
    # (what the original TF1 code calls "gelu"), "gelu" the exact erf form.
    hidden_act: str = doc("gelu_new", "Activation: gelu_new (tanh approximation), gelu (erf), relu, tanh, swish.",
                          choices=ACTIVATIONS)
    hidden_dropout: float = doc(0.0, "Dropout after embeddings, attention output and FFN.")
    attention_dropout: float = doc(0.0, "Dropout on attention probabilities.")
    classifier_dropout: float = doc(0.1, "Dropout before fine-tuning heads.")
    max_position_embeddings: int = doc(512, "P, the longest sequence the model accepts.")
    type_vocab_size: int = doc(2, "Number of segment ids.")
    initializer_range: float = doc(0.02, "Stddev of the truncated-normal initializer.")
    layer_norm_eps: float = doc(1e-12, "LayerNorm epsilon.")
    sharing: str = doc("all", "Parts of a block shared across a group's layers: all (ALBERT), attention, ffn "
                       "or none (BERT-like); the paper's Table 4 ablation.", choices=SHARING_MODES)
    # The two fields below are written to JSON only when they differ from
    # their defaults, so existing configs' files stay as they were.
    embedding_projection: bool = doc(True, "Whether a dense E -> H layer (embedding_hidden_mapping_in) follows the "
                                     "embeddings. False needs E == H: the original code's and the paper's layout "
                                     "then (HF's AlbertModel always has the layer).")
    group_formula: str = doc("exact", "How layer i's group is computed: exact (i * G // L), original (int(i / L * G) "
                             "in floating point, the original TF1 code's) or hf (int(i / (L / G)), HF "
                             "transformers'). All three agree for every L <= 17 and, up to L 599, every "
                             "G <= 13.",
                             choices=GROUP_FORMULAS)

    def __post_init__(self):
        for name in ("num_hidden_groups", *SIZE_BOUNDS):
            check_positive_int(name, getattr(self, name))
        for name, bound in SIZE_BOUNDS.items():
            check_int_in(name, getattr(self, name), 1, bound)
        for name in ("hidden_dropout", "attention_dropout", "classifier_dropout"):
            check_fraction(name, getattr(self, name), high_open=True)
        check_positive("layer_norm_eps", self.layer_norm_eps)
        check_positive("initializer_range", self.initializer_range)
        if self.hidden_size % self.num_attention_heads:
            raise UserError(
                "`num_attention_heads` must divide `hidden_size`. Received: "
                f"num_attention_heads={self.num_attention_heads}, hidden_size={self.hidden_size}"
            )
        if self.num_hidden_groups > self.num_hidden_layers:
            raise UserError(
                "`num_hidden_groups` cannot exceed `num_hidden_layers` (a group no layer "
                f"uses would hold unused weights). Received: num_hidden_groups="
                f"{self.num_hidden_groups}, num_hidden_layers={self.num_hidden_layers}"
            )
        check_choice("hidden_act", self.hidden_act, ACTIVATIONS)
        check_choice("sharing", self.sharing, SHARING_MODES)
        check_bool("embedding_projection", self.embedding_projection)
        if not self.embedding_projection and self.embedding_size != self.hidden_size:
            raise UserError(
                "`embedding_projection=False` needs embedding_size == hidden_size (nothing else maps "
                f"E to H). Received: embedding_size={self.embedding_size}, hidden_size={self.hidden_size}"
            )
        check_choice("group_formula", self.group_formula, GROUP_FORMULAS)
        if self.sharing != "all" and (self.num_hidden_groups, self.inner_group_num) != (1, 1):
            raise UserError(
                "Partial sharing (`sharing` other than 'all') is defined for one group of one "
                f"block. Received: sharing={self.sharing!r}, num_hidden_groups="
                f"{self.num_hidden_groups}, inner_group_num={self.inner_group_num}"
            )

    def weights_budget(self):
        """The most bytes the weights of this model may declare: every parameter of the backbone and of the
        pretraining heads (MLM, SOP) in float32, each block counted once per layer that may own it, and a
        sixteenth more. An upper bound, for refusing files that claim more."""
        v, e, h, i = self.vocab_size, self.embedding_size, self.hidden_size, self.intermediate_size
        embeddings = (v + self.max_position_embeddings + self.type_vocab_size) * e + 2 * e + e * h + h
        block = 4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h
        blocks = self.num_hidden_groups * self.inner_group_num if self.sharing == "all" else self.num_hidden_layers
        heads = (h * h + h) + (h * e + e) + 2 * e + v + (2 * h + 2)  # pooler, MLM transform and bias, SOP
        parameters = embeddings + blocks * block + heads
        return 4 * parameters + 4 * parameters // 16

    def file_budget(self):
        """The most bytes a weights file of this model may take: `weights_budget` and its names, attributes
        and headers (`FILE_MARGIN_BYTES`)."""
        return self.weights_budget() + FILE_MARGIN_BYTES

    @property
    def head_size(self):
        return self.hidden_size // self.num_attention_heads

    def group_index(self, layer_index):
        """The group that layer `layer_index` (0 <= layer_index < L) uses, by `group_formula`.

        - "exact": `layer_index * G // L`, exact integer arithmetic.
        - "original": `int(layer_index / L * G)` in (64-bit) floating point,
          as the original TF1 code (`modeling.py`, `transformer_model`)
          computes it. It can round an exact integer down: for L = G = 22,
          layer 15 lands in group 14 and no layer uses group 15
          (`used_groups`).
        - "hf": `int(layer_index / (L / G))` in floating point, as HF
          transformers' `AlbertTransformer` computes it. Equal to "exact"
          whenever G divides L; differs elsewhere in corner cases
          (e.g. L 18 / G 14). Every group is used.

        All three agree for every L <= 17 and, up to L 599, every G <= 13. A
        checkpoint follows its source's formula: `convert` sets it
        (`grouped_by`).
        """
        layers, groups = self.num_hidden_layers, self.num_hidden_groups
        if self.group_formula == "original":
            return int(layer_index / layers * groups)
        if self.group_formula == "hf":
            return int(layer_index / (layers / groups))
        return layer_index * groups // layers

    def group_indices(self):
        """`group_index(i)` of every layer, a tuple of L ints."""
        return tuple(self.group_index(i) for i in range(self.num_hidden_layers))

    @property
    def used_groups(self):
        """The groups some layer uses, sorted: every group but under "original" in corner cases."""
        return tuple(sorted(set(self.group_indices())))

    def grouped_by(self, group_formula):
        """This config with layers grouped as `group_formula` groups them.

        Where that formula gives the same group to every layer as the
        current one (every usual shape), the config is returned unchanged, so
        converting a checkpoint of a usual shape gives the config it always
        gave.
        """
        changed = self.replace(group_formula=group_formula)
        return self if changed.group_indices() == self.group_indices() else changed

    # ----------------------------------------------------------------- JSON
    def to_dict(self):
        """The config with the original `albert_config.json` field names."""
        ours_to_original = {v: k for k, v in _ORIGINAL_TO_OURS.items()}
        out = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name in _WRITTEN_IF_CHANGED and value == field.default:
                continue
            out[ours_to_original.get(field.name, field.name)] = value
        # Marks the activation names as HF's (see `from_dict`) and lets HF
        # transformers read the file as it is.
        out["model_type"] = "albert"
        return out

    @classmethod
    def from_dict(cls, values, gelu_is_tanh=None):
        """Builds a config from our names or the original/HF field names.

        Args:
            values: dict of config fields.
            gelu_is_tanh: how to read `hidden_act="gelu"`. The original TF1
                code's "gelu" is the tanh approximation, HF's is exact erf.
                None decides by the file: HF files (and ours) carry
                `model_type`, original `albert_config.json` files do not.

        Raises:
            ValueError: for a key that neither names a field nor is a known
                bookkeeping key, listing the valid keys.
        """
        if not isinstance(values, dict):
            raise UserError(f"A config must be a JSON object. Received: {type(values).__name__}")
        field_names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {}
        unknown = []
        for key, value in values.items():
            name = _ORIGINAL_TO_OURS.get(key, key)
            if name in field_names:
                kwargs[name] = value
            elif key not in _IGNORED_KEYS:
                unknown.append(key)
        if unknown:
            valid = sorted(field_names | set(_ORIGINAL_TO_OURS))
            raise UserError(f"Unknown config keys {sorted(unknown)}. Valid keys: {valid}")
        if gelu_is_tanh is None:
            gelu_is_tanh = "model_type" not in values
        act = kwargs.get("hidden_act")
        if act in _TANH_GELU_ALIASES or (act == "gelu" and gelu_is_tanh):
            kwargs["hidden_act"] = "gelu_new"
        return cls(**kwargs)

    @classmethod
    def from_json(cls, text, gelu_is_tanh=None):
        return cls.from_dict(json.loads(text), gelu_is_tanh=gelu_is_tanh)

    @classmethod
    def from_preset(cls, name, **overrides):
        """One of `PRESETS` (e.g. "base", "xxlarge-v1"), optionally with overrides."""
        if name not in PRESETS:
            raise UserError(f"Unknown preset {name!r}. Valid presets: {sorted(PRESETS)}")
        return PRESETS[name].replace(**overrides) if overrides else PRESETS[name]


# Fields `to_dict` leaves out at their defaults: files of configs that do not
# use them are what they were before the fields existed.
_WRITTEN_IF_CHANGED = ("embedding_projection", "group_formula")

# Other spellings of the tanh-approximated GELU.
_TANH_GELU_ALIASES = ("gelu_fast", "gelu_pytorch_tanh")


def _preset(hidden, layers, heads, ffn, dropout):
    return AlbertConfig(
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=ffn,
        hidden_dropout=dropout,
        attention_dropout=dropout,
    )


# v2 models use no dropout; v1 used 0.1 everywhere except xxlarge.
PRESETS = {
    "base": _preset(768, 12, 12, 3072, 0.0),
    "large": _preset(1024, 24, 16, 4096, 0.0),
    "xlarge": _preset(2048, 24, 16, 8192, 0.0),
    "xxlarge": _preset(4096, 12, 64, 16384, 0.0),
    "base-v1": _preset(768, 12, 12, 3072, 0.1),
    "large-v1": _preset(1024, 24, 16, 4096, 0.1),
    "xlarge-v1": _preset(2048, 24, 16, 8192, 0.1),
    "xxlarge-v1": _preset(4096, 12, 64, 16384, 0.0),
}
for _name in ("base", "large", "xlarge", "xxlarge"):
    PRESETS[_name + "-v2"] = PRESETS[_name]
