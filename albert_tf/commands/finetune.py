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

--strategy mirrored (a machine's GPUs, or --logical-cpus CPUs) or tpu (--tpu
NAME) trains data-parallel with --batch-size as the global batch; batches
then have fixed shapes (--fixed-shapes, on by default there): padded to
--max-seq-length, the partial last training batch dropped, the last
evaluation batch filled with padding rows that are not scored.
--strategy multi_worker is refused: Keras 3's model.fit, which fine-tuning
runs, does not work under MultiWorkerMirroredStrategy.

Ctrl-C after an epoch finished keeps the best finished epoch: OUT is written
as a normal run's (usable by predict and export), and OUT/finetune.json says
"interrupted". Ctrl-C before that writes nothing.
"""

import os
import sys

from albert_tf.cli import EXIT_INTERRUPTED
from albert_tf.commands.flags import (
    add_command, add_config_flags, add_strategy_flags, config_kwargs, strategy_from_flags,
)
from albert_tf.commands.outputs import add_overwrite_flag, fresh_output_dir
from albert_tf.distribute import STRATEGY_NAMES
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
    add_strategy_flags(parser, STRATEGY_NAMES, note=" multi_worker is refused (Keras 3's model.fit does not run "
                       "under MultiWorkerMirroredStrategy); use pretrain for several machines.")
    parser.add_argument("--verbose", type=int, default=0, choices=(0, 1, 2), help="Keras fit verbosity.")
    return parser


def run(args):
    config = FinetuneConfig(task=args.task, **config_kwargs(FinetuneConfig, args, exclude=("task",)))
    if args.strategy == "multi_worker":
        raise ValueError("--strategy multi_worker: finetune trains with Keras 3's model.fit, which does not run "
                         "under MultiWorkerMirroredStrategy; use --strategy mirrored (one machine's GPUs) or tpu.")
    # First: --logical-cpus must precede any other TensorFlow work, and a missing TPU is known in seconds.
    strategy_name, strategy = strategy_from_flags(args)
    for flag, path in (("--train", args.train), ("--eval", args.eval)):
        if not files.exists(path):
            raise ValueError(f"{flag} {path}: no such file or directory.")
    model_dir = resolve_model_dir(args.model)
    tokenizer = find_tokenizer(model_dir, args.tokenizer)
    # The variables are made under the scope, as the strategy's (mirrored, or on the TPU).
    with strategy.scope():
        backbone = AlbertBackbone.from_pretrained(model_dir)
        if args.random_init:
            import keras

            keras.utils.set_random_seed(args.seed)
            backbone = AlbertBackbone(backbone.config)
    init = "random initialisation" if args.random_init else model_dir
    replicas = strategy.num_replicas_in_sync
    where = f" on {replicas} replica{'s' * (replicas > 1)} ({strategy_name})" if strategy_name != "default" else ""
    print(f"Fine-tuning {args.task} from {init} ({backbone.count_params():,} backbone parameters){where}")
    try:
        with fresh_output_dir(args.out, args.overwrite, keep_when=_kept) as staging:
            # Flushed: each epoch's line shows as it ends, also through a pipe.
            result = finetune(config, backbone, tokenizer, args.train, args.eval, staging,
                              log=lambda line: print(line, flush=True), verbose=args.verbose, strategy=strategy)
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
