"""Multi-head self-attention with its residual and post-LayerNorm (BERT style)."""

import math

import keras
from keras import ops

from albert_tf.layers.cast_once import computed_once_per_call
from albert_tf.layers.common import layer_norm, truncated_normal
from albert_tf.layers.graph_forms import in_optimizer_forms, normalize
from albert_tf.layers.lora import LoraDense


@keras.saving.register_keras_serializable(package="albert_tf")
class SelfAttention(keras.layers.Layer):
    """`LayerNorm(x + dropout(Wo · attention(Wq x, Wk x, Wv x)))`.

    Query, key, value and output are separate H x H dense layers, as in the
    original checkpoints (`attention_1/self/{query,key,value}`,
    `attention_1/output/dense`), so weights map one to one. Under a mixed
    policy, and in a frozen inference graph, the call concatenates the query,
    key and value kernels into one (H, 3H) matmul; otherwise (float32
    training, XLA) it applies the three layers (see `_query_key_value`). The
    four are `LoraDense` layers (`projections()`): with LoRA enabled their
    `kernel` already includes the low-rank update, so every form applies it.

    Args:
        hidden_size: H.
        num_heads: attention heads; must divide H.
        initializer_range: stddev of the truncated-normal initializer.
        layer_norm_eps: LayerNorm epsilon.
        dropout: dropout on the output projection.
        attention_dropout: dropout on the attention probabilities.

    Call arguments:
        x: float tensor (batch, seq, H).
        attention_bias: float tensor (batch, 1, 1, seq): 0 where a key may be
            attended to, a large negative number at padding.

    Returns:
        Float tensor (batch, seq, H).
    """

    def __init__(
        self,
        hidden_size,
        num_heads,
        initializer_range=0.02,
        layer_norm_eps=1e-12,
        dropout=0.0,
        attention_dropout=0.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if hidden_size % num_heads:
            raise ValueError(
                "`num_heads` must divide `hidden_size`. "
                f"Received: num_heads={num_heads}, hidden_size={hidden_size}"
            )
        self.hidden_size = hidden_size
        self.num_heads = num_heads
        self.head_size = hidden_size // num_heads
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.dropout_rate = dropout
        self.attention_dropout_rate = attention_dropout
        self.query, self.key, self.value, self.output_dense = (
            LoraDense(hidden_size, kernel_initializer=truncated_normal(initializer_range),
                      dtype=self.dtype_policy, name=name)
            for name in ("query", "key", "value", "output_dense")
        )
        self.layer_norm = layer_norm(layer_norm_eps, "layer_norm", dtype=self.dtype_policy)
        self.attention_dropout = keras.layers.Dropout(attention_dropout, dtype=self.dtype_policy)
        self.output_dropout = keras.layers.Dropout(dropout, dtype=self.dtype_policy)

    def projections(self):
        """The (H, H) query, key, value and output `LoraDense` layers, the ones LoRA adapts.

        A method, not a property: Keras' saving walks a layer's attributes,
        and would store these layers under a second path.
        """
        return (self.query, self.key, self.value, self.output_dense)

    def build(self, input_shape):
        for layer in (self.query, self.key, self.value, self.output_dense, self.layer_norm):
            layer.build(input_shape)
        self.built = True

    def call(self, x, attention_bias, training=None):
        batch, seq = ops.shape(x)[0], ops.shape(x)[1]
        head_size = self.head_size
        # The projections run on (batch * seq, H) rows: a 2-D matmul followed by
        # its bias is what TensorFlow's oneDNN graph rewrite fuses into one op;
        # on (batch, seq, H) Keras' matmul is a tensordot (reshape, matmul,
        # reshape), which leaves the bias add as a separate pass over the output.
        rows = ops.reshape(x, (-1, self.hidden_size))  # (batch * seq, H)
        q, k, v = self._query_key_value(rows, batch, seq)  # each (batch, heads, seq, head_size)
        scores = ops.matmul(q, ops.swapaxes(k, -1, -2))  # (batch, heads, seq, seq)
        # Softmax in float32: under float16 the -1e4 bias and large scores overflow.
        scores = ops.cast(scores, "float32") / math.sqrt(head_size)
        # Keras casts `attention_bias` to the compute dtype under a mixed policy.
        scores = scores + ops.cast(attention_bias, "float32")
        probs = ops.cast(ops.softmax(scores, axis=-1), self.compute_dtype)
        probs = self.attention_dropout(probs, training=training)
        context = ops.transpose(ops.matmul(probs, v), (0, 2, 1, 3))  # (batch, seq, heads, head_size)
        context = ops.reshape(context, (-1, self.hidden_size))  # (batch * seq, H)
        out = self.output_dropout(self.output_dense(context), training=training)
        return ops.reshape(normalize(self.layer_norm, rows + out), (batch, seq, self.hidden_size))

    def _query_key_value(self, rows, batch, seq):
        """(batch * seq, H) rows -> q, k, v, each (batch, heads, seq, head_size).

        Two forms, the same values. Under a mixed policy (the oneDNN graph
        path, bf16), and in every precision inside `optimizer_forms` (the
        frozen inference graph `FrozenForward` traces for TensorFlow's graph
        optimizer): one (H, 3H) matmul instead of three (H, H) ones (larger
        GEMMs, and the backward pass gets dx from one matmul too; the query,
        key and value Dense layers only hold the variables), then one
        transpose puts every head's queries, keys and values in (seq,
        head_size) blocks; a split along the first axis shares its buffer,
        and the key transpose folds into the matmul. In float32 (compiled by
        XLA by default): three projections, each transposed alone, as
        keras-hub's attention does. XLA copies a transpose into each of its
        consumers, so the one transpose became three of the whole (3, batch,
        heads, seq, head_size) tensor per layer, and it runs the fused
        kernel's concatenation at every call and a concatenation of the q, k
        and v gradients per layer in the backward pass
        (bench/results/hlo_compare.md). Keras-quantized Dense layers
        (`keras.Model.quantize`) hold int8 kernels plus scales that only
        their own call applies, so they take the second form too.
        """
        heads, head_size = self.num_heads, self.head_size
        fused = self.compute_dtype != self.variable_dtype or in_optimizer_forms()
        if not fused or self.query.quantization_mode is not None:
            return tuple(
                ops.transpose(ops.reshape(dense(rows), (batch, seq, heads, head_size)), (0, 2, 1, 3))
                for dense in (self.query, self.key, self.value)
            )
        # Once per backbone call where it keeps a cache (inference): the L
        # applications of a shared layer would each copy the 3H^2 values.
        kernel, bias = computed_once_per_call(("qkv", id(self)), self._fused_qkv)
        qkv = ops.add(ops.matmul(rows, kernel), bias)  # (batch * seq, 3H)
        qkv = ops.transpose(ops.reshape(qkv, (batch, seq, 3, heads, head_size)), (2, 0, 3, 1, 4))
        # qkv: (3, batch, heads, seq, head_size). split (whose gradient is a
        # concat), not slices (whose gradients are zero-padded copies).
        return tuple(ops.reshape(t, (batch, heads, seq, head_size)) for t in ops.split(qkv, 3, axis=0))

    def _fused_qkv(self):
        """The query, key and value kernels side by side, (H, 3H), and their biases, (3H,), in the compute dtype."""
        kernel = ops.concatenate([self.query.kernel, self.key.kernel, self.value.kernel], axis=-1)
        bias = ops.concatenate([self.query.bias, self.key.bias, self.value.bias], axis=-1)
        return ops.cast(kernel, self.compute_dtype), ops.cast(bias, self.compute_dtype)

    def compute_output_shape(self, input_shape, attention_bias_shape=None):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            hidden_size=self.hidden_size,
            num_heads=self.num_heads,
            initializer_range=self.initializer_range,
            layer_norm_eps=self.layer_norm_eps,
            dropout=self.dropout_rate,
            attention_dropout=self.attention_dropout_rate,
        )
        return config
