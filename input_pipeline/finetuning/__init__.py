"""Fine-tuning data: readers for GLUE, CSV/JSONL, SQuAD, RACE and tagging, and per-batch padding.

The names load on first use (PEP 562): the readers' constants (`glue`,
`squad`) load without TensorFlow, which `batching` and `encoding` import, so
`albert-tf finetune` builds its flags and reports a bad one before it loads.
"""

from albert_tf.utils.lazy import lazy_names

# Public name -> module that defines it.
_EXPORTS = {
    "make_dataset": "input_pipeline.finetuning.batching",
    "TextEncoder": "input_pipeline.finetuning.encoding",
    "LabelMap": "input_pipeline.finetuning.examples",
    "check_label_name": "input_pipeline.finetuning.examples",
    "ReadResult": "input_pipeline.finetuning.examples",
    "Skipped": "input_pipeline.finetuning.examples",
    "TextExample": "input_pipeline.finetuning.examples",
    "counted": "input_pipeline.finetuning.examples",
    "GLUE_TASKS": "input_pipeline.finetuning.glue",
    "GlueTask": "input_pipeline.finetuning.glue",
    "read_glue": "input_pipeline.finetuning.glue",
    "ChoiceEncoder": "input_pipeline.finetuning.race",
    "ChoiceExample": "input_pipeline.finetuning.race",
    "read_race": "input_pipeline.finetuning.race",
    "ContextPieces": "input_pipeline.finetuning.squad",
    "SquadExample": "input_pipeline.finetuning.squad",
    "SquadFeature": "input_pipeline.finetuning.squad",
    "SquadFeaturizer": "input_pipeline.finetuning.squad",
    "read_squad": "input_pipeline.finetuning.squad",
    "read_multilabel_label_set": "input_pipeline.finetuning.multilabel",
    "read_multilabel_table": "input_pipeline.finetuning.multilabel",
    "read_label_set": "input_pipeline.finetuning.tables",
    "read_table": "input_pipeline.finetuning.tables",
    "TaggedExample": "input_pipeline.finetuning.tagging",
    "TaggingEncoder": "input_pipeline.finetuning.tagging",
    "read_tagging": "input_pipeline.finetuning.tagging",
    "tag_set": "input_pipeline.finetuning.tagging",
}

__all__, __getattr__, __dir__ = lazy_names(__name__, _EXPORTS)
