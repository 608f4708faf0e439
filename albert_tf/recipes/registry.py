"""`TASKS`: each `--task` name and the task that reads, encodes, builds and scores it.

A task turns a file into `Encoded` data (model inputs, labels, and what
post-processing needs), builds the matching task model, and scores or
formats that model's outputs: `SentenceTask`, `TaggingTask`, `SquadTask`,
`ChoiceTask`, one module each.
"""

from albert_tf.recipes.choice import ChoiceTask
from albert_tf.recipes.sentence import SentenceTask
from albert_tf.recipes.squad import SquadTask
from albert_tf.recipes.tagging import TaggingTask
from input_pipeline import finetuning as data
from input_pipeline.errors import UserError


TASKS = {
    **{name: SentenceTask(name, glue=spec) for name, spec in data.GLUE_TASKS.items()},
    "classification": SentenceTask("classification"),
    "regression": SentenceTask("regression", regression=True),
    "tagging": TaggingTask(),
    "squad": SquadTask("squad", version_2=False),
    "squad_v2": SquadTask("squad_v2", version_2=True),
    "race": ChoiceTask(),
}


def get_task(name):
    if name not in TASKS:
        raise UserError(f"Unknown task {name!r}. Valid tasks: {sorted(TASKS)}")
    return TASKS[name]
