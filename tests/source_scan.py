"""Reading the project's own imports from its source (no import of the code itself)."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent


def modules(package):
    """The .py files of `package` (a top-level folder of the repository), sorted."""
    return sorted((ROOT / package).rglob("*.py"))


def imports(tree):
    """(imported module, is at module level) for every absolute import in a parsed file.

    "Module level" means a statement of the module's body itself: an import
    inside a function, a class, or an `if`/`try` is not one.
    """
    top_level = {id(node) for node in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module]
        else:
            continue
        for name in names:
            yield name, id(node) in top_level
