"""Per-call caches of a shared block's weights: `cast_weights_once` under a mixed policy, and
`computed_once_per_call` for tensors derived from them (the fused attention kernel).

Keras 3 keeps a mixed policy's variables in float32 and casts one to the
compute dtype each time a layer reads it (the variable's `value` under the
`AutocastScope` a layer's `__call__` opens). ALBERT applies one shared block
L times, so its ~7M weights are cast L times per forward pass and the casts'
gradients L times more in the backward pass; without XLA (whose common
subexpression elimination would merge the casts) TensorFlow runs every one
(bench/shared_cast.py measures what that costs). Inside `cast_weights_once`
the first read of a variable casts it and every later read gets that tensor,
so the L applications share one cast and the backward pass one cast of the
summed gradient.

Numerics: the forward pass is bit-identical (a cast is deterministic). The
L gradients of a shared weight are summed in the compute dtype, then cast to
float32, where Keras casts each to float32 first and sums in float32: a
difference at bfloat16 rounding (~2^-8 relative), the precision each of
those gradients was computed in.

Keras exports no hook for this: the scope is Keras' own `AutocastScope`
with a cache, entered where a layer's `__call__` would enter one. Layers
inside whose compute dtype is the same keep using it (`Layer.__call__`
opens a new scope only for another dtype or a layer that does not
autocast), so LayerNormalization's and Embedding's float32 variables stay
uncast, as they are without it.
"""

import contextlib
import contextvars

from keras.src.backend.common.variables import AutocastScope

# What `computed_once_per_call` keeps, while a `per_call_cache` is open.
_PER_CALL = contextvars.ContextVar("albert_tf_per_call_cache", default=None)


class _CachingAutocastScope(AutocastScope):
    """An `AutocastScope` that casts each value once and returns that cast at every later read."""

    def __init__(self, dtype):
        super().__init__(dtype)
        # id(value) -> (value, its cast). The value is kept so its id cannot
        # be reused by another object while the scope lives.
        self._casts = {}

    def maybe_cast(self, value):
        cached = self._casts.get(id(value))
        if cached is None or cached[0] is not value:
            cached = (value, super().maybe_cast(value))
            self._casts[id(value)] = cached
        return cached[1]


@contextlib.contextmanager
def cast_weights_once(compute_dtype):
    """Within this context, layers computing in `compute_dtype` read each float variable's cast once.

    Use it around one call of a model (one forward pass); a cached cast must
    not outlive the values it was made from, so every call enters a fresh one.
    Not inside `keras.remat`: a recomputed function is differentiated with
    respect to its arguments and the variables it reads, and a cast made
    outside it is neither, so the weights would get no gradient.

    Args:
        compute_dtype: the layers' compute dtype, e.g. "bfloat16".
    """
    with _CachingAutocastScope(compute_dtype):
        yield


@contextlib.contextmanager
def per_call_cache():
    """Within this context, `computed_once_per_call` computes each key's value once.

    Use it around one inference call of a model, like `cast_weights_once`.
    """
    token = _PER_CALL.set({})
    try:
        yield
    finally:
        _PER_CALL.reset(token)


def computed_once_per_call(key, compute):
    """`compute()`, or inside a `per_call_cache` the value it gave for `key` the first time.

    A shared layer applied L times derives the same tensor from its weights
    at every application (the attention's fused (H, 3H) kernel: a copy of
    3H^2 values each time); within one call it can derive it once.

    Args:
        key: hashable, unique to the layer and the value, e.g. ("qkv", id(layer)).
        compute: no-argument function returning the value.
    """
    cache = _PER_CALL.get()
    if cache is None:
        return compute()
    if key not in cache:
        cache[key] = compute()
    return cache[key]
