"""`albert-tf distill`: train a smaller student ALBERT on a fine-tuned teacher's outputs.

    albert-tf distill --teacher runs/sst2 --train train.csv --eval dev.csv --out runs/sst2-small
    albert-tf distill --teacher runs/mine --train train.csv --eval dev.csv \\
        --unlabeled more_text.txt --student narrow --out runs/mine-small

The student learns from the teacher's temperature-softened outputs and the
true labels (--label-weight mixes them); --unlabeled adds in-domain text
(one text per line, or a .csv/.tsv/.jsonl table with the task's text columns)
that the teacher labels. It keeps the teacher's tokenizer, task, labels and
pooling. --student names its size relative to the teacher; --student-layers
and the other --student-* flags set it outright. A student as wide as the
teacher starts from the teacher's weights, running fewer layers of ALBERT's
shared block; a narrower one with the teacher's embedding size from the
teacher's embeddings (--student-init).

OUT is a fine-tuning run directory, as `finetune` writes it (predict, export,
serve and convert take it), with OUT/distill.json (the distillation settings
and every epoch's metrics) and OUT/distill_report.md, the teacher and the
student compared (dev metric, parameters, TFLite sizes, batch-1 latency on
this machine), also printed. --strategy, SIGTERM, a rerun that resumes and
Ctrl-C behave as in `finetune`. Distills sentence and sentence-pair
classification and regression.
"""

import os

from albert_tf.commands.early_checks import out_checked_early
from albert_tf.commands.fine_tuning_run import train_then_publish
from albert_tf.commands.flags import (
    add_command, add_config_flags, add_strategy_flags, add_task_data_flags, config_kwargs, strategy_from_flags,
)
from albert_tf.commands.outputs import add_overwrite_flag
from albert_tf.recipes.config import FinetuneConfig
from albert_tf.recipes.distill_config import DistillConfig
from albert_tf.strategy_names import STRATEGY_NAMES
from albert_tf.utils import files
from albert_tf.utils.errors import UserError
from albert_tf.hub import resolve
from albert_tf.model_dirs import TOKENIZER_DIR
from albert_tf.utils.layout import BEST_DIR, DISTILL_RUN_FILE, FINETUNE_RUN_FILE

STOPS_ON_SIGTERM = True
# Settings the student takes from its teacher's run, not from flags: the head it learns to imitate.
_FROM_TEACHER = ("task", "label_names", "pooling", "lora_rank", "lora_embedding_rank")


def add_parser(subparsers):
    parser = add_command(subparsers, "distill", description=__doc__)
    parser.add_argument("--teacher", required=True, metavar="RUN",
                        help="The teacher: a `finetune` (or `distill`) output directory, or its best/.")
    add_task_data_flags(parser)
    parser.add_argument("--unlabeled", nargs="+", metavar="FILE", default=[],
                        help="In-domain text the teacher labels: one text per line, or a .csv/.tsv/.jsonl table "
                        "with the task's text column(s).")
    parser.add_argument("--tokenizer", metavar="DIR",
                        help="Must be the teacher's tokenizer (the student keeps it); checked when given.")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help=f"Output run directory ({BEST_DIR}/, {TOKENIZER_DIR}/, {FINETUNE_RUN_FILE}, "
                        f"{DISTILL_RUN_FILE}).")
    add_overwrite_flag(parser)
    add_config_flags(parser, DistillConfig)
    add_config_flags(parser, FinetuneConfig, exclude=_FROM_TEACHER)
    add_strategy_flags(parser, STRATEGY_NAMES, note=" As in finetune.")
    parser.add_argument("--fit-verbose", type=int, default=0, choices=(0, 1, 2),
                        help="Keras fit's verbosity: 1 a progress bar, 2 a line per epoch.")
    parser.add_argument("--no-report", dest="report", action="store_false",
                        help="Skip the teacher/student report (it exports both models to TFLite and times them).")
    return parser


def run(args):
    # Deferred for start-up, as in `finetune`: these import TensorFlow, and the flags are read before.
    from albert_tf.commands.distill_report import report
    from albert_tf.distribute import is_chief
    from albert_tf.model_dirs import find_tokenizer
    from albert_tf.recipes.distill import check_teacher_task, distill
    from albert_tf.recipes.finetune import load_run

    distill_config = DistillConfig(**config_kwargs(DistillConfig, args))
    # First: --logical-cpus must precede any other TensorFlow work.
    strategy_name, strategy = strategy_from_flags(args)
    teacher_config, teacher, tokenizer, _ = load_run(args.teacher)
    check_teacher_task(teacher_config.task, args.teacher)
    if args.tokenizer is not None:
        given = find_tokenizer(args.tokenizer, args.tokenizer)
        if (given.model_proto, given.language) != (tokenizer.model_proto, tokenizer.language):
            raise UserError(f"--tokenizer {args.tokenizer} is not the teacher's tokenizer; the student keeps the "
                            f"teacher's ({args.teacher}). Drop --tokenizer.")
    kept = {name: getattr(teacher_config, name) for name in ("task", "label_names", "pooling")}
    config = FinetuneConfig(**kept, **config_kwargs(FinetuneConfig, args, exclude=_FROM_TEACHER))
    chief = is_chief(strategy)
    if chief and not out_checked_early("distill", args):
        files.check_new_output(args.out, args.overwrite)
    print(f"Distilling {args.teacher} ({teacher_config.task}, {teacher.count_params():,} parameters)"
          + (f" on {strategy.num_replicas_in_sync} replicas ({strategy_name})" if strategy_name != "default" else ""))
    log = lambda line: print(line, flush=True)  # noqa: E731 - each epoch's line shows as it ends
    result = train_then_publish(
        lambda work: distill(teacher, teacher_config, config, distill_config, tokenizer, args.train, args.eval, work,
                             unlabeled=args.unlabeled, log=log, verbose=args.fit_verbose, strategy=strategy,
                             stop_requested=args.stop_requested),
        args.out, resolve(args.teacher), strategy)
    if not chief:
        return
    best = result["best"]
    print(f"Best epoch {result['best_epoch']}: " + ", ".join(
        f"{k} {v:.4f}" for k, v in best.items() if isinstance(v, float))
        + f"; saved to {os.path.join(args.out, BEST_DIR)}")
    if args.report:
        report(args.teacher, args.out, log=print)
