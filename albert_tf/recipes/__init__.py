"""Fine-tuning recipes: what each `--task` reads, builds, trains and scores.

A recipe is the fine-tuning side of a task: it reads a file, builds the Keras
task model of `albert_tf.models` (classifier, tagger, question answerer,
multiple choice), trains it (`finetune`) and scores it. Also here: the
recipe registry, metrics, SQuAD post-processing and the training loop.

The names load on first use (PEP 562), so that `recipes.config` and
`recipes.names` load without TensorFlow: `albert-tf finetune` builds its flags
from them and reports a bad one before TensorFlow loads.
"""

from albert_tf.utils.lazy import lazy_names

# Public name -> module that defines it.
_EXPORTS = {
    "FinetuneConfig": "albert_tf.recipes.config",
    "finetune": "albert_tf.recipes.finetune",
    "load_run": "albert_tf.recipes.finetune",
    "RunSettings": "albert_tf.recipes.finetune",
    "run_settings": "albert_tf.recipes.finetune",
    "predict_examples": "albert_tf.recipes.prediction",
    "RECIPES": "albert_tf.recipes.registry",
    "get_recipe": "albert_tf.recipes.registry",
}

__all__, __getattr__, __dir__ = lazy_names(__name__, _EXPORTS)
