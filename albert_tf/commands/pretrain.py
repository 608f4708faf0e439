"""`albert-tf pretrain`: pretrain ALBERT (MLM + SOP) under any tf.distribute strategy, resumably.

    albert-tf pretrain --preset base --data data/ --out runs/base --steps 125000

    albert-tf pretrain --init-from hf://albert/albert-base-v2 --data notes.txt --out runs/notes --steps 10000

Rerunning the same command resumes from RUN_DIR's last checkpoint. The run
keeps the data's tokenizer (RUN_DIR/tokenizer and RUN_DIR/final/tokenizer), and
warmup is 2.5% of the steps unless --warmup-steps is given.

--init-from MODEL goes on pretraining a model (any that finetune's --model
takes, hub handles included) on new text: the run takes the model's config and
tokenizer, starts from its weights, and keeps its MLM and SOP heads where it
has them (fresh ones otherwise). A --tokenizer, data or model flag that
disagrees with the model is refused. training_config.json records the model
("init_from", with the hub commit).
"""

import dataclasses
import json

import numpy as np

from albert_tf.commands.reports import report_corpus_notes, report_pairs
from albert_tf.commands.flags import (
    add_command, add_config_flags, add_jit_compile_aliases, add_split_sentences_flag, add_strategy_flags,
    config_kwargs, strategy_from_flags,
)
from albert_tf.config import PRESETS, AlbertConfig
from albert_tf.hub import resolve
from albert_tf.model_dirs import find_tokenizer, load_tokenizer, resolve_model_dir
from albert_tf.strategy_names import STRATEGY_NAMES
from albert_tf.training.config import EMBEDDING_INITS, TrainerConfig
# `input_pipeline.pretraining_dataset_fn` is read where used: it loads TensorFlow, after the flags are read.
import input_pipeline
from input_pipeline import Corpus, PretrainingDataConfig, TokenizedCorpus, read_metadata
from albert_tf.utils import files
from albert_tf.utils.errors import UserError
from albert_tf.utils.layout import DATA_METADATA_FILE, TRAIN_LOG_FILE, is_create_data_dir
from input_pipeline.pretraining.examples import PairStats, instances_of_documents
from input_pipeline.pretraining.tfrecord_shards import check_records

# Raw text: the documents whose first-epoch examples the label balance is counted on.
_PAIR_STATS_DOCUMENTS = 10_000
# The seed of the held-out examples (raw text: their pairs and masks), whatever --seed is, so that
# every evaluation of a run, and of runs with other seeds, scores the same examples.
_EVAL_SEED = 0

# Model fields a flag may override (the preset's or --config's value otherwise);
# the vocabulary always comes from the data.
_MODEL_FLAGS = ("embedding_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                "num_hidden_groups", "inner_group_num", "hidden_act", "hidden_dropout", "attention_dropout",
                "max_position_embeddings", "sharing")
_TRAINER_FLAGS = [f.name for f in dataclasses.fields(TrainerConfig)]
# SIGTERM checkpoints the step reached (`Trainer.train`'s `stop_requested`).
STOPS_ON_SIGTERM = True


def add_parser(subparsers):
    parser = add_command(subparsers, "pretrain", description=__doc__)
    model = parser.add_argument_group("model (each flag overrides the preset's or --config's value)")
    source = model.add_mutually_exclusive_group()
    source.add_argument("--preset", choices=sorted(PRESETS), default="base", help="Model size.")
    source.add_argument("--config", metavar="JSON", help="An AlbertConfig / albert_config.json file; "
                        "without vocab_size, the tokenizer's.")
    source.add_argument("--init-from", metavar="MODEL",
                        help="Continue pretraining this model (a model or run directory, a HF directory, "
                        "hf://ORG/NAME[@REVISION]): its config, tokenizer, weights and heads.")
    add_config_flags(model, AlbertConfig, names=_MODEL_FLAGS, defaults=dict.fromkeys(_MODEL_FLAGS))

    data = parser.add_argument_group("data")
    data.add_argument("--data", nargs="+", required=True, metavar="PATH",
                      help="A create-data output directory, or raw text files/directories (needs --tokenizer).")
    data.add_argument("--tokenizer", metavar="DIR",
                      help="train-tokenizer output (default: the create-data directory's); saved into RUN_DIR.")
    data.add_argument("--format", default="auto", help="Raw text format (see create-data).")
    data.add_argument("--column", help="CSV column / JSONL field with the text.")
    add_split_sentences_flag(data)
    data.add_argument("--max-seq-length", type=int, help="Raw text only (default 512).")
    data.add_argument("--max-predictions-per-seq", type=int, help="Raw text only (default 20).")
    data.add_argument("--task", choices=("sop", "nsp"), help="Raw text only (default sop).")
    data.add_argument("--eval-data", nargs="+", metavar="PATH",
                      help="Held-out data, as --data takes it (same tokenizer and sequence settings): its masked-LM "
                           f"and SOP accuracy every --eval-every steps, on the progress line, {TRAIN_LOG_FILE} and "
                           "TensorBoard.")
    data.add_argument("--data-service", metavar="grpc://HOST:PORT",
                      help="Make the batches on the workers of this tf.data service dispatcher "
                           "(docs/pretraining.md).")

    training = parser.add_argument_group("training")
    training.add_argument("--out", required=True, metavar="RUN_DIR",
                          help="Run directory; rerunning the same command resumes from its last checkpoint.")
    add_strategy_flags(training, STRATEGY_NAMES)
    training.add_argument("--embedding-init", choices=EMBEDDING_INITS, default="random",
                          help="ppmi-svd: start the word embeddings from PPMI-SVD vectors of the text "
                               "(raw text only; helps short runs transfer, docs/pretraining.md).")
    add_config_flags(training, TrainerConfig)
    add_jit_compile_aliases(training)
    return parser


def run(args):
    if (args.eval_data is None) != (args.eval_every is None):
        given, missing = ("--eval-data", "--eval-every N") if args.eval_every is None else ("--eval-every", "--eval-data")
        raise UserError(f"{given} needs {missing}: evaluations read held-out data every N steps.")
    if args.init_from and args.embedding_init == "ppmi-svd":
        raise UserError(f"--embedding-init ppmi-svd starts fresh embeddings; --init-from {args.init_from} "
                        "brings its own.")
    trainer_config = TrainerConfig(**config_kwargs(TrainerConfig, args))
    if args.data_service is not None and not args.data_service.startswith("grpc://"):
        raise UserError(f"--data-service must be a dispatcher address grpc://HOST:PORT. Received: {args.data_service}")
    # Before reading the data: a TPU that is not there is known in seconds.
    strategy_name, strategy = strategy_from_flags(args)
    # Deferred for start-up: these import TensorFlow, and the flags are read (their errors reported) before.
    from albert_tf.training import DamagedData, Trainer, ppmi_svd_init

    init = _init_from(args) if args.init_from else None
    source, data_config, vocab_size, tokenizer, data_info = _load_data(args, init and init.tokenizer)
    if init is None:
        model_config = _model_config(args, vocab_size, data_config.max_seq_length)
    else:
        model_config = _init_model_config(args, init, vocab_size, data_config.max_seq_length)
    word_embeddings_init = None
    if args.embedding_init == "ppmi-svd":
        if not isinstance(source, TokenizedCorpus):
            raise UserError(
                f"--embedding-init ppmi-svd counts pieces in raw text, and --data {source} holds create-data "
                "records: pass the text files with --tokenizer instead."
            )
        word_embeddings_init = ppmi_svd_init(source)
        data_info["embedding_init"] = "ppmi-svd"
    dataset_fn = input_pipeline.pretraining_dataset_fn(source, data_config, seed=args.seed,
                                                      data_service=args.data_service)
    run_info = {"data": data_info, "strategy": strategy_name, "replicas": strategy.num_replicas_in_sync}
    if init is not None:
        run_info["init_from"] = init.source.to_dict()
    eval_dataset_fn = None
    if args.eval_data is not None:
        eval_dataset_fn = _eval_dataset_fn(args, data_config, vocab_size, tokenizer)
        # Outside "data": a resumed run may evaluate on other held-out data.
        run_info["eval_data"] = {"paths": args.eval_data, "seed": _EVAL_SEED}
    trainer = Trainer(
        model_config, trainer_config, args.out, dataset_fn,
        strategy=strategy, tokenizer=tokenizer, run_info=run_info,
        word_embeddings_init=word_embeddings_init, eval_dataset_fn=eval_dataset_fn,
    )
    if init is not None:
        # A resumed run's checkpoint replaces these when `train` restores it.
        _start_from(trainer.runner.model, init.model)
    # Under a mixed policy the weights, LayerNorm, softmax and losses stay float32.
    print(f"Precision: {trainer.precision.describe()}; remat: {'on' if trainer_config.remat else 'off'}; "
          f"steps per loop: {trainer_config.steps_per_loop}")
    try:
        trainer.train(stop_requested=args.stop_requested)
    except DamagedData as damaged:
        raise UserError(f"{_damaged_shard(args) or damaged.reason}. {damaged.kept}") from None
    return 0


def _names_create_data(paths):
    """Whether --data's (or --eval-data's) `paths` name one create-data directory, not raw text."""
    return len(paths) == 1 and is_create_data_dir(paths[0])


def _damaged_shard(args):
    """The error naming the first damaged shard of --data's and --eval-data's create-data records, or None.

    TensorFlow's DataLossError names no file; every record is read again to find it (about 1 s per GB on a local disk).
    """
    for paths in (args.data, args.eval_data or []):
        if _names_create_data(paths):
            try:
                check_records(paths[0])
            except UserError as e:
                return str(e).removesuffix(".")
    return None


def _load_data(args, model_tokenizer=None):
    """Returns (source, data_config, vocab_size, tokenizer or None, data_info for the run files).

    `model_tokenizer`: the tokenizer of --init-from's model, which the data must use.
    """
    tokenizer = load_tokenizer(args.tokenizer) if args.tokenizer else None
    if model_tokenizer is not None:
        if tokenizer is not None and not _same_tokenizer(tokenizer, model_tokenizer):
            raise UserError(f"--tokenizer {args.tokenizer} differs from the tokenizer of --init-from "
                            f"{args.init_from}; leave --tokenizer out to use the model's.")
        tokenizer = model_tokenizer
    raw_only = {"max_seq_length": args.max_seq_length, "max_predictions_per_seq": args.max_predictions_per_seq,
                "task": args.task}
    if _names_create_data(args.data):
        metadata = read_metadata(args.data[0])
        data_config = metadata["config"]
        for name, value in raw_only.items():
            if value is not None and value != getattr(data_config, name):
                raise UserError(
                    f"--{name.replace('_', '-')}={value} differs from the data in {args.data[0]} "
                    f"({name}={getattr(data_config, name)}); it is fixed when create-data writes the data."
                )
        vocab_size = metadata["vocab_size"]
        data_tokenizer = find_tokenizer(args.data[0], required=False)
        if model_tokenizer is not None and data_tokenizer is not None and not _same_tokenizer(
                data_tokenizer, model_tokenizer):
            raise UserError(f"--data {args.data[0]} was made with another tokenizer than --init-from "
                            f"{args.init_from}'s; run create-data with the model's tokenizer (or pass raw text).")
        if tokenizer is None:
            tokenizer = data_tokenizer
        if tokenizer is not None:
            tokenizer.check_vocab_size(vocab_size)
        if args.split_sentences:
            raise UserError(f"--split-sentences reads raw text; --data {args.data[0]} holds create-data records "
                             "(pass it to create-data instead).")
        info = {"kind": "tfrecords", "paths": args.data, "config": dataclasses.asdict(data_config)}
        return args.data[0], data_config, vocab_size, tokenizer, info
    if all(files.isdir(path) and not files.listdir(path) for path in args.data):
        raise UserError(f"--data {' '.join(args.data)}: empty directory; pass a create-data output directory, "
                        "or text files (or directories of them) with --tokenizer.")
    if tokenizer is None:
        raise UserError(
            f"--data {' '.join(args.data)} is raw text (not a create-data directory with {DATA_METADATA_FILE}): "
            "pass --tokenizer DIR to tokenize it."
        )
    data_config = PretrainingDataConfig(**{k: v for k, v in raw_only.items() if v is not None})
    text = Corpus(args.data, format=args.format, column=args.column, split_sentences=args.split_sentences)
    corpus = TokenizedCorpus.from_documents(text, tokenizer)
    report_corpus_notes(text, "pretrain")
    _report_pairs(corpus, data_config, args.seed)
    info = {"kind": "text", "paths": args.data, "config": dataclasses.asdict(data_config),
            "num_documents": corpus.num_documents}
    return corpus, data_config, tokenizer.vocab_size, tokenizer, info


def _eval_dataset_fn(args, data_config, vocab_size, tokenizer):
    """The `dataset_fn` of --eval-data, made like the training data's, with `_EVAL_SEED`."""
    paths = " ".join(args.eval_data)
    if _names_create_data(args.eval_data):
        metadata = read_metadata(args.eval_data[0])
        if metadata["vocab_size"] != vocab_size or metadata["config"] != data_config:
            raise UserError(
                f"--eval-data {paths} was written with vocab_size={metadata['vocab_size']} and {metadata['config']}; "
                f"the training data has vocab_size={vocab_size} and {data_config}. Make both with the same "
                "tokenizer and settings."
            )
        source = args.eval_data[0]
    elif tokenizer is None:
        raise UserError(f"--eval-data {paths} is raw text, and the run has no tokenizer to read it with: pass "
                         "--tokenizer DIR, or run create-data on it.")
    else:
        text = Corpus(args.eval_data, format=args.format, column=args.column, split_sentences=args.split_sentences)
        try:
            source = TokenizedCorpus.from_documents(text, tokenizer)
        except ValueError as e:
            raise UserError(f"--eval-data {paths}: {e}") from None
    make = input_pipeline.pretraining_dataset_fn(source, data_config, seed=_EVAL_SEED)

    def eval_dataset_fn(global_batch_size, input_context, start_step):
        try:
            return make(global_batch_size, input_context, start_step)
        except ValueError as e:  # e.g. a text that makes no sentence pairs
            raise UserError(f"--eval-data {paths}: {e}") from None

    return eval_dataset_fn


def _report_pairs(corpus, data_config, seed):
    """The one-sentence documents, and the label balance of the first epoch's examples (of a sample)."""
    documents = np.random.default_rng((seed, 0)).permutation(corpus.num_documents)[:_PAIR_STATS_DOCUMENTS]
    stats = PairStats.of(corpus, instances_of_documents(corpus, documents, data_config, (seed, 0)))
    sampled = len(documents) < corpus.num_documents
    report_pairs(stats, data_config.task, "pretrain", f" (labels of {len(documents):,} documents)" * sampled)


def _model_config(args, vocab_size, max_seq_length):
    overrides = {name: value for name, value in config_kwargs(AlbertConfig, args, names=_MODEL_FLAGS).items()
                 if value is not None}
    if args.config:
        config = AlbertConfig.load(args.config).replace(**overrides)
        if "vocab_size" not in _json_keys(args.config):
            config = config.replace(vocab_size=vocab_size)
        elif config.vocab_size != vocab_size:
            raise UserError(
                f"{args.config} has vocab_size={config.vocab_size} but the data/tokenizer has {vocab_size} pieces."
            )
    else:
        config = AlbertConfig.from_preset(args.preset, vocab_size=vocab_size, **overrides)
    if max_seq_length > config.max_position_embeddings:
        raise UserError(
            f"max_seq_length={max_seq_length} exceeds the model's max_position_embeddings="
            f"{config.max_position_embeddings}."
        )
    return config


@dataclasses.dataclass(frozen=True)
class _Init:
    """--init-from's model: where it came from (an `albert_tf.hub.ResolvedModel`), the model, its tokenizer."""

    source: object
    model: object
    tokenizer: object


def _init_from(args):
    """The model --init-from names, loaded (a hub handle downloaded first), with its tokenizer."""
    from albert_tf.loading import load_pretrained

    source = resolve(args.init_from)
    model_dir = resolve_model_dir(source.path)
    tokenizer = find_tokenizer(model_dir, required=False)
    if tokenizer is None:
        raise UserError(f"--init-from {args.init_from} has no tokenizer (no spiece.model with the model): "
                        "continued pretraining reads text with the model's own.")
    return _Init(source, load_pretrained(model_dir), tokenizer)


def _init_model_config(args, init, vocab_size, max_seq_length):
    """--init-from's model config; a model flag that changes it, or data of another vocabulary, is refused."""
    config = getattr(init.model, "backbone", init.model).config
    overrides = {name: value for name, value in config_kwargs(AlbertConfig, args, names=_MODEL_FLAGS).items()
                 if value is not None and value != getattr(config, name)}
    if overrides:
        name, value = next(iter(overrides.items()))
        raise UserError(f"--{name.replace('_', '-')} {value}: --init-from {args.init_from} has "
                        f"{name}={getattr(config, name)}; its weights fix the model, so leave model flags out.")
    if vocab_size != config.vocab_size:
        raise UserError(f"--data has {vocab_size} pieces, --init-from {args.init_from} {config.vocab_size}: "
                        "make the data with the model's tokenizer.")
    if max_seq_length > config.max_position_embeddings:
        raise UserError(f"max_seq_length={max_seq_length} exceeds --init-from {args.init_from}'s "
                        f"max_position_embeddings={config.max_position_embeddings}.")
    return config


def _same_tokenizer(a, b):
    """Whether two `AlbertTokenizer`s give the same ids: the same SentencePiece model and preprocessing."""
    return a.model_proto == b.model_proto and a.preprocessing == b.preprocessing


def _start_from(pretrainer, model):
    """Copies `model`'s weights into the run's `pretrainer`: all of them from a pretrainer (its MLM and SOP
    heads too), the backbone's from a backbone or task model (the heads stay freshly initialized)."""
    if hasattr(model, "mlm_head") and hasattr(model, "sop_head"):
        pretrainer.set_weights(model.get_weights())
    else:
        pretrainer.backbone.set_weights(getattr(model, "backbone", model).get_weights())


def _json_keys(path):
    return set(json.loads(files.read_text(path)))
