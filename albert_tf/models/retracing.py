"""`RetracesOnNewVariables`: Keras' compiled fit/evaluate/predict functions follow changes of the variables."""


class RetracesOnNewVariables:
    """Mixin for a `keras.Model`: its train/test/predict functions are rebuilt when its variables change.

    Keras traces these functions once and reuses them; a traced function
    keeps reading the variables it was traced with. After
    `backbone.merge_lora()` (A @ B folded into the kernel, the factors
    deleted) a predict function traced before still added A @ B, and `predict`
    was off by the whole LoRA update with no error; after `enable_lora` a train
    function traced before would not train the new factors. Every `fit`,
    `evaluate` and `predict` asks for its function, so comparing the
    variables (and their `trainable` flags) then catches every change,
    whichever model or layer it was made on: a task's backbone is changed
    through `task.backbone`, which does not know the task.
    """

    def make_train_function(self, force=False):
        return super().make_train_function(force=self._variables_changed("train") or force)

    def make_test_function(self, force=False):
        return super().make_test_function(force=self._variables_changed("test") or force)

    def make_predict_function(self, force=False):
        return super().make_predict_function(force=self._variables_changed("predict") or force)

    def _variables_changed(self, kind):
        """Whether the variables differ from those `kind`'s function was last asked for with."""
        signature = hash(tuple((id(v), v.trainable) for v in self.weights))
        attribute = f"_{kind}_function_variables"
        changed = getattr(self, attribute, None) != signature
        setattr(self, attribute, signature)
        return changed
