"""`AlbertBackbone`: embeddings, the shared transformer stack, and the pooler."""

import gc
import keras
from keras import ops

from albert_tf.config import AlbertConfig
from albert_tf.layers import AlbertEmbedding, FeedForward, SelfAttention, TransformerBlock
from albert_tf.layers.cast_once import cast_weights_once, per_call_cache
from albert_tf.layers.common import dense, padding_bias
from albert_tf.layers.lora import check_lora_args
from albert_tf.models.pretrained import (
    PretrainedMixin, load_converted_dir, load_saved_model, open_model_dir, warn_newly_initialized,
)
from albert_tf.models.quantization import TFLiteQuantizationOnly
from albert_tf.models.retracing import RetracesOnNewVariables
from input_pipeline import features


def attention_bias_from_padding_mask(padding_mask, dtype="float32"):
    """(batch, seq) 1/0 mask -> (batch, 1, 1, seq) additive bias: 0 or `PADDING_BIAS`."""
    return ops.expand_dims(ops.expand_dims(padding_bias(padding_mask, dtype), 1), 1)


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertBackbone(RetracesOnNewVariables, TFLiteQuantizationOnly, PretrainedMixin, keras.Model):
    """The ALBERT encoder.

    Factorized embedding (V x E, then one E -> H projection,
    `embedding_projection`; None when `config.embedding_projection` is False,
    as in the original's E == H models), then `num_hidden_layers`
    applications of shared transformer blocks, then a tanh pooler on the
    [CLS] position.

    Sharing: `blocks` holds the distinct blocks. Under `sharing="all"` it has
    `num_hidden_groups` lists of `inner_group_num` blocks, and layer i applies
    every block of group `config.group_index(i)`; a group no layer uses
    (possible only under `group_formula="original"`, as in the original,
    which creates no variables for it) is an empty list. Under partial sharing it has
    one block per layer, and those blocks hold the same attention (or FFN)
    object. Under a mixed policy an inference call casts the weights to the
    compute dtype once, not at every application (`cast_weights_once`).

    Args:
        config: an `AlbertConfig` (or a dict of its fields).
        dtype: a dtype policy name, e.g. "mixed_bfloat16".
        remat: recompute each application of a shared block in the backward
            pass instead of keeping its activations (see `TransformerBlock`).
            A training memory/compute trade-off, not part of the model, so
            it is an argument here and not an `AlbertConfig` field: the
            config, the weights and the outputs are the same either way.
        lora_rank: if set, `enable_lora(lora_rank, lora_alpha, lora_embedding_rank)`
            at construction (how a saved LoRA model is rebuilt; see `enable_lora`).
        lora_alpha: LoRA scale numerator; None means `lora_rank`.
        lora_embedding_rank: rank of the word-embedding table's LoRA update
            (0 or None: none).

    Inputs (dict):
        token_ids, segment_ids, padding_mask: int32 (batch, seq), seq up to
        `max_position_embeddings`.

    Outputs (dict):
        sequence_output: (batch, seq, H).
        pooled_output: (batch, H).
    """

    # Picks the serving signatures' post-processing (export/signatures.py).
    export_kind = "backbone"

    def __init__(self, config, dtype=None, remat=False, lora_rank=None, lora_alpha=None, lora_embedding_rank=None,
                 **kwargs):
        if isinstance(config, dict):
            config = AlbertConfig.from_dict(config)
        if not isinstance(config, AlbertConfig):
            raise ValueError(
                f"`config` must be an AlbertConfig or a dict. Received: {type(config).__name__}"
            )
        c = config
        if remat and (c.hidden_dropout or c.attention_dropout):
            # The recomputation would draw new dropout masks, so the gradient
            # would belong to another forward pass than the loss.
            raise ValueError(
                "`remat=True` needs a model without dropout (the v2 presets). Received: "
                f"hidden_dropout={c.hidden_dropout}, attention_dropout={c.attention_dropout}"
            )

        # === Layers ===
        embedding = AlbertEmbedding(
            vocab_size=c.vocab_size,
            embedding_size=c.embedding_size,
            max_position_embeddings=c.max_position_embeddings,
            type_vocab_size=c.type_vocab_size,
            initializer_range=c.initializer_range,
            layer_norm_eps=c.layer_norm_eps,
            dropout=c.hidden_dropout,
            dtype=dtype,
            name="embeddings",
        )
        projection = dense(
            units=c.hidden_size, stddev=c.initializer_range, name="embedding_hidden_mapping_in", dtype=dtype
        ) if c.embedding_projection else None
        blocks = _build_blocks(c, dtype, remat)
        pooler = dense(units=c.hidden_size, stddev=c.initializer_range, name="pooler", activation="tanh", dtype=dtype)

        # === Functional graph ===
        inputs = {
            name: keras.Input(shape=(None,), dtype="int32", name=name)
            for name in features.BACKBONE_INPUTS
        }
        x = embedding(inputs[features.TOKEN_IDS], inputs[features.SEGMENT_IDS])
        if projection is not None:
            x = projection(x)  # (batch, seq, H)
        bias = attention_bias_from_padding_mask(inputs[features.PADDING_MASK])
        for layer_index in range(c.num_hidden_layers):
            for block in blocks[_block_list_index(c, layer_index)]:
                x = block(x, bias)
        sequence_output = x
        pooled_output = pooler(sequence_output[:, 0, :])  # (batch, H), the [CLS] position
        super().__init__(
            inputs=inputs,
            outputs={"sequence_output": sequence_output, "pooled_output": pooled_output},
            **kwargs,
        )
        # Functional models ignore a `dtype` argument; the heads built on this
        # backbone read its policy, so it must be the one its layers use.
        if dtype is not None:
            self.dtype_policy = keras.dtype_policies.get(dtype)

        # === Config and handles ===
        self.config = c
        self.remat = remat
        self.embeddings = embedding
        self.embedding_projection = projection
        self.blocks = tuple(tuple(group) for group in blocks)
        self.pooler = pooler
        self.lora_rank = None
        self.lora_alpha = None
        self.lora_embedding_rank = None
        if lora_rank is not None:
            self.enable_lora(lora_rank, lora_alpha, embedding_rank=lora_embedding_rank or 0)
        elif lora_alpha is not None or lora_embedding_rank:
            raise ValueError(
                "`lora_alpha` and `lora_embedding_rank` need a `lora_rank`. Received: "
                f"lora_alpha={lora_alpha!r}, lora_embedding_rank={lora_embedding_rank!r}, lora_rank=None"
            )

    def call(self, inputs, training=None, mask=None, **kwargs):
        # Under a mixed policy Keras casts a variable at every read, so the
        # shared blocks' weights would be cast once per layer that applies
        # them; outside training they are cast once per call (see
        # `cast_weights_once`), which speeds up batch-1 inference
        # (bench/results/shared_cast.md). Training keeps Keras' casts: one
        # cast gained the step little, and it would sum the L gradients of a
        # shared weight in bfloat16 instead of float32. Under float32 nothing
        # is cast and the call is Keras' own; under remat each block reads the weights itself.
        # The fused attention kernel is likewise built once per inference call.
        if self.remat or training:
            return super().call(inputs, training=training, mask=mask, **kwargs)
        with per_call_cache():
            if self.compute_dtype == self.variable_dtype:
                return super().call(inputs, training=training, mask=mask, **kwargs)
            with cast_weights_once(self.compute_dtype):
                return super().call(inputs, training=training, mask=mask, **kwargs)

    def attention_layers(self):
        """The distinct `SelfAttention` layers, each once however many layers share it."""
        distinct = {}
        for group in self.blocks:
            for block in group:
                distinct.setdefault(id(block.attention), block.attention)
        return list(distinct.values())

    def enable_lora(self, rank, lora_alpha=None, embedding_rank=0):
        """Freezes the backbone and adds LoRA factors to every attention projection.

        Each query, key, value and output (H, H) kernel W gets trainable
        A (H, rank) and B (rank, H) and computes with W + (lora_alpha / rank) * A @ B
        (Keras' `Dense.enable_lora`: A random, B zero, so the outputs do not
        change until B trains). Every other backbone weight is frozen,
        the projections' biases and the pooler included; a task head built
        on the backbone stays trainable. Factors belong to the distinct
        attention layers: under full sharing one set of factors serves every
        layer (`num_hidden_groups * inner_group_num` sets in all), so the
        trainable count is `8 * rank * H` per distinct attention layer.

        With `embedding_rank` the (V, E) word-embedding table gets a LoRA
        update of that rank too (scale 1; `LoraEmbedding`): V * r + r * E
        more trainable weights (60,128 for the demo's V 30,000, E 64 at r 2).
        ALBERT's parameters are mostly that table, and full fine-tuning moves
        it most: on Rotten Tomatoes from the demo model, attention LoRA alone
        stayed below full fine-tuning (bench/results/lora.md).

        Call it before the first `fit`: the optimizer is built for the
        variables trainable then. Compiled `fit`/`evaluate`/`predict`
        functions follow the change (`RetracesOnNewVariables`), here and in
        `merge_lora`. Saving keeps the factors and the ranks
        (`get_config`); `merge_lora` folds them into the weights for export.

        Args:
            rank: positive int, the rank of the attention projections' update.
            lora_alpha: positive number; that update is scaled by
                `lora_alpha / rank`. None means `rank` (scale 1).
            embedding_rank: non-negative int, the rank of the word-embedding
                table's update; 0 leaves the table frozen.
        """
        check_lora_args(rank, lora_alpha)
        if isinstance(embedding_rank, bool) or not isinstance(embedding_rank, int) or embedding_rank < 0:
            raise ValueError(
                "`embedding_rank` must be a non-negative integer (0: none). "
                f"Received: embedding_rank={embedding_rank!r}"
            )
        if embedding_rank > self.config.embedding_size:
            raise ValueError(
                f"`embedding_rank` must be at most embedding_size ({self.config.embedding_size}). "
                f"Received: embedding_rank={embedding_rank}"
            )
        if rank > self.config.hidden_size:
            raise ValueError(
                f"`rank` must be at most hidden_size ({self.config.hidden_size}): a larger update is not "
                f"low-rank. Received: rank={rank}"
            )
        if self.lora_rank is not None:
            raise ValueError(
                f"LoRA is already enabled on this backbone (rank {self.lora_rank}). Received: rank={rank}"
            )
        for layer in self._flatten_layers(include_self=False):
            layer.trainable = False
        for attention in self.attention_layers():
            for projection in attention.projections():
                # Keras creates the factors frozen if the layer is not trainable.
                projection.trainable = True
                projection.enable_lora(rank, lora_alpha)
                projection.bias.trainable = False
        if embedding_rank:
            self.word_embeddings.trainable = True
            self.word_embeddings.enable_lora(embedding_rank)
        self.lora_rank = rank
        self.lora_alpha = rank if lora_alpha is None else lora_alpha
        self.lora_embedding_rank = embedding_rank or None

    def merge_lora(self):
        """Folds the LoRA updates into the kernels and removes the factors, in place.

        Afterwards the backbone is a plain one, every weight trainable, with
        the outputs it had (to rounding: ~1e-7 in float32, one ulp under bfloat16): what `export` and
        `convert` write. Returns the backbone.
        """
        if self.lora_rank is None:
            raise ValueError("This backbone has no LoRA factors to merge (call `enable_lora` first).")
        for attention in self.attention_layers():
            for projection in attention.projections():
                projection.merge_lora()
                # Frozen on its own in `enable_lora`; the layer-wide `trainable = True` below did not
                # reach it in a test (Keras 3.15), so it is set here.
                projection.bias.trainable = True
        if self.lora_embedding_rank:
            self.word_embeddings.merge_lora()
        for layer in self._flatten_layers(include_self=False):
            layer.trainable = True
        self.lora_rank = None
        self.lora_alpha = None
        gc.collect()  # once for every factor dropped (Keras collects after each; see `merge_lora` of the layers)
        self.lora_embedding_rank = None
        return self

    @property
    def word_embeddings(self):
        """The (V, E) `keras.layers.Embedding` the MLM head is tied to."""
        return self.embeddings.word_embeddings

    def get_config(self):
        return {"config": self.config.to_dict(), "remat": self.remat, "lora_rank": self.lora_rank,
                "lora_alpha": self.lora_alpha, "lora_embedding_rank": self.lora_embedding_rank, "name": self.name,
                "trainable": self.trainable, "dtype": keras.saving.serialize_keras_object(self.dtype_policy)}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("dtype"), dict):
            config["dtype"] = keras.saving.deserialize_keras_object(config["dtype"])
        return cls(**config)

    @classmethod
    def from_pretrained(cls, directory):
        """The backbone of the model saved in `directory` (a model directory, or a run's).

        The model may be any model built on a backbone (a pretrainer, a task
        model), albert-tf's own or a HuggingFace ALBERT directory; `directory`
        may also be a hub handle (`hf://albert/albert-base-v2`; see `albert_tf.hub`).
        """
        model_dir = open_model_dir(directory)
        if model_dir.converts_on_load:
            report = load_converted_dir(model_dir, lambda config, has_heads: cls(config))
            warn_newly_initialized(model_dir.path, report)
            return report.model
        model = load_saved_model(model_dir)
        backbone = model if isinstance(model, cls) else getattr(model, "backbone", None)
        if not isinstance(backbone, cls):
            raise ValueError(
                f"{directory} holds a {type(model).__name__}, which is not a {cls.__name__} "
                f"and has no {cls.__name__} backbone."
            )
        return backbone


def _block_list_index(config, layer_index):
    """Which list of `blocks` layer `layer_index` applies."""
    if config.sharing == "all":
        return config.group_index(layer_index)
    return layer_index


def _build_blocks(c, dtype, remat):
    """The distinct transformer blocks, as lists (see `AlbertBackbone`)."""

    def attention(name):
        return SelfAttention(
            hidden_size=c.hidden_size,
            num_heads=c.num_attention_heads,
            initializer_range=c.initializer_range,
            layer_norm_eps=c.layer_norm_eps,
            dropout=c.hidden_dropout,
            attention_dropout=c.attention_dropout,
            dtype=dtype,
            name=name,
        )

    def feed_forward(name):
        return FeedForward(
            hidden_size=c.hidden_size,
            intermediate_size=c.intermediate_size,
            activation=c.hidden_act,
            initializer_range=c.initializer_range,
            layer_norm_eps=c.layer_norm_eps,
            dropout=c.hidden_dropout,
            dtype=dtype,
            name=name,
        )

    if c.sharing == "all":
        used = c.used_groups
        return [
            [
                TransformerBlock(
                    attention=attention(f"group_{g}_inner_{i}_attention"),
                    feed_forward=feed_forward(f"group_{g}_inner_{i}_ffn"),
                    remat=remat, dtype=dtype, name=f"group_{g}_inner_{i}",
                )
                for i in range(c.inner_group_num)
            ] if g in used else []
            for g in range(c.num_hidden_groups)
        ]
    shared_attention = attention("shared_attention") if c.sharing == "attention" else None
    shared_ffn = feed_forward("shared_ffn") if c.sharing == "ffn" else None
    return [
        [
            TransformerBlock(
                attention=shared_attention or attention(f"layer_{l}_attention"),
                feed_forward=shared_ffn or feed_forward(f"layer_{l}_ffn"),
                remat=remat, dtype=dtype, name=f"layer_{l}",
            )
        ]
        for l in range(c.num_hidden_layers)
    ]
