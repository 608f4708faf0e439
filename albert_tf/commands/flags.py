"""Command-line flags built from the config dataclasses' fields.

A field's help text is written once, in its `metadata["help"]`
(`albert_tf.utils.config_base.doc`); `add_config_flags` turns the fields into flags
(`--max-seq-length`, or the field's `metadata["flag"]`) with the field's type,
choices and default, and `config_kwargs` reads them back.
"""

import argparse
import dataclasses
import difflib
import sys
import types

from albert_tf.commands import COMMANDS
from albert_tf.precision import MIXED_PRECISION_HELP, PRECISIONS
from albert_tf.utils.errors import UserError


class ArgumentParser(argparse.ArgumentParser):
    """A parser whose usage errors are one line, exit 2, and name the closest known flag.

    argparse's own error prints the whole usage block; a mistyped flag
    (`--learning_rate`) then reads as a wall of text without the one fix.
    argparse also reports a missing required flag before an unknown one,
    though the unknown one is often that flag mistyped (`--modle`): the
    unknown flag is named first. Subcommand parsers are of this class too
    (argparse uses the parent's).
    """

    def error(self, message):
        # Raised, not printed: `parse_args` decides which problem to name first.
        raise _UsageError(self, message)

    def parse_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        try:
            namespace, extras = self.parse_known_args(args, namespace)
            if extras:
                parser = self._chosen_parser(namespace)
                parser.error(unknown_arguments_message(extras, parser))
        except _UsageError as e:
            problem = e
            if e.message.startswith("the following arguments are required"):
                problem = self._unknown_flags_problem(args) or e
            problem.parser.exit(2, f"{problem.parser.prog}: error: {problem.message} (see {problem.parser.prog} "
                                "--help)\n")
        return namespace

    def _unknown_flags_problem(self, args):
        """The unknown-flag `_UsageError` of `args` read with no flag required, or None if it has none."""
        relaxed = [action for parser in self._parser_tree() for action in parser._actions
                   if action.option_strings and action.required]
        for action in relaxed:
            action.required = False
        try:
            namespace, extras = self.parse_known_args(args)
        except _UsageError:
            return None
        finally:
            for action in relaxed:
                action.required = True
        if not extras:
            return None
        parser = self._chosen_parser(namespace)
        return _UsageError(parser, unknown_arguments_message(extras, parser))

    def _parser_tree(self):
        """This parser and every subcommand parser under it."""
        yield self
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                for parser in action.choices.values():
                    yield from parser._parser_tree()

    def _chosen_parser(self, namespace):
        """The innermost subcommand parser `namespace` was parsed with (self without subcommands)."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = action.choices.get(getattr(namespace, action.dest, None))
                if chosen is not None:
                    return chosen._chosen_parser(namespace)
        return self


class _UsageError(Exception):
    """A command-line usage error of `parser`, held until `ArgumentParser.parse_args` reports it."""

    def __init__(self, parser, message):
        super().__init__(message)
        self.parser, self.message = parser, message


def unknown_arguments_message(extras, parser):
    """'unknown flag --learning_rate (did you mean --learning-rate?)', and so on for each extra word."""
    known = [flag for action in parser._actions for flag in action.option_strings]
    parts = []
    for index, word in enumerate(extras):
        if not word.startswith("-"):
            # The value of an unknown flag just named: not a second problem.
            if not (index and extras[index - 1].startswith("-") and "=" not in extras[index - 1]):
                parts.append(f"unexpected argument {word!r}")
            continue
        flag = word.split("=", 1)[0]
        # "_" for "-" is the usual slip (the config fields are snake_case); rank that spelling first.
        close = difflib.get_close_matches(flag.replace("_", "-"), known, n=3, cutoff=0.6)
        close += [f for f in difflib.get_close_matches(flag, known, n=3, cutoff=0.6) if f not in close]
        hint = f" (did you mean {' or '.join(close[:3])}?)" if close else ""
        parts.append(f"unknown flag {flag}{hint}")
    return "; ".join(parts)


def closest_command(name, commands):
    """' (did you mean pretrain?)' for `name`='pretrian', or '' when nothing is close."""
    close = difflib.get_close_matches(name, list(commands), n=2, cutoff=0.6)
    return f" (did you mean {' or '.join(close)}?)" if close else ""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps descriptions as written and ends each flag's help with its default."""

    def _get_help_string(self, action):
        help_text = action.help or ""
        default = action.default
        if "%(default)" in help_text or default in (None, False, argparse.SUPPRESS) or action.required:
            return help_text
        if not action.option_strings and action.nargs not in ("?", "*"):
            return help_text
        return help_text + " (default: %(default)s)"


def add_command(subparsers, name, description=None):
    """A subcommand parser whose --help shows descriptions as written and every default.

    Its one-line help is `COMMANDS[name]`'s (what `albert-tf --help` lists);
    it has --verbose, as `albert-tf` itself does.
    """
    help = COMMANDS[name][1]
    parser = subparsers.add_parser(name, help=help, description=description or help, formatter_class=HelpFormatter)
    add_verbose_flag(parser, default=argparse.SUPPRESS)
    return parser


def add_verbose_flag(parser, default=False):
    """--verbose, the same switch before the command (`albert-tf --verbose CMD`) and after it.

    A command's own takes `default=argparse.SUPPRESS`: argparse copies a
    subcommand's defaults over the top-level values, which would undo
    `albert-tf --verbose CMD`. `albert_tf.cli.main` reads the switch from the
    command line before anything loads TensorFlow.
    """
    parser.add_argument("--verbose", action="store_true", default=default,
                        help="Show TensorFlow's C++ and CUDA start-up messages.")


def config_flag(field):
    """The command-line flag of a config dataclass field, without its dashes: its `flag`, or its name in kebab case."""
    return field.metadata.get("flag", field.name.replace("_", "-"))


def add_config_flags(parser, config_cls, names=None, exclude=(), defaults=None):
    """Adds one flag per field of `config_cls`.

    Args:
        parser: an argparse parser or argument group.
        config_cls: a config dataclass whose fields carry `metadata["help"]`.
        names: the fields to expose, in this order (default: all).
        exclude: fields not to expose.
        defaults: {field: value} replacing the dataclass defaults on the command line.
    """
    fields = {field.name: field for field in dataclasses.fields(config_cls)}
    defaults = defaults or {}
    for name in names or list(fields):
        if name in exclude:
            continue
        field = fields[name]
        flag = "--" + config_flag(field)
        default = defaults.get(name, None if field.default is dataclasses.MISSING else field.default)
        kind = _value_type(field.type)
        options = {"dest": name, "default": default, "help": field.metadata.get("help", "")}
        if kind is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, **options)
        elif kind is tuple:
            parser.add_argument(flag, nargs="+", metavar=name.upper().rstrip("S"), **options)
        else:
            required = field.default is dataclasses.MISSING and name not in defaults
            parser.add_argument(flag, type=kind, choices=field.metadata.get("choices"), required=required,
                                metavar=_METAVARS.get(kind) if "choices" not in field.metadata else None,
                                **options)


def add_task_data_flags(parser):
    """--train and --eval, a task's data files (`finetune`, `distill`)."""
    parser.add_argument("--train", required=True, metavar="FILE", help="Training data.")
    parser.add_argument("--eval", required=True, metavar="FILE", help="Evaluation (dev) data.")


def add_mixed_precision_flag(parser):
    """--mixed-precision, for a command without a config field of that name, with the help every command shares."""
    parser.add_argument("--mixed-precision", choices=PRECISIONS, default="auto", help=MIXED_PRECISION_HELP)


def add_split_sentences_flag(parser):
    """--split-sentences, for the commands that read a corpus (`input_pipeline.Corpus(split_sentences=...)`)."""
    parser.add_argument(
        "--split-sentences", action="store_true",
        help="Split each line of the sentences and lines formats into sentences (rule-based: . ! or ? before a "
        "space and a word not in lowercase, or 。！？), for a corpus of one text per line: without it each such "
        "text is one sentence, which forms no sentence pair inside it.",
    )


def add_jit_compile_aliases(parser):
    """--jit-compile / --no-jit-compile: older spellings of --compile-step forward / none, kept for old commands.

    Add them after the `compile_step` flag, whose default they leave alone.
    """
    for flag, value in (("--jit-compile", "forward"), ("--no-jit-compile", "none")):
        parser.add_argument(flag, dest="compile_step", action="store_const", const=value,
                            default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def config_kwargs(config_cls, args, names=None, exclude=()):
    """{field: value} of the `add_config_flags` flags in parsed `args`."""
    values = {}
    for field in dataclasses.fields(config_cls):
        if (names and field.name not in names) or field.name in exclude or not hasattr(args, field.name):
            continue
        value = getattr(args, field.name)
        values[field.name] = tuple(value) if isinstance(value, list) else value
    return values


def add_strategy_flags(parser, strategies, note=""):
    """Adds --strategy, --tpu, --tpu-zone, --gcp-project and --logical-cpus (read back by `strategy_from_flags`).

    Args:
        parser: an argparse parser or argument group.
        strategies: the --strategy choices, `albert_tf.distribute.STRATEGY_NAMES`
            (passed in: this module loads with `albert-tf --help`, which must
            not wait for TensorFlow).
        note: appended to --strategy's help (what the command does under them).
    """
    parser.add_argument("--strategy", choices=strategies,
                        help="tf.distribute strategy (default: tpu with --tpu, else default)." + note)
    parser.add_argument("--tpu", help="TPU name, grpc:// address or \"local\"; selects --strategy tpu (any other "
                        "--strategy with it is an error).")
    parser.add_argument("--tpu-zone", help="Cloud zone of the TPU named by --tpu (default: this machine's).")
    parser.add_argument("--gcp-project", help="Cloud project of the TPU named by --tpu (default: this machine's).")
    parser.add_argument("--logical-cpus", type=int,
                        help="Split the CPU into this many devices (mirrored runs on a CPU-only machine).")


def strategy_from_flags(args):
    """(name, `tf.distribute.Strategy`) from `add_strategy_flags`' flags.

    Call it before any other TensorFlow work of the process: --logical-cpus
    splits the CPU, which TensorFlow allows only before it initializes.

    Raises:
        ValueError: --tpu with another --strategy, or no TPU answers at --tpu.
    """
    # Here, not at the top: `albert-tf --help` imports this module and must not load TensorFlow.
    from albert_tf.distribute import configure_logical_cpus, get_strategy

    if args.tpu is not None and args.strategy not in (None, "tpu"):
        raise UserError(f"--tpu {args.tpu} runs on a TPU; it does not go with --strategy {args.strategy}. "
                         "Drop one of them.")
    name = args.strategy or ("tpu" if args.tpu is not None else "default")
    for flag, value in (("--tpu-zone", args.tpu_zone), ("--gcp-project", args.gcp_project)):
        if value is not None and name != "tpu":
            raise UserError(f"{flag} {value} names where a TPU is; it goes with --tpu, not --strategy {name}.")
    if args.logical_cpus:
        configure_logical_cpus(args.logical_cpus)
    try:
        return name, get_strategy(name, tpu=args.tpu, tpu_zone=args.tpu_zone, gcp_project=args.gcp_project)
    except ValueError as e:
        if name != "tpu":
            raise
        raise UserError(f"--tpu {args.tpu or '(none: this machine)'}: {e}") from e


_METAVARS = {int: "N", float: "X", str: "TEXT"}


def _value_type(annotation):
    """int for `int`, `int | None`; tuple for `tuple | None`; and so on."""
    if isinstance(annotation, types.UnionType):
        annotation = next(arg for arg in annotation.__args__ if arg is not type(None))
    return annotation
