"""`LoraDense`, `LoraEmbedding`: Keras' layers with LoRA factors that are saved as they are, and can be merged."""

import keras
from keras import ops


def check_lora_args(rank, lora_alpha):
    """ValueError unless `rank` is a positive int and `lora_alpha` None or a positive number."""
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ValueError(f"`rank` must be a positive integer. Received: rank={rank!r}")
    if lora_alpha is not None and (
        isinstance(lora_alpha, bool) or not isinstance(lora_alpha, (int, float)) or lora_alpha <= 0
    ):
        raise ValueError(f"`lora_alpha` must be a positive number or None. Received: lora_alpha={lora_alpha!r}")


class _SavedLoraState:
    """LoRA factors saved as they are, and `merge_lora`, for a Keras layer with `enable_lora`.

    Keras' Dense and Embedding write the merged weight and zero A and B on
    load; a reloaded model computes the same outputs but cannot train on
    (with A = B = 0 both factors get zero gradients). Layers with this mixin
    write the frozen weight, A and B as they are, so a reloaded LoRA model is
    the same model, optimizer-ready. Without LoRA they save exactly what the
    Keras layer saves, so checkpoints keep their layout.

    A subclass names its frozen weight and factors in `_lora_state` (saving
    order) and `_lora_parts` ((frozen weight, A attribute, B attribute)).
    """

    def quantize(self, mode=None, type_check=True, config=None):
        # Keras refuses to quantize subclasses of its layers; these hold
        # exactly the Keras layer's variables, so its quantization applies as it is.
        if type_check and type(self) not in (LoraDense, LoraEmbedding):
            raise self._not_implemented_error(self.quantize)
        super().quantize(mode, type_check=False, config=config)

    def save_own_variables(self, store):
        if not (self.built and self.lora_enabled and self.quantization_mode is None):
            return super().save_own_variables(store)
        for i, variable in enumerate(self._lora_state()):
            store[str(i)] = variable

    def load_own_variables(self, store):
        if not (self.built and self.lora_enabled and self.quantization_mode is None):
            return super().load_own_variables(store)
        state = self._lora_state()
        if len(store.keys()) != len(state):
            raise ValueError(
                f"Layer '{self.name}' has LoRA enabled and expects {len(state)} variables "
                f"({', '.join(v.name for v in state)}); the file holds {len(store.keys())}. Was it saved "
                "without LoRA (or with another rank)?"
            )
        for i, variable in enumerate(state):
            variable.assign(store[str(i)])

    def merge_lora(self):
        """Folds `(lora_alpha / rank) * A @ B` into the frozen weight and deletes A and B.

        The sum is taken in float32 (the variables' dtype under mixed
        precision too); the weight becomes trainable again.
        """
        if not self.lora_enabled:
            raise ValueError(f"Layer '{self.name}' has no LoRA factors to merge (call `enable_lora` first).")
        weight, a_name, b_name = self._lora_parts()
        delta = ops.matmul(getattr(self, a_name), getattr(self, b_name)) * (self.lora_alpha / self.lora_rank)
        weight.assign(ops.add(weight, ops.cast(delta, weight.dtype)))
        for name in (a_name, b_name):
            # What Layer.__delattr__ does, untracking the variable so that it leaves `weights` too, but
            # without its `gc.collect()` per variable: in a process holding a TensorFlow graph that took
            # most of a second each, 20 s to merge a 12-layer backbone. The caller may collect once.
            self._untrack_variable(getattr(self, name))
            super(keras.layers.Layer, self).__delattr__(name)
        weight.trainable = True
        self.lora_enabled = False
        self.lora_rank = None
        self.lora_alpha = None


@keras.saving.register_keras_serializable(package="albert_tf")
class LoraDense(_SavedLoraState, keras.layers.Dense):
    """`keras.layers.Dense` whose LoRA state survives saving, plus `merge_lora`.

    The forward pass and `enable_lora(rank, lora_alpha)` are Keras' own: the
    kernel is frozen, A (in, rank) starts He-uniform and B (rank, out) at
    zero, so the layer's output is unchanged until B trains, and the `kernel`
    property is `kernel + (lora_alpha / rank) * A @ B`. Saving and merging:
    `_SavedLoraState`.
    """

    def _lora_state(self):
        return [v for v in (self._kernel, self.bias, self.lora_kernel_a, self.lora_kernel_b) if v is not None]

    def _lora_parts(self):
        return self._kernel, "lora_kernel_a", "lora_kernel_b"


@keras.saving.register_keras_serializable(package="albert_tf")
class LoraEmbedding(_SavedLoraState, keras.layers.Embedding):
    """`keras.layers.Embedding` whose LoRA state survives saving, plus `merge_lora`.

    Keras' `enable_lora`: the (V, E) table is frozen, A (V, rank) starts
    He-uniform and B (rank, E) at zero, and the `embeddings` property (what
    lookups and the tied MLM decoder read) is `table + (lora_alpha / rank) * A @ B`.
    A rank-r update gives every word r numbers of its own to move along r
    shared directions of the table. Saving and merging: `_SavedLoraState`.
    """

    def _lora_state(self):
        return [self._embeddings, self.lora_embeddings_a, self.lora_embeddings_b]

    def _lora_parts(self):
        return self._embeddings, "lora_embeddings_a", "lora_embeddings_b"
