"""What every fine-tuning recipe produces from a file: `Encoded` data, with its notes and checks."""

import dataclasses

from input_pipeline import finetuning as data
from albert_tf.utils.errors import UserError


@dataclasses.dataclass
class Encoded:
    """A file made ready for a model.

    Attributes:
        inputs: list of dicts of int32 arrays, one per model input row.
        labels: list of labels (None for unlabelled data).
        examples: the examples read (for post-processing and messages).
        extra: task-specific data (SQuAD features, tagging word positions).
        notes: human-readable counts (skipped rows, truncated texts).
        skipped: the reader's `Skipped` rows (with `skip_invalid`).
    """

    inputs: list
    labels: list | None
    examples: list
    extra: list | None = None
    notes: list = dataclasses.field(default_factory=list)
    skipped: list = dataclasses.field(default_factory=list)


def check_label_set(label_names, where, what="labels"):
    """`label_names` when it has two or more distinct entries; a ValueError saying why otherwise.

    A classifier over one class learns nothing and scores 1.0 on any file with
    that label, so a training file with a single label (or a --label-names
    list of one) is refused before any training starts.
    """
    names = [data.check_label_name(name, where) for name in label_names]
    if len(names) < 2:
        found = f"a single {what[:-1]}, {names[0]!r}" if names else f"no {what}"
        raise UserError(f"{where} has {found}; a classifier needs at least 2. "
                         f"Check the file (or --label-column), or use --task regression for scores.")
    return names


def notes_for(result, what, truncated=0, truncated_what="truncated to max_seq_length"):
    notes = [result.summary(what)]
    if truncated:
        notes.append(f"{data.counted(truncated, what)} {truncated_what}")
    return notes
