"""What the fine-tuning readers return, and how they report bad rows.

Every reader returns a `ReadResult`: the examples it kept and, for each row it
could not use, a `Skipped` record naming the file and line, and all of them in
input order (`rows`, where blank lines show too). With
`on_error="raise"` (the default) the first bad row raises a ValueError with
that location instead; with `on_error="skip"` the caller gets the skipped rows
back and must report their count. Nothing is dropped silently.
"""

import dataclasses
import unicodedata

from albert_tf.utils.errors import UserError

ON_ERROR = ("raise", "skip")


@dataclasses.dataclass(frozen=True)
class TextExample:
    """One sentence or sentence pair with its label.

    Attributes:
        text_a: the first (or only) text.
        text_b: the second text of a pair, or None.
        label: class id (int), score (float), or None for unlabelled data.
        source: "file:line" of the row, for messages.
    """

    text_a: str
    text_b: str | None
    label: int | float | None
    source: str


@dataclasses.dataclass(frozen=True)
class Skipped:
    source: str  # "file:line"
    reason: str

    def __str__(self):
        return f"{self.source}: {self.reason}"


@dataclasses.dataclass(frozen=True)
class BlankLine:
    """A blank line among a line-based file's rows (readers pass over them; `predict` answers each)."""

    source: str  # "file:line"


@dataclasses.dataclass
class ReadResult:
    """What a reader read.

    Attributes:
        examples: the rows it kept.
        skipped: a `Skipped` for each row it could not use (with on_error="skip").
        rows: every row in input order: an example, a `Skipped`, or a
            `BlankLine` (a blank line after a line-based file's header).
    """

    examples: list
    skipped: list
    rows: list = dataclasses.field(default_factory=list)

    def summary(self, what="examples"):
        """One line for logs: how many were read and skipped, with the first reason."""
        line = counted(len(self.examples), what)
        if self.skipped:
            line += f", {len(self.skipped)} skipped (first: {self.skipped[0]})"
        return line


def counted(n, plural):
    """"1 example", "2 examples": `n` and the noun `plural` (ending in s), singular for one."""
    return f"{n} {plural[:-1] if n == 1 and plural.endswith('s') else plural}"


class RowLog:
    """A reader's rows in input order: each kept example, each bad row (raised or recorded, following `on_error`), each blank line."""

    def __init__(self, on_error):
        if on_error not in ON_ERROR:
            raise UserError(f"`on_error` must be one of {ON_ERROR}. Received: on_error={on_error!r}")
        self.on_error = on_error
        self.examples, self.skipped, self.rows = [], [], []

    def keep(self, example):
        self.examples.append(example)
        self.rows.append(example)

    def bad_row(self, source, reason):
        if self.on_error == "raise":
            raise UserError(f"{source}: {reason}")
        self.skipped.append(Skipped(source, reason))
        self.rows.append(self.skipped[-1])

    def blank(self, source):
        self.rows.append(BlankLine(source))

    def result(self):
        return ReadResult(self.examples, self.skipped, self.rows)


def check_columns(path, available, wanted):
    """Raises unless every non-None name in `wanted` is among `available`."""
    missing = [name for name in wanted if name is not None and name not in available]
    if missing:
        raise UserError(
            f"{path}: missing column(s) {missing}. The file has columns {list(available)}."
        )


def check_label_name(name, where):
    """`name`, a label or tag, when it holds no control character; a UserError naming `where` otherwise.

    Exports list the labels one a line (labels.txt in TFLite's metadata, which the Task Library, MediaPipe
    and the web page read): a newline inside one would shift every label after it, silently. So are
    refused the other characters that end a line (Unicode's line and paragraph separators) and every
    other control character (tab, NUL, DEL, C1 controls), which no reader of a label list expects.
    """
    bad = next((c for c in str(name) if unicodedata.category(c) in ("Cc", "Zl", "Zp")), None)
    if bad is not None:
        raise UserError(f"{where}: the label {str(name)!r} holds the control character U+{ord(bad):04X}; "
                        "labels are listed one a line in exports, so they cannot hold line breaks, tabs "
                        "or other control characters.")
    return name


class LabelMap:
    """Maps label strings to class ids, or parses regression scores.

    Args:
        label_names: list of label strings (class i is label_names[i]), or
            None for regression.
    """

    def __init__(self, label_names=None):
        self.label_names = None if label_names is None else [str(n) for n in label_names]
        self._ids = None if label_names is None else {n: i for i, n in enumerate(self.label_names)}

    @property
    def regression(self):
        return self.label_names is None

    def parse(self, value):
        """Returns (label, None) or (None, reason)."""
        text = str(value).strip()
        if self.regression:
            try:
                return float(text), None
            except ValueError:
                return None, f"label {text!r} is not a number (this is a regression task)"
        if text not in self._ids:
            return None, f"label {text!r} is not in the label set {self.label_names}"
        return self._ids[text], None
