"""`albert-tf finetune`: fine-tune a pretrained (or converted, or fresh) ALBERT on a task.

    albert-tf finetune --task sst2 --model runs/demo/final \\
        --train glue/SST-2/train.tsv --eval glue/SST-2/dev.tsv --out runs/sst2
    albert-tf finetune --task classification --text-column text --label-column label \\
        --model DIR --train train.csv --eval test.csv --out runs/mine
    albert-tf finetune --task squad_v2 --max-seq-length 384 --model DIR \\
        --train train-v2.0.json --eval dev-v2.0.json --out runs/squad2

The best epoch (by the task's first metric) is kept in OUT/best; OUT/finetune.json
records the resolved settings and every epoch's metrics.
"""

import argparse
import os

from albert_tf.models import AlbertBackbone
from albert_tf.tasks import FinetuneConfig, TASKS, finetune
from input_pipeline.tokenizer import AlbertTokenizer


def add_parser(subparsers):
    parser = subparsers.add_parser(
        "finetune", help="Fine-tune ALBERT on a GLUE, SQuAD, RACE, tagging or CSV/JSONL task.",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    d = FinetuneConfig(task="sst2")
    parser.add_argument("--task", required=True, choices=sorted(TASKS))
    parser.add_argument("--model", required=True, metavar="DIR",
                        help="A pretrained directory (pretrainer, backbone or converted checkpoint).")
    parser.add_argument("--random-init", action="store_true",
                        help="Use only the model's config, with freshly initialised weights (a baseline).")
    parser.add_argument("--tokenizer", metavar="DIR",
                        help="Tokenizer directory (default: DIR/tokenizer, DIR/../tokenizer, or DIR itself).")
    parser.add_argument("--train", required=True, metavar="FILE")
    parser.add_argument("--eval", required=True, metavar="FILE")
    parser.add_argument("--out", required=True, metavar="DIR")
    parser.add_argument("--max-seq-length", type=int, default=d.max_seq_length)
    parser.add_argument("--batch-size", type=int, default=d.batch_size)
    parser.add_argument("--eval-batch-size", type=int, default=d.eval_batch_size)
    parser.add_argument("--epochs", type=int, default=d.epochs)
    parser.add_argument("--learning-rate", type=float, default=d.learning_rate,
                        help="Peak rate (default: 2e-5 * max(1, 768 / hidden_size) ** 2, by model width).")
    parser.add_argument("--warmup-fraction", type=float, default=d.warmup_fraction)
    parser.add_argument("--weight-decay", type=float, default=d.weight_decay)
    parser.add_argument("--dropout", type=float, default=None, help="Head dropout (default: the model config's).")
    parser.add_argument("--pooling", choices=("cls", "mean"), default=d.pooling,
                        help="Sentence heads read the pooled [CLS] (default) or the mean token state.")
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument("--truncate", action="store_true",
                        help="Cut texts longer than --max-seq-length (counted) instead of failing.")
    parser.add_argument("--skip-invalid", action="store_true",
                        help="Skip bad rows (counted, first reason shown) instead of failing on the first.")
    parser.add_argument("--no-bucket", dest="bucket", action="store_false",
                        help="Do not batch similar lengths together (batches are still padded per batch).")
    parser.add_argument("--text-column", default=d.text_column, help="classification/regression tables.")
    parser.add_argument("--text-pair-column", default=None)
    parser.add_argument("--label-column", default=d.label_column)
    parser.add_argument("--labels", nargs="+", default=None, metavar="LABEL",
                        help="The label (or tag) set, in class-id order (default: sorted labels of --train).")
    parser.add_argument("--doc-stride", type=int, default=d.doc_stride)
    parser.add_argument("--max-query-length", type=int, default=d.max_query_length)
    parser.add_argument("--n-best-size", type=int, default=d.n_best_size)
    parser.add_argument("--max-answer-length", type=int, default=d.max_answer_length)
    parser.add_argument("--null-score-diff-threshold", type=float, default=d.null_score_diff_threshold)
    parser.add_argument("--verbose", type=int, default=0, choices=(0, 1, 2), help="Keras fit verbosity.")
    return parser


def find_tokenizer(model_dir, tokenizer_dir=None):
    """The tokenizer for `model_dir`: explicit, or stored beside the model."""
    candidates = [tokenizer_dir] if tokenizer_dir else [
        os.path.join(model_dir, "tokenizer"), os.path.join(model_dir, os.pardir, "tokenizer"), model_dir,
    ]
    for candidate in candidates:
        if os.path.isfile(os.path.join(candidate, "spiece.model")):
            return AlbertTokenizer.load(candidate)
    raise ValueError(f"No tokenizer found (looked in {candidates}); pass --tokenizer DIR.")


def run(args):
    config = FinetuneConfig(
        task=args.task, max_seq_length=args.max_seq_length, batch_size=args.batch_size,
        eval_batch_size=args.eval_batch_size, epochs=args.epochs, learning_rate=args.learning_rate,
        warmup_fraction=args.warmup_fraction, weight_decay=args.weight_decay, dropout=args.dropout,
        pooling=args.pooling,
        seed=args.seed, truncate=args.truncate, skip_invalid=args.skip_invalid, bucket=args.bucket,
        text_column=args.text_column, text_pair_column=args.text_pair_column,
        label_column=args.label_column, label_names=tuple(args.labels) if args.labels else None,
        doc_stride=args.doc_stride, max_query_length=args.max_query_length,
        n_best_size=args.n_best_size, max_answer_length=args.max_answer_length,
        null_score_diff_threshold=args.null_score_diff_threshold,
    )
    tokenizer = find_tokenizer(args.model, args.tokenizer)
    backbone = AlbertBackbone.from_pretrained(args.model)
    if args.random_init:
        import keras

        keras.utils.set_random_seed(args.seed)
        backbone = AlbertBackbone(backbone.config)
    init = "random initialisation" if args.random_init else args.model
    print(f"Fine-tuning {args.task} from {init} ({backbone.count_params():,} backbone parameters)")
    result = finetune(config, backbone, tokenizer, args.train, args.eval, args.out, verbose=args.verbose)
    best = result["best"]
    print(f"Best epoch {result['best_epoch']}: " + ", ".join(
        f"{k} {v:.4f}" for k, v in best.items() if isinstance(v, float)) + f"; saved to {args.out}/best")
