"""The floors of the code: every import goes down (or stays on its floor), and no import cycle.

The floor of every module is read from docs/architecture.md ("### Floor N: ..."
headings, then one "- `module`: what it holds" line per module): that page is
the plan, and this file its only check. The graph is read from the source with
`ast`: imports at module level and in functions alike, `from package import
name` as an import of `package.name` when `name` is a submodule, and a string
that is the full name of a project module (a lazy public name, the command
table cli imports by name) as an import of it.
"""

import ast
import re

from source_scan import ROOT, imports, modules

PACKAGES = ("albert_tf", "input_pipeline")
MAP = ROOT / "docs" / "architecture.md"
FLOOR_HEADING = re.compile(r"^### Floor (\d+): ")
MODULE_LINE = re.compile(r"^- `([\w.]+)`: \S")


def read_floor_map(text):
    """{module: floor} from the "## The floors" section of docs/architecture.md's text."""
    floors, floor, inside = {}, None, False
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("## "):
            inside = line == "## The floors"
            continue
        if not inside:
            continue
        heading = FLOOR_HEADING.match(line)
        if heading:
            floor = int(heading.group(1))
            continue
        entry = MODULE_LINE.match(line)
        if entry:
            module = entry.group(1)
            if floor is None or module in floors:
                raise AssertionError(f"{MAP.name}:{number}: {module} is listed twice or before any floor heading")
            floors[module] = floor
    return floors


def floor_map():
    return read_floor_map(MAP.read_text(encoding="utf-8"))


def _module_name(path, root):
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules(root=ROOT):
    """{module name: path} of every module of albert_tf and input_pipeline under `root`."""
    return {
        _module_name(path, root): path
        for package in PACKAGES
        for path in sorted((root / package).rglob("*.py"))
    }


def _resolve(node, module, is_package):
    """The absolute module a `from ... import` names (relative imports resolved)."""
    if node.level == 0:
        return node.module
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph(root=ROOT, strings=True):
    """{module: {imported project module: line}} for every import in the source under `root`.

    With `strings`, a string constant that is the dotted name of a project
    module counts as an import of it: `albert_tf.__getattr__` and cli import
    modules by such names (`_EXPORTS`, `_SUBMODULES`, `COMMANDS`).
    """
    modules = project_modules(root)
    graph = {}
    for module, path in modules.items():
        edges = graph.setdefault(module, {})
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
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
            elif strings and isinstance(node, ast.Constant) and isinstance(node.value, str):
                # Dotted names only: the bare "albert_tf" is also Keras' package label of the classes.
                targets = [node.value] if "." in node.value and node.value in modules else []
            else:
                continue
            for target in targets:
                # `import a.b.c` names a.b.c; a name from a module is that module.
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != module:
                    edges.setdefault(target, node.lineno)
    return graph


def upward_imports(graph, floors):
    """One line per import of `graph` that goes up a floor of `floors`."""
    return [
        f"{module} (floor {floors[module]}) imports {target} (floor {floors[target]}) at line {line}"
        for module, edges in sorted(graph.items())
        for target, line in sorted(edges.items())
        if floors[target] > floors[module]
    ]


def test_the_map_names_every_module_and_nothing_else():
    floors, modules = floor_map(), project_modules()
    missing = sorted(set(modules) - set(floors))
    assert not missing, (
        "modules without a floor: " + ", ".join(missing)
        + f"\nadd each to the floor map in docs/architecture.md, under its floor: - `MODULE`: what it holds"
    )
    stale = sorted(set(floors) - set(modules))
    assert not stale, "the floor map in docs/architecture.md names modules that do not exist: " + ", ".join(stale)


def test_no_import_goes_up_a_floor():
    floors = floor_map()
    graph = {m: e for m, e in import_graph().items() if m in floors}
    upward = upward_imports({m: {t: l for t, l in e.items() if t in floors} for m, e in graph.items()}, floors)
    assert not upward, "imports up a floor (see docs/architecture.md):\n" + "\n".join(upward)


def test_a_planted_upward_import_is_reported(tmp_path):
    # The commands once imported their exit code from cli, one floor up.
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            copy = tmp_path / path.relative_to(ROOT)
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    pretrain = tmp_path / "albert_tf" / "commands" / "pretrain.py"
    pretrain.write_text("from albert_tf.cli import EXIT_INTERRUPTED\n" + pretrain.read_text(encoding="utf-8"))
    upward = upward_imports(import_graph(tmp_path), floor_map())
    assert upward == ["albert_tf.commands.pretrain (floor 11) imports albert_tf.cli (floor 12) at line 1"], upward


def test_the_graph_sees_deferred_submodule_and_named_imports():
    # The checks are only as good as the graph: it must hold an import made
    # inside a function, read `from package import submodule` as the
    # submodule, and follow the modules that are imported by name.
    graph = import_graph()
    assert "albert_tf.preprocessor" in graph["albert_tf.models.task_base"]
    assert "input_pipeline.finetuning.text_inputs" in graph["albert_tf.preprocessor"]
    assert "input_pipeline.finetuning" not in graph["albert_tf.preprocessor"]
    assert {"albert_tf.export.tflite", "albert_tf.optimizers", "albert_tf.schedules"} <= set(graph["albert_tf"])
    assert {"albert_tf.commands.pretrain", "albert_tf.commands.serve"} <= set(graph["albert_tf.commands"])
    assert "albert_tf.models" in graph["albert_tf.keras_registry"]
    # Keras' package label of the classes is no import of the package.
    assert "albert_tf" not in graph["albert_tf.models.backbone"]


def test_the_map_is_read_line_by_line():
    text = "## The floors\n### Floor 0: low\n- `a`: x\n- `a.b`: y\n### Floor 3: high\n- `c`: z\n## Next\n- `d`: no\n"
    assert read_floor_map(text) == {"a": 0, "a.b": 0, "c": 3}


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
    # A module named by a string loads on first use, once every import has
    # finished, so it closes no cycle: only import statements count here.
    cycle = _find_cycle(import_graph(strings=False))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_a_cycle_is_found_and_named():
    graph = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}
    assert _find_cycle(graph) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b": 1}, "b": {}}) is None


def test_albert_tf_imports_input_pipeline_at_module_level():
    # An import hidden inside a function hides the direction of the arrow and
    # moves import errors from load time to the middle of a run.
    offenders = [
        f"{path.relative_to(ROOT)} imports {name} inside a function"
        for path in modules("albert_tf")
        for name, top_level in imports(ast.parse(path.read_text(encoding="utf-8")))
        if name.split(".")[0] == "input_pipeline" and not top_level
    ]
    assert not offenders, offenders


def test_no_command_imports_another_command():
    # A command imports what the commands share (a lower floor), never another command.
    from albert_tf.commands import COMMANDS

    commands = {module for module, _ in COMMANDS.values()}
    graph = import_graph(strings=False)
    siblings = {(module, target) for module in commands for target in graph[module] if target in commands}
    assert not siblings, sorted(siblings)
