"""One module per `albert-tf` subcommand; see `albert_tf.cli`.

`COMMANDS` names them with their one-line help, so that `albert-tf --help`,
`--version` and a mistyped command answer without importing any of them;
`albert-tf CMD ...` imports CMD's alone. A command's module builds its parser
from modules without TensorFlow and imports its work (TensorFlow: seconds)
when it runs, so that a bad flag is reported at once.
"""

# Command -> (module, one-line help), in the order `albert-tf --help` lists them.
COMMANDS = {
    "convert": ("albert_tf.commands.convert",
                "Convert checkpoints between HF transformers, original TF1 ALBERT and albert-tf."),
    "train-tokenizer": ("albert_tf.commands.train_tokenizer",
                        "Train a SentencePiece tokenizer (<pad>=0 <unk>=1 [CLS]=2 [SEP]=3 [MASK]=4)."),
    "create-data": ("albert_tf.commands.create_data",
                    "Write pretraining examples (SOP + n-gram MLM) as TFRecords."),
    "pretrain": ("albert_tf.commands.pretrain",
                 "Pretrain ALBERT on create-data TFRecords or raw text (dynamic masking); resumable."),
    "demo": ("albert_tf.commands.demo",
             "Train a tokenizer and a small ALBERT on IMDB reviews, evaluate held-out MLM/SOP accuracy."),
    "export": ("albert_tf.commands.export",
               "Export a model for TF-Serving (SavedModel) or on-device (TFLite)."),
    "serve": ("albert_tf.commands.serve",
              "Serve a SavedModel over TF-Serving's REST API (local testing)."),
    "finetune": ("albert_tf.commands.finetune",
                 "Fine-tune ALBERT on a GLUE, SQuAD, RACE, tagging or CSV/JSONL task."),
    "distill": ("albert_tf.commands.distill",
                "Train a smaller student on a fine-tuned teacher's outputs (a fine-tuning run directory)."),
    "predict": ("albert_tf.commands.predict",
                "Predict with a fine-tuned task model (file or stdin -> JSON lines)."),
}
