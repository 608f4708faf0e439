"""`LoraDense`: Keras' Dense with LoRA factors that are saved as they are, and can be merged."""

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


@keras.saving.register_keras_serializable(package="albert_tf")
class LoraDense(keras.layers.Dense):
    """`keras.layers.Dense` whose LoRA state survives saving, plus `merge_lora`.

    The forward pass and `enable_lora(rank, lora_alpha)` are Keras' own: the
    kernel is frozen, A (in, rank) starts He-uniform and B (rank, out) at
    zero, so the layer's output is unchanged until B trains, and the `kernel`
    property is `kernel + (lora_alpha / rank) * A @ B`.

    What differs is saving. Keras' Dense writes the merged kernel and zeroes
    A and B on load; a reloaded model computes the same outputs but cannot
    train on (with A = B = 0 both factors get zero gradients). This layer
    writes the frozen kernel, bias, A and B as they are, so a reloaded LoRA
    model is the same model, optimizer-ready. Without LoRA it saves exactly
    what a Dense saves (kernel, bias), so checkpoints keep their layout.
    """

    def quantize(self, mode=None, type_check=True, config=None):
        # Keras' Dense refuses to quantize its subclasses; this one holds
        # exactly Dense's variables, so Dense's quantization applies as it is.
        if type_check and type(self) is not LoraDense:
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
                f"Layer '{self.name}' has LoRA enabled and expects {len(state)} variables (kernel, bias, "
                f"lora_kernel_a, lora_kernel_b); the file holds {len(store.keys())}. Was it saved "
                "without LoRA (or with another rank)?"
            )
        for i, variable in enumerate(state):
            variable.assign(store[str(i)])

    def _lora_state(self):
        return [v for v in (self._kernel, self.bias, self.lora_kernel_a, self.lora_kernel_b) if v is not None]

    def merge_lora(self):
        """Folds `(lora_alpha / rank) * A @ B` into the kernel and deletes A and B.

        The sum is taken in float32 (the variables' dtype under mixed
        precision too); the kernel becomes trainable again.
        """
        if not self.lora_enabled:
            raise ValueError(f"Layer '{self.name}' has no LoRA factors to merge (call `enable_lora` first).")
        delta = ops.matmul(self.lora_kernel_a, self.lora_kernel_b) * (self.lora_alpha / self.lora_rank)
        self._kernel.assign(ops.add(self._kernel, ops.cast(delta, self._kernel.dtype)))
        # Layer.__delattr__ untracks the variables, so they leave `weights` too.
        del self.lora_kernel_a
        del self.lora_kernel_b
        self._kernel.trainable = True
        self.lora_enabled = False
        self.lora_rank = None
        self.lora_alpha = None
