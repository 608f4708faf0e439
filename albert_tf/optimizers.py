"""Optimizers: ALBERT's LAMB for pretraining and AdamW for fine-tuning.

Both decide which variables skip weight decay by regex search over
`variable.path` (e.g. "albert_backbone/embeddings/layer_norm/gamma"), the
Keras 3 counterpart of the full TF1 variable name the original matched.
The decision is made once per variable in `build()`, never inside the graph.
"""

import re

import keras
import tensorflow as tf
from keras import ops

from albert_tf.schedules import WarmupLinearDecay

OPTIMIZER_NAMES = ("lamb", "adamw")
# The exclusions ALBERT's `optimization.py` passes to both of its optimizers.
DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm", "bias")


def _compile_patterns(argument_name, patterns):
    """Validates a list of regex strings and compiles them.

    Args:
        argument_name: str, the constructor argument, for error messages.
        patterns: list or tuple of str.

    Returns:
        A list of compiled `re.Pattern`.
    """
    if isinstance(patterns, str) or not all(
        isinstance(pattern, str) for pattern in patterns
    ):
        raise ValueError(
            f"`{argument_name}` must be a list of regex strings. "
            f"Received: {argument_name}={patterns!r}"
        )
    return [re.compile(pattern) for pattern in patterns]


def _matches_any(patterns, variable):
    return any(pattern.search(variable.path) for pattern in patterns)


def _densify(gradient):
    """Sums a TF `IndexedSlices` gradient into a dense tensor.

    Embedding lookups on the TensorFlow backend give `IndexedSlices` that
    repeat a row once per occurrence of a token in the batch. keras.ops apply
    elementwise functions to each repeat separately, so `square(g)` would be
    the sum of squares instead of the square of the summed row: Keras' own
    Adam and Lamb have this bug in their moments, and Keras' `global_clipnorm`
    and `clipnorm` in the norm they clip by. The original densified every
    gradient.

    Args:
        gradient: None, a dense tensor, or `tf.IndexedSlices` shaped like the
            variable (e.g. (vocab_size, embedding_size)).

    Returns:
        None or a dense tensor shaped like the variable.
    """
    if isinstance(gradient, tf.IndexedSlices):
        return tf.convert_to_tensor(gradient)
    return gradient


def _compile_multipliers(multipliers):
    """`learning_rate_multipliers` as (compiled regex, factor) pairs, checked."""
    pairs = list(dict(multipliers or {}).items())
    for pattern, factor in pairs:
        if not isinstance(factor, (int, float)) or isinstance(factor, bool) or factor < 0:
            raise ValueError(
                "`learning_rate_multipliers` maps regex strings to non-negative numbers. "
                f"Received: {pattern!r}: {factor!r}"
            )
    return [(re.compile(pattern), float(factor)) for pattern, factor in pairs]


class _PathRules:
    """What Lamb and AdamW decide per variable from `variable.path`, fixed in `build()`.

    `exclude_from_weight_decay` (regex strings: a matching variable is not
    decayed) and `learning_rate_multipliers` ({regex: factor}: a matching
    variable takes the first match's factor times the schedule's rate; LAMB:
    the whole step, its decay included; AdamW: the Adam step, not the
    decoupled decay). Both constructor arguments are kept as given for
    `get_config()`, and the base class's `exclude_from_weight_decay()` call,
    a second source of exclusions, is refused.
    """

    def _init_path_rules(self, exclude_from_weight_decay, learning_rate_multipliers):
        self._weight_decay_patterns = _compile_patterns("exclude_from_weight_decay", exclude_from_weight_decay)
        self._exclude_from_weight_decay_arg = list(exclude_from_weight_decay)
        self._multiplier_patterns = _compile_multipliers(learning_rate_multipliers)
        self._learning_rate_multipliers_arg = dict(learning_rate_multipliers or {})

    def exclude_from_weight_decay(self, var_list=None, var_names=None):
        raise ValueError(
            f"{type(self).__name__} takes its exclusions from the constructor argument "
            "`exclude_from_weight_decay`. Received a call with: "
            f"var_list={var_list!r}, var_names={var_names!r}"
        )

    def _excluded_from_weight_decay(self, variable):
        return _matches_any(self._weight_decay_patterns, variable)

    def build(self, var_list):
        if self.built:
            return
        self._rate_factors = tuple(
            next((factor for pattern, factor in self._multiplier_patterns if pattern.search(v.path)), 1.0)
            for v in var_list
        )
        super().build(var_list)

    def _scaled_rate(self, variable, learning_rate):
        factor = self._rate_factors[self._get_variable_index(variable)]
        return learning_rate if factor == 1.0 else learning_rate * factor

    def get_config(self):
        config = super().get_config()
        config["exclude_from_weight_decay"] = self._exclude_from_weight_decay_arg
        config["learning_rate_multipliers"] = dict(self._learning_rate_multipliers_arg)
        return config


class _DenseGradients:
    """Densifies gradients in `apply`, before Keras clips them or any update sees them.

    Densifying later, in `update_step`, is too late for clipping: with
    `global_clipnorm=1.0` (what `model.fit` uses for the recipe) Keras
    measured the token-type and position embedding gradients, repeated rows
    of `IndexedSlices`, with the wrong norm, and 30 AdamW steps of `fit` then
    drifted 2e-4 in loss from the same steps in HF transformers
    (bench/reference_curve.py).
    """

    def apply(self, grads, trainable_variables=None):
        return super().apply([_densify(g) for g in grads], trainable_variables)


@keras.saving.register_keras_serializable(package="albert_tf")
class Lamb(_PathRules, _DenseGradients, keras.optimizers.Optimizer):
    """LAMB exactly as ALBERT's `lamb_optimizer.py` (google-research/albert).

    For each variable `w` with gradient `g`:

        m = beta_1 * m + (1 - beta_1) * g
        v = beta_2 * v + (1 - beta_2) * g**2
        update = m / (sqrt(v) + epsilon)              # NO bias correction
        update += weight_decay_rate * w               # unless excluded
        r = ||w|| / ||update|| if both > 0 else 1     # unless excluded
        w -= learning_rate * r * update

    This differs from `keras.optimizers.Lamb`, which bias-corrects m and v,
    uses epsilon 1e-7, has no decay inside the trust ratio and excludes
    nothing from layer adaptation. The weight decay lives inside the trust
    ratio's denominator, which is why Keras' decoupled `weight_decay` (applied
    before the update) cannot express it and is rejected here.

    Gradient clipping (`global_clipnorm=1.0` in ALBERT's recipe), loss
    scaling and learning-rate schedules come from the Keras base class.

    Args:
        learning_rate: float or `keras.optimizers.schedules.LearningRateSchedule`.
            Defaults to the paper's peak rate for batch 4096.
        beta_1: float, decay of the first-moment estimate.
        beta_2: float, decay of the second-moment estimate.
        epsilon: float, added to `sqrt(v)`; the original uses 1e-6.
        weight_decay_rate: float, L2 decay added to the update (0.01 in
            ALBERT pretraining).
        exclude_from_weight_decay: list of regex strings; a variable whose
            `path` matches any of them gets no weight decay.
        exclude_from_layer_adaptation: list of regex strings; a variable whose
            `path` matches any of them uses trust ratio 1. `None` reuses
            `exclude_from_weight_decay`, as the original does (the original
            also fell back on an empty list; here `[]` adapts every variable).
        learning_rate_multipliers: optional dict of regex string -> factor;
            a variable whose `path` matches takes that factor times the rate
            (the first matching pattern counts). Not in the original.
        **kwargs: base `keras.optimizers.Optimizer` arguments such as `name`,
            `clipnorm`, `global_clipnorm`, `gradient_accumulation_steps`.
    """

    def __init__(
        self,
        learning_rate=0.00176,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-6,
        weight_decay_rate=0.01,
        exclude_from_weight_decay=DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY,
        exclude_from_layer_adaptation=None,
        learning_rate_multipliers=None,
        **kwargs,
    ):
        # Keras' base `weight_decay` is decoupled and applied before the
        # update; accepting it would stack a second, differently placed decay.
        weight_decay = kwargs.pop("weight_decay", None)
        if weight_decay is not None:
            raise ValueError(
                "Lamb takes its decay from `weight_decay_rate`, not the base "
                f"`weight_decay`. Received: weight_decay={weight_decay!r}"
            )
        if weight_decay_rate < 0:
            raise ValueError(
                "`weight_decay_rate` must be non-negative. Received: "
                f"weight_decay_rate={weight_decay_rate}"
            )
        kwargs.setdefault("name", "lamb")
        super().__init__(learning_rate=learning_rate, weight_decay=None, **kwargs)
        self._init_path_rules(exclude_from_weight_decay, learning_rate_multipliers)
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.weight_decay_rate = weight_decay_rate
        self._layer_adaptation_patterns = (
            self._weight_decay_patterns
            if exclude_from_layer_adaptation is None
            else _compile_patterns(
                "exclude_from_layer_adaptation", exclude_from_layer_adaptation
            )
        )
        # Kept as given so that `get_config()` returns the argument verbatim.
        self._exclude_from_layer_adaptation_arg = (
            None
            if exclude_from_layer_adaptation is None
            else list(exclude_from_layer_adaptation)
        )

    def build(self, var_list):
        """Creates the m and v slots and fixes each variable's exclusions.

        Args:
            var_list: list of model variables this optimizer will update.
        """
        if self.built:
            return
        super().build(var_list)
        self._momentums = []
        self._velocities = []
        for variable in var_list:
            self._momentums.append(
                self.add_variable_from_reference(variable, "momentum")
            )
            self._velocities.append(
                self.add_variable_from_reference(variable, "velocity")
            )
        # Python booleans indexed like `var_list`: update_step then branches at
        # trace time instead of matching strings inside the graph.
        self._use_weight_decay_flags = tuple(
            self.weight_decay_rate > 0
            and not self._excluded_from_weight_decay(variable)
            for variable in var_list
        )
        self._use_layer_adaptation_flags = tuple(
            not _matches_any(self._layer_adaptation_patterns, variable)
            for variable in var_list
        )

    def update_step(self, gradient, variable, learning_rate):
        """Applies one LAMB update to `variable`.

        Args:
            gradient: dense tensor shaped like `variable` (densified,
                clipped and unscaled already).
            variable: the model variable to update.
            learning_rate: scalar tensor for this step.
        """
        dtype = variable.dtype
        gradient = ops.cast(gradient, dtype)
        learning_rate = ops.cast(learning_rate, dtype)
        index = self._get_variable_index(variable)
        m = self._momentums[index]
        v = self._velocities[index]

        self.assign(m, self.beta_1 * m + (1.0 - self.beta_1) * gradient)
        self.assign(
            v, self.beta_2 * v + (1.0 - self.beta_2) * ops.square(gradient)
        )
        update = m / (ops.sqrt(v) + self.epsilon)
        if self._use_weight_decay_flags[index]:
            update = update + self.weight_decay_rate * variable
        if self._use_layer_adaptation_flags[index]:
            weight_norm = ops.sqrt(ops.sum(ops.square(variable)))
            update_norm = ops.sqrt(ops.sum(ops.square(update)))
            # The unselected branch may divide by 0; `where` discards it and
            # no gradient ever flows through an optimizer step.
            trust_ratio = ops.where(
                (weight_norm > 0) & (update_norm > 0),
                weight_norm / update_norm,
                ops.ones_like(weight_norm),
            )
            update = trust_ratio * update
        self.assign_sub(variable, self._scaled_rate(variable, learning_rate) * update)

    def get_config(self):
        config = super().get_config()
        # Always None for Lamb, and the constructor rejects anything else.
        del config["weight_decay"]
        config.update(
            {
                "beta_1": self.beta_1,
                "beta_2": self.beta_2,
                "epsilon": self.epsilon,
                "weight_decay_rate": self.weight_decay_rate,
                "exclude_from_layer_adaptation": (
                    self._exclude_from_layer_adaptation_arg
                ),
            }
        )
        return config


@keras.saving.register_keras_serializable(package="albert_tf")
class AdamW(_PathRules, _DenseGradients, keras.optimizers.AdamW):
    """Keras AdamW whose weight-decay exclusions match `variable.path`.

    Adam with bias correction and decoupled weight decay
    (`w -= learning_rate * weight_decay * w` before the Adam step), bit for
    bit Keras' arithmetic, with the step's shared terms (the rate, the bias
    corrections) made once per step rather than once per variable.
    `keras.optimizers.AdamW.exclude_from_weight_decay(var_names=...)` matches
    `variable.name`, which is only the leaf ("gamma") on the JAX backend and
    the full path on TensorFlow; matching `path` here makes "LayerNorm" and
    "layer_norm" exclude the same variables on every backend.

    ALBERT's own fine-tuning optimizer (`AdamWeightDecayOptimizer`) skipped
    bias correction; Keras' bias-corrected Adam is used instead. That only
    changes the effective step size early on (roughly the first
    1 / (1 - beta_2) = 1,000 steps), where warmup keeps steps small anyway.

    Args:
        learning_rate: float or `keras.optimizers.schedules.LearningRateSchedule`.
        weight_decay: float, decoupled decay rate (0.01 in ALBERT).
        beta_1: float, decay of the first-moment estimate.
        beta_2: float, decay of the second-moment estimate.
        epsilon: float; the original uses 1e-6.
        exclude_from_weight_decay: list of regex strings; a variable whose
            `path` matches any of them is not decayed.
        learning_rate_multipliers: optional dict of regex string -> factor
            for the Adam step of the variables whose `path` matches.
        **kwargs: base `keras.optimizers.Optimizer` arguments.
    """

    def __init__(
        self,
        learning_rate=5e-5,
        weight_decay=0.01,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-6,
        exclude_from_weight_decay=DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY,
        learning_rate_multipliers=None,
        **kwargs,
    ):
        kwargs.setdefault("name", "adamw")
        super().__init__(
            learning_rate=learning_rate,
            weight_decay=weight_decay,
            beta_1=beta_1,
            beta_2=beta_2,
            epsilon=epsilon,
            **kwargs,
        )
        self._init_path_rules(exclude_from_weight_decay, learning_rate_multipliers)
        self._step_terms = {}

    def build(self, var_list):
        """Fixes the excluded variables, then creates the Adam slots.

        Args:
            var_list: list of model variables this optimizer will update.
        """
        if self.built:
            return
        excluded = [variable for variable in var_list if self._excluded_from_weight_decay(variable)]
        # The base class keys exclusions by variable identity, which survives
        # the TF backend handing it replica-local copies under a strategy.
        # (Called on the base: `_PathRules` refuses the call from anyone else.)
        keras.optimizers.Optimizer.exclude_from_weight_decay(self, var_list=excluded)
        super().build(var_list)

    def _apply_weight_decay(self, variables):
        """Nothing here: `update_step` decays each variable just before its Adam step."""

    def update_step(self, gradient, variable, learning_rate):
        """Keras' AdamW step for `variable`: its decoupled decay, then the Adam step.

        The same arithmetic as `keras.optimizers.AdamW`, in the same order,
        with what every variable shares computed once per step, not once per
        variable: Keras evaluates the learning-rate schedule again for each
        decayed variable and the bias corrections for each variable, half of
        a fine-tuning step's ops (1,285 of a tiny classifier's 2,681), each
        traced and run at every step.

        Args:
            gradient: dense tensor shaped like `variable`.
            variable: the model variable to update.
            learning_rate: scalar tensor, the schedule's rate this step (the
                same tensor for every variable of the step).
        """
        dtype = variable.dtype
        shared = self._shared_terms(learning_rate, dtype)
        if self.weight_decay is not None and self._use_weight_decay(variable):
            self.assign_sub(variable, variable * shared["weight_decay"] * shared["learning_rate"])
        index = self._get_variable_index(variable)
        factor = self._rate_factors[index]
        alpha = shared["alphas"].get(factor)
        if alpha is None:
            rate = ops.cast(self._scaled_rate(variable, learning_rate), dtype)
            alpha = shared["alphas"][factor] = rate * shared["sqrt_1_minus_beta_2_power"] / shared[
                "1_minus_beta_1_power"]
        gradient = ops.cast(gradient, dtype)
        m, v = self._momentums[index], self._velocities[index]
        self.assign_add(m, ops.multiply(ops.subtract(gradient, m), 1 - self.beta_1))
        self.assign_add(v, ops.multiply(ops.subtract(ops.square(gradient), v), 1 - self.beta_2))
        if self.amsgrad:
            v_hat = self._velocity_hats[index]
            self.assign(v_hat, ops.maximum(v_hat, v))
            v = v_hat
        self.assign_sub(variable, ops.divide(ops.multiply(m, alpha), ops.add(ops.sqrt(v), self.epsilon)))

    def apply(self, grads, trainable_variables=None):
        # One step's shared terms (`_shared_terms`), made inside this call and
        # dropped as it ends: a float learning rate is the same variable at
        # every step, so the step and not the rate tells a new set of terms.
        try:
            return super().apply(grads, trainable_variables)
        finally:
            self._step_terms.clear()

    def _shared_terms(self, learning_rate, dtype):
        """The step's terms every variable of `dtype` shares, made at the first such variable's update."""
        terms = self._step_terms.get(dtype)
        if terms is None:
            local_step = ops.cast(self.iterations + 1, dtype)
            beta_1_power = ops.power(ops.cast(self.beta_1, dtype), local_step)
            beta_2_power = ops.power(ops.cast(self.beta_2, dtype), local_step)
            terms = self._step_terms[dtype] = {
                "learning_rate": ops.cast(learning_rate, dtype),
                "weight_decay": ops.cast(self.weight_decay, dtype) if self.weight_decay is not None else None,
                "sqrt_1_minus_beta_2_power": ops.sqrt(1 - beta_2_power),
                "1_minus_beta_1_power": 1 - beta_1_power,
                "alphas": {},
            }
        return terms


def build_optimizer(name, *, learning_rate, warmup_steps, total_steps, weight_decay, clip_norm=0.0,
                    loss_scale=False, learning_rate_multipliers=None):
    """LAMB or AdamW on the warmup-then-linear-decay schedule, as ALBERT trains.

    Args:
        name: one of `OPTIMIZER_NAMES`: "lamb" (pretraining) or "adamw" (fine-tuning).
        learning_rate: peak learning rate, reached after `warmup_steps`.
        warmup_steps: steps of linear warmup from 0.
        total_steps: the step at which the rate has decayed linearly to 0.
        weight_decay: decoupled weight decay (LayerNorm and biases excluded).
        clip_norm: clip the gradient to this global norm inside `apply()`;
            0 leaves it to the caller. Under a distribution strategy Keras
            clips each replica's gradient before its all-reduce, which only
            equals clipping the global gradient on a single replica.
        loss_scale: wrap in `keras.optimizers.LossScaleOptimizer` (dynamic
            loss scaling), which float16 training needs.
        learning_rate_multipliers: optional dict of regex string -> factor
            over `variable.path` (see `Lamb`).

    Returns:
        A Keras optimizer.
    """
    if name not in OPTIMIZER_NAMES:
        raise ValueError(f"`name` must be one of {OPTIMIZER_NAMES}. Received: name={name!r}")
    schedule = WarmupLinearDecay(learning_rate, warmup_steps, total_steps)
    kwargs = {"global_clipnorm": clip_norm} if clip_norm else {}
    kwargs["learning_rate_multipliers"] = learning_rate_multipliers
    if name == "lamb":
        optimizer = Lamb(learning_rate=schedule, weight_decay_rate=weight_decay, **kwargs)
    else:
        optimizer = AdamW(learning_rate=schedule, weight_decay=weight_decay, **kwargs)
    # float16 gradients underflow without it; bfloat16 has float32's range.
    return keras.optimizers.LossScaleOptimizer(optimizer) if loss_scale else optimizer
