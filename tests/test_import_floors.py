"""The floors of the code: every import goes down (or stays on its floor), and no import cycle.

The graph is read from the source with `ast`: module-level and function-level
imports alike, and `from package import name` counts as an import of
`package.name` when `name` is a submodule. A module's floor is its package's
(the longest prefix in `FLOORS`).
"""

import ast
import os
import subprocess
import sys

from source_scan import ROOT

# Lowest first. A module may import modules of its own floor or lower ones.
FLOORS = {
    # Text, tokenizer, tf.data: no Keras.
    "input_pipeline": 0,
    # What both data and models read, and nothing heavy: the model config, and
    # where models and tokenizers live on disk (albert-tf's own and HF's
    # directory layouts, the tokenizer that goes with a model).
    # The lazy public names (PEP 562): they name every floor and import none.
    "albert_tf": 1,
    "albert_tf.config": 1,
    "albert_tf.model_dirs": 1,
    "albert_tf.hf_checkpoint": 1,
    # Keras' registry entries for the classes, by name: like the public names,
    # it names the modules that define them and imports them only when an
    # archive is loaded.
    "albert_tf.keras_registry": 1,
    # Which precision and XLA setting "auto" means on this machine: reads
    # /proc/cpuinfo, imports TensorFlow only to ask a strategy its device.
    "albert_tf.precision": 1,
    # Keras building blocks, and the Keras pieces a model's config names
    # (its preprocessor layer, its optimizer and learning-rate schedule).
    "albert_tf.layers": 2,
    "albert_tf.preprocessor": 2,
    "albert_tf.schedules": 2,
    "albert_tf.optimizers": 2,
    # The models, their pretrained directories and their checkpoint weight names.
    "albert_tf.models": 3,
    # Whatever model a directory holds, and whole-directory conversions.
    "albert_tf.saving": 4,
    "albert_tf.convert": 4,
    # Training loops, distribution, and the fine-tuning tasks built on them.
    "albert_tf.accumulation": 5,
    "albert_tf.distribute": 5,
    "albert_tf.training": 5,
    "albert_tf.tasks": 5,
    # Forward passes with the weights frozen to constants (TensorFlow graphs).
    "albert_tf.inference": 5,
    "albert_tf.export": 6,
    "albert_tf.commands": 7,
    "albert_tf.apps": 7,
    "albert_tf.cli": 7,
}
PACKAGES = ("albert_tf", "input_pipeline")


def _module_name(path):
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _project_modules():
    """{module name: path} of every module of albert_tf and input_pipeline."""
    return {
        _module_name(path): path
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
    }


def _resolve(node, module, is_package):
    """The absolute module a `from ... import` names (relative imports resolved)."""
    if node.level == 0:
        return node.module
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _import_graph():
    """{module: {imported project module: line}} for every import in the source."""
    modules = _project_modules()
    graph = {}
    for module, path in modules.items():
        edges = graph.setdefault(module, {})
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(node, module, path.name == "__init__.py")
                # `from package import submodule` imports package.submodule.
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    for alias in node.names
                ]
            else:
                continue
            for target in targets:
                # `import a.b.c` names a.b.c; a name from a module is that module.
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != module:
                    edges.setdefault(target, node.lineno)
    return graph


def _floor(module):
    """The floor of `module`: its own entry or its package's; "albert_tf" is the root module only."""
    prefix = module
    while prefix not in FLOORS or (prefix == "albert_tf" and module != prefix):
        if "." not in prefix:
            raise AssertionError(f"{module} has no floor: add it or its package to FLOORS in this test.")
        prefix = prefix.rpartition(".")[0]
    return FLOORS[prefix]


def test_every_module_has_a_floor():
    for module in _project_modules():
        _floor(module)


def test_no_import_goes_up_a_floor():
    upward = [
        f"{module} (floor {_floor(module)}) imports {target} (floor {_floor(target)}) at line {line}"
        for module, edges in _import_graph().items()
        for target, line in edges.items()
        if _floor(target) > _floor(module)
    ]
    assert not upward, "imports up a floor:\n" + "\n".join(upward)


def _find_cycle(graph):
    """One cycle of `graph` as a list of modules (first == last), or None."""
    state = {}  # module -> "open" while on the DFS stack, "done" after
    stack = []

    def visit(module):
        state[module] = "open"
        stack.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == "open":
                return stack[stack.index(target):] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        stack.pop()
        state[module] = "done"
        return None

    for module in sorted(graph):
        if module not in state:
            cycle = visit(module)
            if cycle:
                return cycle
    return None


def test_no_import_cycle():
    # A package's __init__ imports its submodules, so a submodule that imports
    # a name from its own package (not a sibling submodule) closes a cycle too.
    cycle = _find_cycle(_import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_graph_sees_deferred_and_submodule_imports():
    # The checks above are only as good as the graph: it must hold an import
    # made inside a function (the task models load the preprocessor on use)
    # and read `from package import submodule` as the submodule.
    graph = _import_graph()
    assert "albert_tf.preprocessor" in graph["albert_tf.models.task_base"]
    assert "input_pipeline.finetuning.text_inputs" in graph["albert_tf.preprocessor"]
    assert "input_pipeline.finetuning" not in graph["albert_tf.preprocessor"]


def test_a_cycle_is_found_and_named():
    graph = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}
    assert _find_cycle(graph) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b": 1}, "b": {}}) is None


def test_reading_a_tokenizer_loads_no_keras_and_no_models(tmp_path):
    # `albert-tf create-data` reads the tokenizer this way; its workers must
    # not pay for Keras, the models or the converter.
    from data_fixtures import small_tokenizer

    small_tokenizer().save(str(tmp_path / "tokenizer"))
    script = (
        "import sys\n"
        "from albert_tf import model_dirs\n"
        "from input_pipeline import AlbertTokenizer\n"
        f"model_dirs.load_tokenizer({str(tmp_path / 'tokenizer')!r})\n"
        f"model_dirs.find_tokenizer({str(tmp_path)!r})\n"
        f"AlbertTokenizer.load({str(tmp_path / 'tokenizer')!r})\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
    loaded = set(result.stdout.split())
    heavy = sorted(m for m in loaded if m == "keras" or m.startswith(("albert_tf.models", "albert_tf.convert")))
    assert not heavy, heavy


PUBLIC_NAMES = (
    "AlbertTokenizer", "AlbertPreprocessor", "AlbertConfig", "AlbertBackbone", "AlbertPretrainer",
    "AlbertClassifier", "AlbertRegressor", "AlbertTagger", "AlbertQuestionAnswerer", "AlbertMultipleChoice",
    "load_pretrained", "save_pretrained", "export_saved_model", "export_tflite",
)


def test_one_public_import_and_it_stays_light():
    # `import albert_tf` (the CLI's `--help`, data workers) loads neither
    # Keras nor TensorFlow; each public name loads its module on first use.
    script = (
        "import sys\n"
        "import albert_tf\n"
        "assert not {'keras', 'tensorflow'} & set(sys.modules), sorted({'keras', 'tensorflow'} & set(sys.modules))\n"
        f"from albert_tf import {', '.join(PUBLIC_NAMES)}\n"
        "from albert_tf.models import AlbertBackbone as backbone_class\n"
        "from input_pipeline.tokenizer import AlbertTokenizer as tokenizer_class\n"
        "assert AlbertBackbone is backbone_class and AlbertTokenizer is tokenizer_class\n"
        f"missing = set({PUBLIC_NAMES!r}) - set(albert_tf.__all__)\n"
        "assert not missing, missing\n"
        "print('ok')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=ROOT)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]
