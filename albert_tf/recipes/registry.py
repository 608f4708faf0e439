"""`RECIPES`: each `--task` name and the recipe that reads, encodes, builds and scores it.

A recipe turns a file into `Encoded` data (model inputs, labels, and what
post-processing needs), builds the matching task model, and scores or
formats that model's outputs: `SentenceRecipe`, `TaggingRecipe`, `SquadRecipe`,
`ChoiceRecipe`, one module each.
"""

from albert_tf.recipes.choice import ChoiceRecipe
from albert_tf.recipes.multilabel import MultiLabelRecipe
from albert_tf.recipes.names import MULTILABEL_TASK
from albert_tf.recipes.sentence import SentenceRecipe
from albert_tf.recipes.squad import SquadRecipe
from albert_tf.recipes.tagging import TaggingRecipe
from input_pipeline import finetuning as data
from albert_tf.utils.errors import UserError


RECIPES = {
    **{name: SentenceRecipe(name, glue=spec) for name, spec in data.GLUE_TASKS.items()},
    "classification": SentenceRecipe("classification"),
    "regression": SentenceRecipe("regression", regression=True),
    MULTILABEL_TASK: MultiLabelRecipe(),
    "tagging": TaggingRecipe(),
    "squad": SquadRecipe("squad", version_2=False),
    "squad_v2": SquadRecipe("squad_v2", version_2=True),
    "race": ChoiceRecipe(),
}


def get_recipe(name):
    if name not in RECIPES:
        raise UserError(f"Unknown task {name!r}. Valid tasks: {sorted(RECIPES)}")
    return RECIPES[name]
