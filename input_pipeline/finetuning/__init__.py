"""Fine-tuning data: readers for GLUE, CSV/JSONL, SQuAD, RACE and tagging, and per-batch padding."""

from input_pipeline.finetuning.batching import make_dataset
from input_pipeline.finetuning.encoding import TextEncoder
from input_pipeline.finetuning.examples import LabelMap, ReadResult, Skipped, TextExample, counted
from input_pipeline.finetuning.glue import GLUE_TASKS, GlueTask, read_glue
from input_pipeline.finetuning.race import ChoiceEncoder, ChoiceExample, read_race
from input_pipeline.finetuning.squad import (
    ContextPieces, SquadExample, SquadFeature, SquadFeaturizer, read_squad,
)
from input_pipeline.finetuning.tables import read_label_set, read_table
from input_pipeline.finetuning.tagging import TaggedExample, TaggingEncoder, read_tagging, tag_set
