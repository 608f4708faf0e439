"""What every config dataclass shares: field checks and the JSON round-trip.

The checks raise the project's one error style ("`name` must be ... Received:
name=value"), so `AlbertConfig`, `TrainerConfig`, `FinetuneConfig` and
`PretrainingDataConfig` say the same thing about the same mistake.

A field's help text lives once, in `dataclasses.field(metadata={"help": ...})`
(`doc`); the command line builds its flags from it (`albert_tf.commands.flags`).
"""

import dataclasses
import json
import math
import os

from albert_tf.utils import files
from albert_tf.utils.errors import UserError


def doc(default, help, **metadata):
    """A dataclass field with `default` and its one-line `help` (also the CLI's)."""
    return dataclasses.field(default=default, metadata={"help": help, **metadata})


def check_positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"`{name}` must be a positive integer. Received: {name}={value!r}")


def check_int_in(name, value, low, high, high_name=None):
    """An integer in [low, high]; `high_name` names the bound in the message."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        bound = high_name or high
        raise UserError(f"`{name}` must be an integer in [{low}, {bound}]. Received: {name}={value!r}"
                         + (f", {high_name}={high}" if high_name else ""))


def check_fraction(name, value, low_open=False, high_open=False):
    """A number in [0, 1]; `low_open` / `high_open` exclude the ends."""
    ok = _is_number(value) and (0 < value if low_open else 0 <= value) and (value < 1 if high_open else value <= 1)
    if not ok:
        interval = ("(" if low_open else "[") + "0, 1" + (")" if high_open else "]")
        raise UserError(f"`{name}` must be in {interval}. Received: {name}={value!r}")


def check_non_negative(name, value):
    if not _is_number(value) or not 0 <= value < math.inf:
        raise UserError(f"`{name}` must be a finite non-negative number. Received: {name}={value!r}")


def check_positive(name, value):
    if not _is_number(value) or not 0 < value < math.inf:
        raise UserError(f"`{name}` must be a finite positive number. Received: {name}={value!r}")


def check_choice(name, value, choices):
    if value not in choices:
        raise UserError(f"`{name}` must be one of {tuple(choices)}. Received: {name}={value!r}")


def check_bool(name, value):
    if not isinstance(value, bool):
        raise UserError(f"`{name}` must be True or False. Received: {name}={value!r}")


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class JsonConfig:
    """JSON round-trip for a frozen config dataclass.

    `from_dict` rejects keys that name no field and lists the valid ones;
    tuple fields come back as tuples (JSON has only lists). Subclasses with
    other spellings of their fields (`AlbertConfig`) override `from_dict` /
    `to_dict` and keep `save` / `load`.
    """

    def replace(self, **changes):
        """A copy with `changes` applied (validated like any new config)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self):
        return {
            field.name: list(value) if isinstance(value, tuple) else value
            for field in dataclasses.fields(self)
            for value in [getattr(self, field.name)]
        }

    @classmethod
    def from_dict(cls, values):
        if not isinstance(values, dict):
            raise UserError(f"A {cls.__name__} must be a JSON object. Received: {type(values).__name__}")
        fields = {field.name: field for field in dataclasses.fields(cls)}
        unknown = sorted(set(values) - set(fields))
        if unknown:
            raise UserError(f"Unknown {cls.__name__} keys {unknown}. Valid keys: {sorted(fields)}")
        values = {
            name: tuple(value) if isinstance(value, list) and "tuple" in str(fields[name].type) else value
            for name, value in values.items()
        }
        return cls(**values)

    def to_json(self):
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text):
        return cls.from_dict(json.loads(text))

    def save(self, path):
        """Writes the config as JSON to `path` (a file, or a directory's config.json)."""
        if files.isdir(path):
            path = os.path.join(path, "config.json")
        files.write_text(path, self.to_json())

    @classmethod
    def load(cls, path, **kwargs):
        """Reads a config from a JSON file or a directory holding config.json.

        Raises:
            ValueError: naming the file when it is missing, unreadable, not
                JSON, or holds keys that are not fields.
        """
        if files.isdir(path):
            path = os.path.join(path, "config.json")
        try:
            values = json.loads(files.read_text(path))
        except OSError as e:
            raise UserError(f"Cannot read config {path}: {e.strerror}") from e
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise UserError(f"{path} is not valid JSON: {e}") from e
        try:
            return cls.from_dict(values, **kwargs)
        except (TypeError, ValueError) as e:
            raise UserError(f"{path}: {e}") from e
