"""`albert-tf pretrain`: pretrain ALBERT (MLM + SOP) under any tf.distribute strategy, resumably."""

import os
import sys

from albert_tf.config import PRESETS, AlbertConfig
from albert_tf.distribute import STRATEGY_NAMES
from albert_tf.training.config import OPTIMIZERS, PRECISIONS, TrainerConfig

# Flag -> AlbertConfig field, for shrinking a preset (tiny runs, tests).
_MODEL_OVERRIDES = {
    "embedding_size": "embedding_size",
    "hidden_size": "hidden_size",
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "intermediate_size": "intermediate_size",
    "num_hidden_groups": "num_hidden_groups",
}


def add_parser(subparsers):
    parser = subparsers.add_parser(
        "pretrain",
        help="Pretrain ALBERT on create-data TFRecords or raw text (dynamic masking); resumable.",
        description="Rerunning the same command resumes from RUN_DIR's last checkpoint.",
    )
    model = parser.add_argument_group("model")
    source = model.add_mutually_exclusive_group()
    source.add_argument("--preset", choices=sorted(PRESETS), default="base")
    source.add_argument("--config", metavar="JSON", help="An AlbertConfig / albert_config.json file.")
    for flag in _MODEL_OVERRIDES:
        model.add_argument("--" + flag.replace("_", "-"), type=int)

    data = parser.add_argument_group("data")
    data.add_argument("--data", nargs="+", required=True, metavar="PATH",
                      help="A create-data output directory, or raw text files/directories (needs --tokenizer).")
    data.add_argument("--tokenizer", metavar="DIR", help="train-tokenizer output; saved into RUN_DIR.")
    data.add_argument("--format", default="auto", help="Raw text format (see create-data).")
    data.add_argument("--column", help="CSV column / JSONL field with the text.")
    data.add_argument("--max-seq-length", type=int, help="Raw text only (default 512).")
    data.add_argument("--max-predictions-per-seq", type=int, help="Raw text only (default 20).")
    data.add_argument("--task", choices=("sop", "nsp"), help="Raw text only (default sop).")

    training = parser.add_argument_group("training")
    defaults = TrainerConfig()
    training.add_argument("--out", required=True, metavar="RUN_DIR")
    training.add_argument("--strategy", choices=STRATEGY_NAMES, default="default")
    training.add_argument("--tpu", help="TPU name or address for --strategy tpu.")
    training.add_argument("--logical-cpus", type=int,
                          help="Split the CPU into this many devices (mirrored runs on a CPU-only machine).")
    training.add_argument("--batch-size", type=int, default=defaults.global_batch_size,
                          help="Global batch per optimizer step (over replicas and micro-batches).")
    training.add_argument("--steps", type=int, default=defaults.num_steps)
    training.add_argument("--learning-rate", type=float, default=defaults.learning_rate)
    training.add_argument("--warmup-steps", type=int, default=defaults.warmup_steps)
    training.add_argument("--optimizer", choices=OPTIMIZERS, default=defaults.optimizer)
    training.add_argument("--weight-decay", type=float, default=defaults.weight_decay)
    training.add_argument("--clip-norm", type=float, default=defaults.clip_norm)
    training.add_argument("--accumulation-steps", type=int, default=defaults.accumulation_steps)
    training.add_argument("--mixed-precision", choices=PRECISIONS, default=defaults.mixed_precision)
    training.add_argument("--jit-compile", action="store_true",
                          help="Compile the forward and backward pass with XLA (faster; not on TPU, which always compiles).")
    training.add_argument("--remat", action="store_true",
                          help="Recompute each shared layer's activations in the backward pass: less memory, more compute.")
    training.add_argument("--checkpoint-every", type=int, default=defaults.checkpoint_every)
    training.add_argument("--keep-checkpoints", type=int, default=defaults.keep_checkpoints)
    training.add_argument("--log-every", type=int, default=defaults.log_every)
    training.add_argument("--seed", type=int, default=defaults.seed, help="Seed of the initialization and the data.")
    return parser


def run(args):
    if args.logical_cpus:
        # Must precede every other TensorFlow call of the process.
        from albert_tf.distribute import configure_logical_cpus

        configure_logical_cpus(args.logical_cpus)
    from albert_tf.distribute import get_strategy
    from albert_tf.training import Trainer, TrainingDiverged, pretraining_dataset_fn

    trainer_config = TrainerConfig(
        global_batch_size=args.batch_size,
        num_steps=args.steps,
        learning_rate=args.learning_rate,
        warmup_steps=args.warmup_steps,
        optimizer=args.optimizer,
        weight_decay=args.weight_decay,
        clip_norm=args.clip_norm,
        accumulation_steps=args.accumulation_steps,
        mixed_precision=args.mixed_precision,
        jit_compile=args.jit_compile,
        remat=args.remat,
        checkpoint_every=args.checkpoint_every,
        keep_checkpoints=args.keep_checkpoints,
        log_every=args.log_every,
        seed=args.seed,
    )
    source, data_config, vocab_size, tokenizer, data_info = _load_data(args)
    model_config = _model_config(args, vocab_size, data_config.max_seq_length)
    strategy = get_strategy(args.strategy, tpu=args.tpu) if args.strategy == "tpu" else get_strategy(args.strategy)
    trainer = Trainer(
        model_config, trainer_config, args.out, pretraining_dataset_fn(source, data_config, seed=args.seed),
        strategy=strategy, tokenizer=tokenizer,
        run_info={"data": data_info, "strategy": args.strategy, "replicas": strategy.num_replicas_in_sync},
    )
    # float32 stays the default: bfloat16 was not measured faster on CPUs without bf16 units.
    mixed = trainer_config.mixed_precision != "float32"
    detail = " (weights, LayerNorm, softmax and losses in float32)" if mixed else ""
    print(f"Precision: {trainer_config.mixed_precision}{detail}; remat: {'on' if trainer_config.remat else 'off'}")
    try:
        trainer.train()
    except TrainingDiverged as e:
        print(f"albert-tf pretrain: {e}", file=sys.stderr)
        return 1
    return 0


def _load_data(args):
    """Returns (source, data_config, vocab_size, tokenizer or None, data_info for the run files)."""
    import dataclasses

    from input_pipeline import AlbertTokenizer, Corpus, PretrainingDataConfig, TokenizedCorpus, read_metadata

    tokenizer = AlbertTokenizer.load(args.tokenizer) if args.tokenizer else None
    raw_only = {"max_seq_length": args.max_seq_length, "max_predictions_per_seq": args.max_predictions_per_seq,
                "task": args.task}
    if len(args.data) == 1 and os.path.isfile(os.path.join(args.data[0], "metadata.json")):
        metadata = read_metadata(args.data[0])
        data_config = metadata["config"]
        for name, value in raw_only.items():
            if value is not None and value != getattr(data_config, name):
                raise ValueError(
                    f"--{name.replace('_', '-')}={value} differs from the data in {args.data[0]} "
                    f"({name}={getattr(data_config, name)}); it is fixed when create-data writes the data."
                )
        vocab_size = metadata["vocab_size"]
        if tokenizer is not None:
            tokenizer.check_vocab_size(vocab_size)
        info = {"kind": "tfrecords", "paths": args.data, "config": dataclasses.asdict(data_config)}
        return args.data[0], data_config, vocab_size, tokenizer, info
    if tokenizer is None:
        raise ValueError(
            f"--data {' '.join(args.data)} is raw text (not a create-data directory with metadata.json): "
            "pass --tokenizer DIR to tokenize it."
        )
    data_config = PretrainingDataConfig(**{k: v for k, v in raw_only.items() if v is not None})
    corpus = TokenizedCorpus.from_documents(Corpus(args.data, format=args.format, column=args.column), tokenizer)
    info = {"kind": "text", "paths": args.data, "config": dataclasses.asdict(data_config),
            "num_documents": corpus.num_documents}
    return corpus, data_config, tokenizer.vocab_size, tokenizer, info


def _model_config(args, vocab_size, max_seq_length):
    overrides = {field: getattr(args, flag) for flag, field in _MODEL_OVERRIDES.items() if getattr(args, flag)}
    if args.config:
        config = AlbertConfig.load(args.config).replace(**overrides)
        if config.vocab_size != vocab_size:
            raise ValueError(
                f"{args.config} has vocab_size={config.vocab_size} but the data/tokenizer has {vocab_size} pieces."
            )
    else:
        config = AlbertConfig.from_preset(args.preset, vocab_size=vocab_size, **overrides)
    if max_seq_length > config.max_position_embeddings:
        raise ValueError(
            f"max_seq_length={max_seq_length} exceeds the model's max_position_embeddings="
            f"{config.max_position_embeddings}."
        )
    return config
