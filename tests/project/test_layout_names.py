"""The names of the files the outputs hold are written once, in `albert_tf.utils.layout`.

A module that needs one imports it from there: a second spelling of
"finetune.json" or ".unfinished-" is a second place to change when the layout
does, and the one forgotten reads or writes the wrong file. Read from the
source with `ast`: string constants, the text of f-strings included; docstrings
and comments describe the layout to a reader and are left alone.
"""

import ast
import os

from albert_tf.utils import layout
from source_scan import ROOT, modules

HOME = ROOT / "albert_tf" / "utils" / "layout.py"
NAMES = (layout.DATA_METADATA_FILE, layout.FINETUNE_RUN_FILE, layout.SAVED_MODEL_FILE, layout.TFLITE_MODEL_FILE,
         layout.UNFINISHED_PREFIX, layout.TRAINING_CONFIG_FILE, layout.FINAL_STEP_FILE, layout.TRAIN_LOG_FILE,
         # What an export writes (the web site's "model" and "mediapipe" directories are words too common to scan).
         layout.ASSETS_EXTRA_DIR, os.path.basename(layout.WARMUP_FILE), os.path.basename(layout.EXPORT_METADATA_FILE),
         layout.BATCHING_PARAMETERS_FILE, layout.TFLITE_METADATA_FILE, layout.LABELS_FILE, layout.WEB_PAGE_FILE,
         layout.WEB_SCRIPT_FILE)


def _docstrings(tree):
    """The ids of the string statements of `tree` (docstrings, and strings standing alone as statements)."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
    }


def spelled_out(paths, root=ROOT):
    """["file:line: 'name' in 'string'", ...] for every string of `paths` that spells out one of NAMES."""
    found = []
    for path in paths:
        if path == root / HOME.relative_to(ROOT):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        skip = _docstrings(tree)
        relative = path.relative_to(root).as_posix()
        strings = sorted((node.lineno, node.col_offset, node.value) for node in ast.walk(tree)
                         if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip)
        found += [f"{relative}:{line}: {name!r} in {value!r}" for line, _, value in strings for name in NAMES
                  if name in value]
    return found


def test_the_layout_names_are_spelled_out_only_in_their_home():
    found = spelled_out(modules("albert_tf") + modules("input_pipeline"))
    assert not found, ("file names of the outputs spelled out beside albert_tf/utils/layout.py; import its "
                       "name instead:\n" + "\n".join(found))


def test_a_spelled_out_name_is_found_and_a_docstring_is_not(tmp_path):
    module = tmp_path / "albert_tf" / "commands" / "planted.py"
    module.parent.mkdir(parents=True)
    module.write_text('"""Writes OUT/finetune.json."""\n\n'
                      'def run(out):\n    """Names .unfinished-OUT in its docstring."""\n'
                      '    print(f"kept in {out}/finetune.json")\n    return out + "/.unfinished-x"\n')
    assert spelled_out([module], root=tmp_path) == [
        "albert_tf/commands/planted.py:5: 'finetune.json' in '/finetune.json'",
        "albert_tf/commands/planted.py:6: '.unfinished-' in '/.unfinished-x'",
    ]
