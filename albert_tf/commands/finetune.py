"""`albert-tf finetune`: fine-tune a pretrained (or converted, or fresh) ALBERT on a task.

    albert-tf finetune --task sst2 --model runs/demo/final \\
        --train glue/SST-2/train.tsv --eval glue/SST-2/dev.tsv --out runs/sst2
    albert-tf finetune --task classification --text-column text --label-column label \\
        --model DIR --train train.csv --eval test.csv --out runs/mine
    albert-tf finetune --task squad_v2 --max-seq-length 384 --model DIR \\
        --train train-v2.0.json --eval dev-v2.0.json --out runs/squad2

The best epoch (by the task's first metric) is kept in OUT/best, with its
tokenizer; OUT/finetune.json records the resolved settings and every epoch's
metrics. For squad_v2 it also reports the no-answer threshold that maximizes
dev F1 (best_f1_threshold), which `predict` then uses by default.

Ctrl-C after an epoch finished keeps the best finished epoch: OUT is written
as a normal run's (usable by predict and export), and OUT/finetune.json says
"interrupted". Ctrl-C before that writes nothing.
"""

import os
import sys

from albert_tf.cli import EXIT_INTERRUPTED
from albert_tf.commands.flags import add_command, add_config_flags, config_kwargs
from albert_tf.commands.outputs import add_overwrite_flag, fresh_output_dir
from albert_tf.model_dirs import find_tokenizer, resolve_model_dir
from albert_tf.models import AlbertBackbone
from albert_tf.tasks import TASKS, FinetuneConfig, FinetuneInterrupted, finetune
from input_pipeline import files


def add_parser(subparsers):
    parser = add_command(subparsers, "finetune", description=__doc__)
    parser.add_argument("--task", required=True, choices=sorted(TASKS), help="The task (and its file format).")
    parser.add_argument("--model", required=True, metavar="DIR",
                        help="A pretrained model directory or run directory (pretrain, convert or finetune output), "
                        "or a HuggingFace save_pretrained directory.")
    parser.add_argument("--random-init", action="store_true",
                        help="Use only the model's config, with freshly initialised weights (a baseline).")
    parser.add_argument("--tokenizer", metavar="DIR", help="Tokenizer directory (default: the model's own).")
    parser.add_argument("--train", required=True, metavar="FILE", help="Training data.")
    parser.add_argument("--eval", required=True, metavar="FILE", help="Evaluation (dev) data.")
    parser.add_argument("--out", required=True, metavar="DIR", help="Output directory (best/, tokenizer/, "
                        "finetune.json).")
    add_overwrite_flag(parser)
    add_config_flags(parser, FinetuneConfig, exclude=("task",))
    parser.add_argument("--verbose", type=int, default=0, choices=(0, 1, 2), help="Keras fit verbosity.")
    return parser


def run(args):
    config = FinetuneConfig(task=args.task, **config_kwargs(FinetuneConfig, args, exclude=("task",)))
    for flag, path in (("--train", args.train), ("--eval", args.eval)):
        if not files.exists(path):
            raise ValueError(f"{flag} {path}: no such file or directory.")
    model_dir = resolve_model_dir(args.model)
    tokenizer = find_tokenizer(model_dir, args.tokenizer)
    backbone = AlbertBackbone.from_pretrained(model_dir)
    if args.random_init:
        import keras

        keras.utils.set_random_seed(args.seed)
        backbone = AlbertBackbone(backbone.config)
    init = "random initialisation" if args.random_init else model_dir
    print(f"Fine-tuning {args.task} from {init} ({backbone.count_params():,} backbone parameters)")
    try:
        with fresh_output_dir(args.out, args.overwrite, keep_when=_kept) as staging:
            # Flushed: each epoch's line shows as it ends, also through a pipe.
            result = finetune(config, backbone, tokenizer, args.train, args.eval, staging,
                              log=lambda line: print(line, flush=True), verbose=args.verbose)
    except KeyboardInterrupt as e:
        print(f"\nalbert-tf finetune: {_interrupted(e, args)}", file=sys.stderr)
        return EXIT_INTERRUPTED
    best = result["best"]
    print(f"Best epoch {result['best_epoch']}: " + ", ".join(
        f"{k} {v:.4f}" for k, v in best.items() if isinstance(v, float)) + f"; saved to {args.out}/best")


def _kept(error):
    return isinstance(error, FinetuneInterrupted) and error.best_epoch is not None


def _interrupted(error, args):
    """One line: where the run stopped, what was kept in --out, and what to do next."""
    where = str(error) if isinstance(error, FinetuneInterrupted) else "interrupted before training"
    if not _kept(error):
        return (f"{where}, before any epoch finished; nothing was kept (nothing written to {args.out}). "
                "Rerun the same command to start again.")
    return (f"{where}; kept the best finished epoch, {error.best_epoch} ({error.metric} "
            f"{error.best[error.metric]:.4f}), in {args.out} (finetune.json marks it \"interrupted\"). "
            f"Use it as it is (albert-tf predict --model {args.out}), or rerun with --overwrite to train "
            f"all {error.epochs} epochs.")
