"""`albert-tf export`: a pretrained directory -> TF-Serving SavedModel or TFLite model.

    albert-tf export --model DIR --format saved_model --out saved_models/NAME
    albert-tf export --model DIR --format tflite --quantize dynamic --out OUT_DIR

--model is a model directory or a run directory (its best/ or final/), or a
HuggingFace save_pretrained directory (converted on load). The
tokenizer is `--tokenizer DIR` when given, else the model's own (see
`albert_tf.model_dirs`). Without one, the SavedModel has only the id signature
and the TFLite model ships without tokenizer files. A LoRA fine-tuned model
is exported with its factors merged into the kernels.
"""

import os

from albert_tf.commands.flags import add_command
from albert_tf.commands.outputs import add_overwrite_flag, check_out, fresh_output_dir
from albert_tf.export import QUANTIZE_MODES, export_saved_model, export_tflite, version_dirs
from albert_tf.export.saved_model import DEFAULT_MAX_LENGTH
from albert_tf.export.tflite import CALIBRATED_MODES
from albert_tf.model_dirs import find_tokenizer, resolve_model_dir
from albert_tf.saving import load_pretrained
from albert_tf.tasks.finetune import run_max_seq_length, run_max_windows, run_truncate_from
from input_pipeline import movie_reviews
from input_pipeline import files
from input_pipeline.packing import TRUNCATE_FROM

DEFAULT_CALIBRATION_EXAMPLES = 200


def add_parser(subparsers):
    parser = add_command(subparsers, "export", description=__doc__)
    parser.add_argument("--model", required=True, metavar="DIR",
                        help="A model directory, a run directory, or a HF directory.")
    parser.add_argument("--format", required=True, choices=("saved_model", "tflite"), help="What to write.")
    parser.add_argument(
        "--out", required=True, metavar="DIR",
        help="saved_model: the model base path (versions 1/, 2/, ... are added); tflite: output directory.",
    )
    add_overwrite_flag(parser)
    parser.add_argument("--tokenizer", metavar="DIR", help="Tokenizer directory (spiece.model + tokenizer.json).")
    parser.add_argument(
        "--no-text", action="store_true",
        help="saved_model: id signature only, for a TF-Serving build without TF Text's ops.",
    )
    parser.add_argument(
        "--max-length", type=int,
        help="Longest sequence, special tokens included; text is truncated to it. TFLite: the "
        "fixed input length. Default: the fine-tuning run's --max-seq-length; for other models "
        f"{DEFAULT_MAX_LENGTH}, or the model's max_position_embeddings when smaller.",
    )
    parser.add_argument(
        "--truncate-from", choices=TRUNCATE_FROM,
        help="Which pieces of a text longer than --max-length go: end, start or middle (default: what the "
        "fine-tuning run used, its --truncate-from; end for other models).",
    )
    parser.add_argument(
        "--max-windows", type=int,
        help="Classifiers and regressors: serve_text reads a text longer than --max-length as up to this many "
        "windows and averages their logits (default: the fine-tuning run's --max-windows; 1 for other "
        "models). TFLite: recorded for the app, which splits the text.",
    )
    parser.add_argument("--version", type=int, help="saved_model: version number (default: next free).")
    parser.add_argument(
        "--quantize", choices=QUANTIZE_MODES, default="none",
        help="tflite: none, float16 weights, dynamic-range int8, full int8, or 16x8 (int8 weights, "
        "int16 activations); int8 and 16x8 calibrate on real text. See docs/deployment.md.",
    )
    parser.add_argument("--dynamic-batch", action="store_true", help="tflite: dynamic batch (default: batch 1).")
    parser.add_argument(
        "--calibration-text", metavar="FILE",
        help="tflite int8/16x8: UTF-8 text, one example per line (a tab separates a pair). Default: "
        f"{DEFAULT_CALIBRATION_EXAMPLES} IMDB reviews of the pretraining split (movie-reviews package).",
    )
    parser.add_argument("--calibration-examples", type=int, default=DEFAULT_CALIBRATION_EXAMPLES,
                        help="tflite int8/16x8: calibration examples used.")
    return parser


def run(args):
    if args.format == "saved_model" and (args.quantize != "none" or args.dynamic_batch or args.calibration_text):
        raise ValueError("--quantize, --dynamic-batch and --calibration-text apply to --format tflite only.")
    if args.format == "tflite" and args.version is not None:
        raise ValueError("--version applies to --format saved_model only.")
    if args.no_text and (args.format != "saved_model" or args.tokenizer):
        raise ValueError("--no-text applies to --format saved_model, without --tokenizer.")
    model_dir = resolve_model_dir(args.model)
    model = load_pretrained(model_dir)
    backbone = getattr(model, "backbone", model)
    if backbone.lora_rank is not None:
        # Same outputs, and the exported graph has plain kernels: no LoRA matmuls.
        print(f"Merging the LoRA factors (rank {backbone.lora_rank}) into the attention kernels"
              + (f" and the word-embedding table's (rank {backbone.lora_embedding_rank}) into it"
                 if backbone.lora_embedding_rank else "") + ".")
        backbone.merge_lora()
    max_length = default_max_length(model_dir, model) if args.max_length is None else args.max_length
    tokenizer = None if args.no_text else find_tokenizer(model_dir, args.tokenizer, required=False)
    truncate_from = args.truncate_from or run_truncate_from(model_dir)
    if truncate_from != "end" and tokenizer is not None:
        print(f"Text longer than --max-length {max_length} loses pieces from its {truncate_from}"
              + ("" if args.truncate_from else " (as in fine-tuning)") + ".")
    max_windows = run_max_windows(model_dir) if args.max_windows is None else args.max_windows
    if max_windows > 1 and tokenizer is not None:
        print(f"Text longer than --max-length {max_length} is read as up to {max_windows} windows, their "
              "outputs averaged" + ("" if args.max_windows else " (as in fine-tuning)") + ".")
    if tokenizer is None and not args.no_text:
        print(f"Notice: no tokenizer with {model_dir} and no --tokenizer: exporting without text support.")
    if args.format == "saved_model":
        # export_saved_model publishes the version whole, so a failed export
        # leaves no half-written version for TF-Serving to load.
        existing = version_dirs(args.out) if files.isdir(args.out) else []
        version = args.version or (existing[-1] + 1 if existing else 1)
        check_out(os.path.join(args.out, str(version)), args.overwrite, flag="version")
        # An existing version is empty here, or --overwrite was given.
        path = export_saved_model(model, args.out, tokenizer=tokenizer, max_length=max_length, version=version,
                                  truncate_from=truncate_from, max_windows=max_windows, overwrite=True)
        print(f"Wrote {type(model).__name__} SavedModel to {path}")
        return 0
    texts = None
    if args.quantize in CALIBRATED_MODES:
        texts = _calibration_texts(args.calibration_text, args.calibration_examples)
    with fresh_output_dir(args.out, args.overwrite) as staging:
        path = export_tflite(
            model, staging, tokenizer=tokenizer, max_length=max_length, quantize=args.quantize,
            representative_texts=texts, batch_size=None if args.dynamic_batch else 1, truncate_from=truncate_from,
            max_windows=max_windows,
        )
    print(f"Wrote {type(model).__name__} TFLite model ({args.quantize}) to {path.replace(staging, args.out)}")
    return 0


def default_max_length(model_dir, model):
    """--max-length's default: the fine-tuning run's max_seq_length; else DEFAULT_MAX_LENGTH, within the model's
    max_position_embeddings."""
    run_length = run_max_seq_length(model_dir)
    if run_length is not None:
        return run_length
    return min(DEFAULT_MAX_LENGTH, getattr(model, "backbone", model).config.max_position_embeddings)


def _calibration_texts(path, limit):
    if path is None:
        return [text for text, _ in movie_reviews.imdb_reviews("pretrain")[:limit]]
    with files.open_file(path) as f:
        lines = [line.rstrip("\n") for line in f if line.strip()][:limit]
    if not lines:
        raise ValueError(f"--calibration-text {path} has no non-empty lines.")
    return [tuple(line.split("\t", 1)) if "\t" in line else line for line in lines]
