"""`albert-tf convert`: HF transformers and original TF1 checkpoints <-> albert-tf, and keras-hub presets.

    albert-tf convert --from hf --model HF_DIR --out DIR
    albert-tf convert --from tf1 --model CKPT_PREFIX --config albert_config.json --out DIR
    albert-tf convert --to hf --model runs/base --out HF_DIR
    albert-tf convert --to keras-hub --model runs/base --out PRESET

--to hf takes a model or run directory (its final/ or best/), or a HF
directory: a backbone or pretraining run, or a classification, regression or
multilabel run pooled on [CLS] (fine-tuned with --pooling cls, as
AlbertForSequenceClassification); other task models are refused. It
writes the tokenizer too (spiece.model + tokenizer_config.json), so
transformers' `AutoTokenizer.from_pretrained(HF_DIR)` encodes as albert-tf
does, except on text with `` or '' or a digit before a comma (a printed note
says so). --from hf keeps the source's spiece.model as DIR/tokenizer. The model may also be given
positionally (SRC), as in earlier versions. --from hf and --to hf take a hub
handle too (`--from hf --model hf://albert/albert-base-v2`), downloaded once into
the HuggingFace cache; DIR/model_source.json then records its repository and commit.

--to keras-hub writes the backbone and the tokenizer as a keras-hub preset
(`keras_hub.models.AlbertBackbone.from_preset(PRESET)`); it needs keras-hub
installed, and refuses in one line what keras-hub cannot express (a task
head, partial sharing, ...: docs/deployment.md#keras-hub-presets). A keras-hub
preset is read wherever a model directory is, with no keras-hub.
"""

from albert_tf.commands.flags import add_command
from albert_tf.commands.outputs import ENTRY_FILES, add_overwrite_flag
from albert_tf.hub import resolve
from albert_tf.model_dirs import find_tokenizer, resolve_model_dir
from albert_tf.utils import files
from albert_tf.utils.errors import UserError


def add_parser(subparsers):
    parser = add_command(subparsers, "convert", description=__doc__)
    direction = parser.add_mutually_exclusive_group(required=True)
    direction.add_argument(
        "--from", dest="from_format", choices=("hf", "tf1"),
        help="Import --model (a HF save_pretrained directory, or a TF1 checkpoint prefix).",
    )
    direction.add_argument(
        "--to", dest="to_format", choices=("hf", "keras-hub"),
        help="Export --model (an albert-tf model or run directory) to a HF directory or a keras-hub preset.",
    )
    parser.add_argument("--model", metavar="SRC", help="What to convert.")
    parser.add_argument("src", metavar="SRC", nargs="?", help="Same as --model.")
    parser.add_argument(
        "--config",
        help="albert_config.json of a TF1 checkpoint (needed with --from tf1 only).",
    )
    parser.add_argument(
        "--tokenizer", metavar="DIR", help="--to hf or keras-hub: tokenizer directory (default: the model's)."
    )
    parser.add_argument("--out", required=True, help="Output directory.")
    add_overwrite_flag(parser)
    return parser


def run(args):
    if (args.model is None) == (args.src is None):
        raise UserError("Give the model to convert once: --model SRC (or SRC positionally).")
    src = args.model or args.src
    if args.config is not None and args.from_format != "tf1":
        raise UserError("--config is only used with --from tf1.")
    if args.tokenizer is not None and args.to_format is None:
        raise UserError("--tokenizer is only used with --to hf or --to keras-hub.")
    if args.from_format == "tf1" and args.config is None:
        raise UserError("--from tf1 needs --config (the checkpoint's albert_config.json).")
    # Checked here, before a hub handle downloads and TensorFlow loads, and
    # published once: the converters write plainly into the staging directory.
    with files.publish_output(args.out, args.overwrite, ENTRY_FILES) as staging:
        source = resolve(src)
        src = source.path
        # Deferred for start-up: the converters import TensorFlow, after the flags are read (their errors reported).
        from albert_tf import convert

        if args.to_format is not None:
            model_dir = resolve_model_dir(src)
            tokenizer = find_tokenizer(model_dir, args.tokenizer, required=False)
        if args.to_format == "keras-hub":
            convert.convert_to_keras_hub(model_dir, staging, tokenizer=tokenizer)
        elif args.to_format == "hf":
            model = convert.convert_to_hf(model_dir, staging, tokenizer=tokenizer, source=source)
        elif args.from_format == "hf":
            report = convert.convert_from_hf(src, staging, source=source)
        else:
            report = convert.convert_from_tf1(src, args.config, staging)
    if args.to_format == "keras-hub":
        note = "" if tokenizer is not None else " without a tokenizer (none found; pass --tokenizer DIR)"
        print(f"Wrote keras-hub AlbertBackbone preset to {args.out}{note}")
        return 0
    if args.to_format == "hf":
        kind = convert.hf_kind(model)
        note = "" if tokenizer is not None else " without a tokenizer (none found; pass --tokenizer DIR)"
        print(f"Wrote HF {kind} to {args.out}{note}")
        if tokenizer is not None:
            print(transformers_tokenizer_note(tokenizer))
        return 0
    print(f"Wrote {type(report.model).__name__} to {args.out}")
    if report.newly_initialized:
        print(
            f"Notice: {src} has no pooler/SOP head (e.g. AlbertForMaskedLM); these "
            f"{len(report.newly_initialized)} weights are newly initialized and need "
            f"training before use: {', '.join(report.newly_initialized)}"
        )
    return 0


def transformers_tokenizer_note(tokenizer):
    """One line: where transformers' AlbertTokenizer gives other ids than `tokenizer` (an `AlbertTokenizer`)."""
    where = ["`` or '' (it maps them to \")"]
    if tokenizer.preprocessing.split_digit_comma:
        # ASCII only: the note must print on any terminal encoding.
        where.append("a digit before a comma (it keeps a piece such as '10,' whole, the original ALBERT splits it)")
    return (f"Note: transformers' AlbertTokenizer gives other ids than albert-tf on text with {' or '.join(where)}; "
            "see docs/deployment.md#tokenization-and-the-original-albert.")
