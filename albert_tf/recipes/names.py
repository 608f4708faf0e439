"""Each `--task` name, without TensorFlow (`registry.RECIPES` holds the tasks themselves).

`albert-tf finetune` reads these, and `FinetuneConfig` checks its task with
them, before TensorFlow loads.
"""

from input_pipeline.finetuning.glue import GLUE_TASKS

# The `--task` names `SentenceRecipe` reads: classification and regression on sentences and pairs.
MULTILABEL_TASK = "multilabel"
SENTENCE_TASK_NAMES = (*GLUE_TASKS, "classification", "regression", MULTILABEL_TASK)
# The tasks `--class-weights` applies to: one weight per class, or per label's positives.
WEIGHTED_TASK_NAMES = ("classification", MULTILABEL_TASK)
TASK_NAMES = (*SENTENCE_TASK_NAMES, "tagging", "squad", "squad_v2", "race")
