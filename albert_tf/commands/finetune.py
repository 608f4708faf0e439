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
--strategy multi_worker trains on several machines (MultiWorkerMirroredStrategy):
run the same command on each, with the TF_CONFIG environment variable naming
the cluster and that machine's place in it; --batch-size is the global batch
over all of them (a multiple of the replicas), fixed shapes are on, and each
epoch runs in a strategy.run loop that takes the steps model.fit takes on one
device. Every worker evaluates on its own copy of the weights; only the chief
(worker 0, unless TF_CONFIG names a chief) writes OUT; the others never touch it.

The run is written in OUT's parent as .unfinished-NAME/ and becomes OUT when
it ends. SIGTERM (a preemption) stops it after the running step with a
checkpoint of model, optimizer and data position there (exit 143); rerunning
the same command resumes mid-epoch, to the weights an unstopped run ends with.
A kill (SIGKILL) loses the running epoch at most: every epoch's end is
checkpointed too, and Ctrl-C keeps those checkpoints: the rerun of the same
command resumes from the last finished epoch's end (a step cut short by
Ctrl-C is not whole). Ctrl-C before any epoch finished writes nothing.
"""


from albert_tf.commands.flags import (
    add_command, add_config_flags, add_strategy_flags, add_task_data_flags, config_kwargs, strategy_from_flags,
)
from albert_tf.commands.early_checks import out_checked_early
from albert_tf.commands.fine_tuning_run import train_then_publish
from albert_tf.commands.outputs import add_overwrite_flag
from albert_tf.hub import resolve
from albert_tf.model_dirs import TOKENIZER_DIR, find_tokenizer, resolve_model_dir
from albert_tf.strategy_names import STRATEGY_NAMES
from albert_tf.recipes.config import FinetuneConfig
from albert_tf.recipes.names import TASK_NAMES
from albert_tf.utils import files
from albert_tf.utils.layout import BEST_DIR, FINETUNE_RUN_FILE

# SIGTERM checkpoints the step reached into the unfinished run (`finetune`'s `stop_requested`).
STOPS_ON_SIGTERM = True


def add_parser(subparsers):
    parser = add_command(subparsers, "finetune", description=__doc__)
    parser.add_argument("--task", required=True, choices=sorted(TASK_NAMES), help="The task (and its file format).")
    parser.add_argument("--model", required=True, metavar="DIR",
                        help="A pretrained model directory or run directory (pretrain, convert or finetune output), "
                        "a HuggingFace save_pretrained directory, or a hub handle (hf://albert/albert-base-v2).")
    parser.add_argument("--random-init", action="store_true",
                        help="Use only the model's config, with freshly initialised weights (a baseline).")
    parser.add_argument("--tokenizer", metavar="DIR", help="Tokenizer directory (default: the model's own).")
    add_task_data_flags(parser)
    parser.add_argument("--out", required=True, metavar="DIR", help=f"Output directory ({BEST_DIR}/, {TOKENIZER_DIR}/, "
                        f"{FINETUNE_RUN_FILE}).")
    add_overwrite_flag(parser)
    add_config_flags(parser, FinetuneConfig, exclude=("task",))
    add_strategy_flags(parser, STRATEGY_NAMES, note=" multi_worker: run the command on every machine, TF_CONFIG "
                       "naming the cluster; --batch-size is the global batch; only the chief writes --out.")
    parser.add_argument("--fit-verbose", type=int, default=0, choices=(0, 1, 2),
                        help="Keras fit's verbosity: 1 a progress bar, 2 a line per epoch.")
    return parser


def run(args):
    # Deferred for start-up (here and below): these import TensorFlow, and the flags are read (their errors
    # reported) before.
    from albert_tf.distribute import is_chief
    from albert_tf.models import AlbertBackbone
    from albert_tf.recipes.finetune import finetune

    config = FinetuneConfig(task=args.task, **config_kwargs(FinetuneConfig, args, exclude=("task",)))
    # First: --logical-cpus must precede any other TensorFlow work, and a missing TPU is known in seconds.
    strategy_name, strategy = strategy_from_flags(args)
    source = resolve(args.model)
    model_dir = resolve_model_dir(source.path)
    tokenizer = find_tokenizer(model_dir, args.tokenizer)
    # The variables are made under the scope, as the strategy's (mirrored, or on the TPU).
    with strategy.scope():
        backbone = AlbertBackbone.from_pretrained(model_dir)
        if args.random_init:
            import keras

            keras.utils.set_random_seed(args.seed)
            backbone = AlbertBackbone(backbone.config)
    init = "random initialisation" if args.random_init else model_dir.path
    if source.commit is not None and not args.random_init:
        init = f"{source.spec} (commit {source.commit[:12]})"
    replicas = strategy.num_replicas_in_sync
    where = f" on {replicas} replica{'s' * (replicas > 1)} ({strategy_name})" if strategy_name != "default" else ""
    print(f"Fine-tuning {args.task} from {init} ({backbone.count_params():,} backbone parameters){where}")
    # A worker other than the chief writes nothing (finetune's own rule): it leaves --out alone. The chief of
    # several workers checks --out here, where it first knows it is the chief; on one machine, before it ran.
    chief = is_chief(strategy)
    if chief and not out_checked_early("finetune", args):
        files.check_new_output(args.out, args.overwrite)
    # Flushed: each epoch's line shows as it ends, also through a pipe.
    result = train_then_publish(
        lambda work: finetune(config, backbone, tokenizer, args.train, args.eval, work,
                              log=lambda line: print(line, flush=True), verbose=args.fit_verbose,
                              strategy=strategy, stop_requested=args.stop_requested),
        args.out, source, strategy)
    best = result["best"]
    saved = f"saved to {args.out}/best" if chief else "the chief saved it to its --out"
    print(f"Best epoch {result['best_epoch']}: " + ", ".join(
        f"{k} {v:.4f}" for k, v in best.items() if isinstance(v, float)) + f"; {saved}")
