"""`albert-tf convert`: HF transformers and original TF1 checkpoints <-> albert-tf.

    albert-tf convert --from hf HF_DIR --out DIR
    albert-tf convert --from tf1 CKPT_PREFIX --config albert_config.json --out DIR
    albert-tf convert --to hf DIR --out HF_DIR
"""

import argparse

from albert_tf import convert


def add_parser(subparsers):
    parser = subparsers.add_parser(
        "convert",
        help="Convert checkpoints between HF transformers, original TF1 ALBERT and albert-tf.",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    direction = parser.add_mutually_exclusive_group(required=True)
    direction.add_argument(
        "--from", dest="from_format", choices=("hf", "tf1"),
        help="Import SRC (a HF save_pretrained directory, or a TF1 checkpoint prefix).",
    )
    direction.add_argument(
        "--to", dest="to_format", choices=("hf",),
        help="Export SRC (an albert-tf pretrained directory) to a HF directory.",
    )
    parser.add_argument("src", metavar="SRC", help="What to convert.")
    parser.add_argument(
        "--config",
        help="albert_config.json of a TF1 checkpoint (needed with --from tf1 only).",
    )
    parser.add_argument(
        "--out", required=True, help="Output directory; must not exist or be empty."
    )
    return parser


def run(args):
    if args.config is not None and args.from_format != "tf1":
        raise ValueError("--config is only used with --from tf1.")
    if args.to_format == "hf":
        model = convert.convert_to_hf(args.src, args.out)
        kind = "AlbertForPreTraining" if hasattr(model, "mlm_head") else "AlbertModel"
        print(f"Wrote HF {kind} to {args.out}")
        return 0
    if args.from_format == "hf":
        report = convert.convert_from_hf(args.src, args.out)
    else:
        if args.config is None:
            raise ValueError("--from tf1 needs --config (the checkpoint's albert_config.json).")
        report = convert.convert_from_tf1(args.src, args.config, args.out)
    print(f"Wrote {type(report.model).__name__} to {args.out}")
    if report.newly_initialized:
        print(
            f"Notice: {args.src} has no pooler/SOP head (e.g. AlbertForMaskedLM); these "
            f"{len(report.newly_initialized)} weights are newly initialized and need "
            f"training before use: {', '.join(report.newly_initialized)}"
        )
    return 0
