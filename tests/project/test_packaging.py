"""setup.py declares every third-party package the project imports.

A package that arrives only through another one (scipy came with the test
extra's jax) keeps CI green while `pip install -e ".[demo]"` then
`albert-tf demo` fails on a fresh machine. Imports at module level must be
in `install_requires` (importing the package needs them); imports inside a
function (or an `if`/`try`) may also come from an extra (e.g. torch to read
PyTorch pickles).
"""

import ast
import functools
import importlib.metadata
import re
import sys

from source_scan import ROOT, imports, modules

PACKAGES = ("albert_tf", "input_pipeline")


def _normalize(name):
    """PEP 503 name of a requirement string ("jax[cpu]>=0.6" -> "jax")."""
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", name.strip()).group(0)).lower()


def declared_requirements(setup_path):
    """(install_requires, {extra: requirements}) read from setup.py's `setup(...)` call, names normalized."""
    required, extras = _requirements(setup_path)
    return ({_normalize(r) for r in required},
            {extra: {_normalize(r) for r in requirements} for extra, requirements in extras.items()})


def _requirements(setup_path):
    """(install_requires, {extra: requirements}) as written in setup.py, unnormalized."""
    tree = ast.parse(setup_path.read_text(encoding="utf-8"))
    call = next(node for node in ast.walk(tree)
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setup")
    arguments = {keyword.arg: keyword.value for keyword in call.keywords}
    return ast.literal_eval(arguments["install_requires"]), ast.literal_eval(arguments["extras_require"])


def third_party_imports(packages):
    """{top-level module: set of (file, at module level)} for imports outside the stdlib and the project."""
    found = {}
    for package in packages:
        for path in modules(package):
            for name, top_level in imports(ast.parse(path.read_text(encoding="utf-8"))):
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in PACKAGES:
                    found.setdefault(top, set()).add((str(path.relative_to(ROOT)), top_level))
    return found


@functools.cache
def _installed():
    """{top-level module: distribution names}, read once: it scans every installed distribution."""
    return importlib.metadata.packages_distributions()


def distributions_of(module):
    """Normalized names of the installed distributions that provide top-level `module`."""
    return {_normalize(d) for d in _installed().get(module, [])}


def undeclared(imports, required, extras):
    """Lines naming each import setup.py does not declare where it must."""
    optional = set().union(*extras.values())
    problems = []
    for module, places in sorted(imports.items()):
        distributions = distributions_of(module)
        if not distributions:
            problems.append(f"{module}: imported by {sorted(places)[0][0]} but no installed distribution provides it")
            continue
        for path, top_level in sorted(places):
            allowed = required if top_level else required | optional
            if not distributions & allowed:
                where = "install_requires (module-level import)" if top_level else "install_requires or an extra"
                problems.append(f"{module} ({', '.join(sorted(distributions))}): imported by {path}; "
                                f"not in {where}")
    return problems


def test_every_third_party_import_is_declared_in_setup_py():
    required, extras = declared_requirements(ROOT / "setup.py")
    imports = third_party_imports(PACKAGES)
    # The scan found what the project is known to import (a broken scan would pass vacuously).
    assert {"tensorflow", "keras", "numpy", "sentencepiece", "scipy", "tensorflow_text"} <= set(imports)
    assert undeclared(imports, required, extras) == []


def test_the_check_catches_a_missing_or_misplaced_requirement():
    required, extras = declared_requirements(ROOT / "setup.py")
    imports = third_party_imports(PACKAGES)
    # scipy only through an extra (what happened before 70d9ed9): its import in a function is not enough
    # unless an extra names it, and it is in none.
    problems = undeclared(imports, required - {"scipy"}, extras)
    assert any(line.startswith("scipy (scipy): imported by albert_tf/training/embedding_init.py") for line in problems)
    # A module-level import may not lean on an extra.
    problems = undeclared(imports, required - {"numpy"}, {**extras, "extra": {"numpy"}})
    assert any("numpy" in line and "module-level" in line for line in problems)


def test_the_tpu_extra_pins_one_tensorflow_version_that_the_default_install_allows():
    from packaging.requirements import Requirement

    required, extras = _requirements(ROOT / "setup.py")
    base = {r.name: r.specifier for r in map(Requirement, required)}
    tpu = {r.name: r.specifier for r in map(Requirement, extras["tpu"])}
    assert set(tpu) == {"tensorflow-tpu", "tensorflow-text", "libtpu"}
    # tensorflow-text X.Y requires tensorflow X.Y: the TPU build and the text ops must be of one minor version.
    assert str(tpu["tensorflow-tpu"]) == str(tpu["tensorflow-text"])
    version = str(tpu["tensorflow-tpu"]).removeprefix("==").removesuffix(".*")
    for name in ("tensorflow", "tensorflow-text"):
        assert base[name].contains(version + ".0"), (name, base[name], version)
    # The default install takes both supported minor versions.
    assert base["tensorflow"].contains("2.20.0") and base["tensorflow"].contains("2.21.0")
