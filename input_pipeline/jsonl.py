"""JSON Lines: one JSON object per line, blank lines skipped; the one reader of every JSONL input."""

import json
from albert_tf.utils.errors import UserError


def read_jsonl(lines, source, require_object=True, blanks=False):
    """Parses JSON Lines.

    Args:
        lines: iterable of str, e.g. an open text file.
        source: the file's name, for error messages.
        require_object: refuse a line whose value is not a JSON object.
        blanks: also yield (line_number, None) for each blank line.

    Yields:
        (line_number, value), numbered from 1.

    Raises:
        ValueError: naming `source:line` for invalid JSON or a non-object.
    """
    for number, line in enumerate(lines, 1):
        if not line.strip():
            if blanks:
                yield number, None
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as e:
            raise UserError(f"{source}:{number}: not valid JSON: {e}") from None
        if require_object and not isinstance(value, dict):
            raise UserError(f"{source}:{number}: expected a JSON object, found {type(value).__name__}")
        yield number, value
