"""`albert-tf export`: a pretrained directory -> TF-Serving SavedModel or TFLite model.

    albert-tf export --model DIR --format saved_model --out saved_models/NAME [--mixed-precision mixed_bfloat16]
    albert-tf export --model DIR --format tflite --quantize dynamic --out OUT_DIR
    albert-tf export --model DIR --format web --out SITE_DIR [--mediapipe node_modules/@mediapipe/tasks-text]

--model is a model directory or a run directory (its best/ or final/), or a
HuggingFace save_pretrained directory (converted on load). The
tokenizer is `--tokenizer DIR` when given, else the model's own (see
`albert_tf.model_dirs`). Without one, the SavedModel has only the id signature
and the TFLite model ships without tokenizer files. A LoRA fine-tuned model
is exported with its factors merged into the kernels.

A SavedModel has its weights frozen into the graph as constants and runs in
float32, or in bfloat16 (--mixed-precision mixed_bfloat16); the default, auto,
picks mixed_bfloat16 where this machine's CPU has bfloat16 units and the model is
wide enough to gain from them, as every other command's --mixed-precision does.

A TFLite classifier or regressor with a tokenizer carries TFLite Model
Metadata (tokenizer, labels, input roles), so MediaPipe's TextClassifier runs
it on raw text; --no-metadata leaves it out. A model fine-tuned on text pairs
needs --no-metadata (MediaPipe reads one text).

--format web writes a static site for a classifier: a page that runs that
TFLite file in the browser with MediaPipe Tasks for Web (label probabilities
as you type, a table for a file of lines). MediaPipe's JavaScript and wasm
files are copied from an installed @mediapipe/tasks-text (--mediapipe, else
./node_modules, else npm's global root). Serve it with `python -m http.server`
in SITE_DIR.
"""

import argparse
import dataclasses
import os

from albert_tf.commands.export_loading import load_model_to_export
from albert_tf.commands.flags import add_command
from albert_tf.commands.outputs import add_overwrite_flag
from albert_tf.export.options import (CALIBRATED_MODES, DEFAULT_MAX_LENGTH, EXPORT_PRECISIONS, ONEDNN_SERVER_ENV,
                                      QUANTIZE_MODES, XLA_SERVER_FLAG, default_max_length)
from albert_tf.export.web_site import MEDIAPIPE_PACKAGE, MEDIAPIPE_VERSION, find_mediapipe, how_to_get_mediapipe
from albert_tf.hub import resolve_model
from albert_tf.model_dirs import find_tokenizer, resolve_model_dir
from albert_tf.precision import BF16_CPU_FLAGS, BF16_MIN_HIDDEN_SIZE, bf16_units, cpu_flags, onednn_enabled
from input_pipeline import movie_reviews
from albert_tf.utils import files
from albert_tf.utils.errors import UserError
from albert_tf.utils.layout import BATCHING_PARAMETERS_FILE
from input_pipeline.packing import TRUNCATE_FROM

DEFAULT_CALIBRATION_EXAMPLES = 200


def add_parser(subparsers):
    parser = add_command(subparsers, "export", description=__doc__)
    parser.add_argument("--model", required=True, metavar="DIR",
                        help="A model directory, a run directory, a HF directory, or a hub handle (hf://ORG/NAME).")
    parser.add_argument("--format", required=True, choices=("saved_model", "tflite", "web"),
                        help="What to write: a TF-Serving SavedModel, a TFLite model, or a web page running the TFLite "
                        "model in the browser.")
    parser.add_argument(
        "--out", required=True, metavar="DIR",
        help="saved_model: the model base path (versions 1/, 2/, ... are added); tflite, web: output directory.",
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
        "--mixed-precision", choices=EXPORT_PRECISIONS,
        help="saved_model: what the signatures compute in (the weights are constants in the graph either way). "
        f"mixed_bfloat16: bfloat16 matmuls, for a serving CPU with bfloat16 units ({', '.join(BF16_CPU_FLAGS)}). auto "
        f"(default): mixed_bfloat16 where this CPU has them and the model is wide enough (hidden size >= "
        f"{BF16_MIN_HIDDEN_SIZE}), else float32.",
    )
    parser.add_argument(
        "--xla", action="store_true",
        help="saved_model, float32: the forward pass compiled by XLA, on the weights as variables; faster on CPUs "
        "where TensorFlow runs no oneDNN (AVX2 alone). TF-Serving then needs --xla_cpu_compilation_enabled=true "
        "(see docs/deployment.md).",
    )
    # The old spelling, refused with its new one (see `run`).
    parser.add_argument("--precision", help=argparse.SUPPRESS)
    parser.add_argument(
        "--quantize", choices=QUANTIZE_MODES, default="none",
        help="tflite: none, float16 weights, dynamic-range int8, full int8, or 16x8 (int8 weights, "
        "int16 activations); int8 and 16x8 calibrate on real text. See docs/deployment.md.",
    )
    parser.add_argument("--dynamic-batch", action="store_true", help="tflite: dynamic batch (default: batch 1).")
    parser.add_argument(
        "--no-metadata", action="store_true",
        help="tflite classifiers and regressors: no TFLite Model Metadata (MediaPipe's TextClassifier and the Task "
        "Library need it), and every output (logits too) instead of the one the metadata describes.",
    )
    parser.add_argument(
        "--mediapipe", metavar="DIR",
        help=f"web: the {MEDIAPIPE_PACKAGE} package directory to copy MediaPipe's files from (default: "
        f"./node_modules/{MEDIAPIPE_PACKAGE}, else npm's global root; the page is tested with {MEDIAPIPE_VERSION}).",
    )
    parser.add_argument(
        "--calibration-text", metavar="FILE",
        help="tflite int8/16x8: UTF-8 text, one example per line (a tab separates a pair). Default: "
        f"{DEFAULT_CALIBRATION_EXAMPLES} IMDB reviews of the pretraining split (movie-reviews package).",
    )
    parser.add_argument("--calibration-examples", type=int, default=DEFAULT_CALIBRATION_EXAMPLES,
                        help="tflite int8/16x8: calibration examples used.")
    return parser


def run(args):
    _refuse_flag_mixes(args)
    if args.format == "web":
        # Looked for before the model loads, so that a wrong --mediapipe costs no conversion (--out was checked
        # before the command ran: `early_checks`).
        mediapipe = find_mediapipe(args.mediapipe)
    model_dir = resolve_model_dir(resolve_model(args.model))
    model, run_settings = load_model_to_export(model_dir)
    text = _text_settings(args, model_dir, model, run_settings)
    if args.format == "saved_model":
        return _write_saved_model(args, model, text)
    if args.format == "web":
        return _write_web(args, model, text, *mediapipe)
    return _write_tflite(args, model, text)


def _refuse_flag_mixes(args):
    """Refuses flags that do not apply to --format, or to each other, before anything loads."""
    if args.precision is not None:
        # One name for precision in every command: a second spelling would be a second vocabulary to keep.
        new = "mixed_bfloat16" if args.precision == "bf16" else args.precision
        raise UserError(f"--precision is now --mixed-precision, as in the other commands: use --mixed-precision {new}.")
    if args.format == "saved_model" and (args.quantize != "none" or args.dynamic_batch or args.calibration_text):
        raise UserError("--quantize, --dynamic-batch and --calibration-text apply to --format tflite only.")
    if args.format != "saved_model" and args.version is not None:
        raise UserError("--version applies to --format saved_model only.")
    if args.format != "saved_model" and args.mixed_precision is not None:
        raise UserError("--mixed-precision applies to --format saved_model only (tflite, web: --quantize).")
    if args.format != "tflite" and args.no_metadata:
        raise UserError("--no-metadata applies to --format tflite only (the web page needs the metadata).")
    if args.format != "web" and args.mediapipe is not None:
        raise UserError("--mediapipe applies to --format web only.")
    if args.xla and args.format != "saved_model":
        raise UserError("--xla applies to --format saved_model only.")
    if args.xla and args.mixed_precision not in (None, "auto", "float32"):
        raise UserError(f"--xla runs float32 only (XLA's CPU backend does not use bfloat16 units); drop "
                        f"--mixed-precision {args.mixed_precision} or --xla.")
    if args.no_text and (args.format != "saved_model" or args.tokenizer):
        raise UserError("--no-text applies to --format saved_model, without --tokenizer.")


@dataclasses.dataclass(frozen=True)
class TextSettings:
    """How an export reads text: its tokenizer (None: ids only), length, truncation and windows."""

    tokenizer: object
    max_length: int
    truncate_from: str
    max_windows: int


def _text_settings(args, model_dir, model, run):
    """The flags' text settings, the fine-tuning run's where a flag is not given; says what differs from plain."""
    max_length = default_max_length(run, model) if args.max_length is None else args.max_length
    tokenizer = None if args.no_text else find_tokenizer(model_dir, args.tokenizer, required=False)
    truncate_from = args.truncate_from or run.truncate_from
    if truncate_from != "end" and tokenizer is not None:
        print(f"Text longer than --max-length {max_length} loses pieces from its {truncate_from}"
              + ("" if args.truncate_from else " (as in fine-tuning)") + ".")
    max_windows = run.max_windows if args.max_windows is None else args.max_windows
    if max_windows > 1 and tokenizer is not None:
        print(f"Text longer than --max-length {max_length} is read as up to {max_windows} windows, their "
              "outputs averaged" + ("" if args.max_windows else " (as in fine-tuning)") + ".")
    if tokenizer is None and not args.no_text:
        print(f"Notice: no tokenizer with {model_dir.path} and no --tokenizer: exporting without text support.")
    # Deferred for start-up (here and in the steps below): these import TensorFlow, and the flags are read (their
    # errors reported) before.
    from albert_tf.export.signatures import describe_model
    from albert_tf.export.tflite import METADATA_OUTPUTS

    if (args.format != "saved_model" and not args.no_metadata and tokenizer is not None
            and describe_model(model).kind in METADATA_OUTPUTS):
        _check_mediapipe_can_follow(model_dir.path, run, tokenizer, max_windows, truncate_from)
    return TextSettings(tokenizer, max_length, truncate_from, max_windows)


def _write_saved_model(args, model, text):
    """The next (or --version) version under --out, and the batching file beside it unless one is there."""
    from albert_tf.export import export_saved_model, version_dirs

    backbone = getattr(model, "backbone", model)
    precision = "float32" if args.xla else _saved_model_precision(args.mixed_precision or "auto",
                                                                    backbone.config.hidden_size)
    # export_saved_model publishes the version whole, so a failed export
    # leaves no half-written version for TF-Serving to load.
    existing = version_dirs(args.out) if files.isdir(args.out) else []
    version = args.version or (existing[-1] + 1 if existing else 1)
    files.check_new_output(os.path.join(args.out, str(version)), args.overwrite, "version")
    batching_file = os.path.join(args.out, BATCHING_PARAMETERS_FILE)
    kept = files.exists(batching_file) and not args.overwrite
    path = export_saved_model(model, args.out, tokenizer=text.tokenizer, max_length=text.max_length, version=version,
                              truncate_from=text.truncate_from, max_windows=text.max_windows, precision=precision,
                              overwrite=args.overwrite, xla=args.xla, replace_batching_parameters=args.overwrite)
    print(f"Wrote {type(model).__name__} SavedModel ({precision}{', XLA' if args.xla else ''}) to {path}; "
          + (f"kept the existing {batching_file} (--overwrite replaces it with the suggested one)" if kept
             else f"suggested batching parameters in {batching_file}"))
    if args.xla:
        print(f"Serve it with tensorflow_model_server {XLA_SERVER_FLAG}: without it the first request fails.")
    elif precision == "float32" and not onednn_enabled():
        print(f"Notice: TensorFlow runs no oneDNN on this CPU. Exported and served with {ONEDNN_SERVER_ENV} in "
              f"the environment, this form measured faster on such CPUs, and --xla's form (served with "
              f"{XLA_SERVER_FLAG}) as fast; see docs/deployment.md.")
    return 0


def _write_web(args, model, text, mediapipe_dir, mediapipe_version):
    """The web site in --out, with MediaPipe's files where they were found."""
    from albert_tf.export.web import export_web

    path = export_web(model, args.out, tokenizer=text.tokenizer, mediapipe_dir=mediapipe_dir, overwrite=args.overwrite,
                      max_length=text.max_length, quantize=args.quantize, representative_texts=_calibration(args),
                      truncate_from=text.truncate_from, max_windows=text.max_windows)
    print(f"Wrote a web page running the {type(model).__name__} TFLite model ({args.quantize}) to {path}")
    if mediapipe_dir is None:
        print(f"Notice: no {MEDIAPIPE_PACKAGE} found, so the page cannot run yet: {how_to_get_mediapipe()}.")
    else:
        print(f"MediaPipe Tasks for Web {mediapipe_version} copied from {mediapipe_dir}"
              + ("" if mediapipe_version == MEDIAPIPE_VERSION else
                 f" (the page is tested with {MEDIAPIPE_VERSION})") + ".")
    print(f"Serve it: cd {args.out} && python -m http.server --bind 127.0.0.1 8000, then open "
          "http://127.0.0.1:8000/")
    return 0


def _write_tflite(args, model, text):
    from albert_tf.export import export_tflite

    path = export_tflite(
        model, args.out, tokenizer=text.tokenizer, max_length=text.max_length, quantize=args.quantize,
        representative_texts=_calibration(args), batch_size=None if args.dynamic_batch else 1,
        truncate_from=text.truncate_from, max_windows=text.max_windows, metadata=not args.no_metadata,
        overwrite=args.overwrite,
    )
    print(f"Wrote {type(model).__name__} TFLite model ({args.quantize}) to {path}")
    return 0


def _calibration(args):
    """The calibration texts --quantize needs, or None."""
    if args.quantize not in CALIBRATED_MODES:
        return None
    return _calibration_texts(args.calibration_text, args.calibration_examples)


def _saved_model_precision(requested, hidden_size):
    """--mixed-precision resolved ("auto" by this CPU and the model's width), printed with its reason."""
    from albert_tf.export.saved_model import resolve_export_precision

    precision, reason = resolve_export_precision(requested, hidden_size)
    print(f"Precision: {precision} ({reason})")
    if precision == "mixed_bfloat16" and not bf16_units(cpu_flags()):
        print(f"Notice: this CPU has no {' or '.join(BF16_CPU_FLAGS)}: a bfloat16 SavedModel runs emulated, slower "
              "than float32, on such a CPU. Serve it on one that has them.")
    return precision


def _check_mediapipe_can_follow(model_dir, run, tokenizer, max_windows, truncate_from):
    """Refuses metadata for a model that reads text pairs; warns where MediaPipe reads text otherwise.

    MediaPipe's TextClassifier and the Task Library's BertNLClassifier tokenize
    one text, lowercase its ASCII letters first, pack [CLS] text [SEP] and cut
    what does not fit from the end.
    """
    if run.reads_pairs:
        raise UserError(
            f"--model {model_dir} was fine-tuned on text pairs, which MediaPipe's TextClassifier cannot feed (it "
            "reads one text): pass --no-metadata and pack pairs in the app (docs/deployment.md)."
        )
    gaps = []
    if not tokenizer.can_embed_preprocessing:
        gaps.append("this tokenizer's preprocessing (tokenizer.json) cannot be built into spiece.model, so text "
                    "it changes (accents, non-ASCII capitals, full-width letters) can get other ids")
    if not tokenizer.preprocessing.lower_case:
        gaps.append("they lowercase ASCII letters, and this tokenizer keeps case: text with upper-case ASCII "
                    "letters gets other ids")
    if max_windows > 1:
        gaps.append(f"they read one window of a long text, not up to --max-windows {max_windows}")
    if truncate_from != "end":
        gaps.append(f"they cut a long text from its end, not its {truncate_from}")
    if gaps:
        print("Warning: MediaPipe's TextClassifier and the Task Library read text unlike `albert-tf predict` "
              "here: " + "; ".join(gaps) + ".")


def _calibration_texts(path, limit):
    if path is None:
        return [text for text, _ in movie_reviews.imdb_reviews("pretrain")[:limit]]
    with files.open_text(path) as f:
        lines = [line.rstrip("\n") for line in f if line.strip()][:limit]
    if not lines:
        raise UserError(f"--calibration-text {path} has no non-empty lines.")
    return [tuple(line.split("\t", 1)) if "\t" in line else line for line in lines]
