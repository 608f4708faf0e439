"""Public names of a package that load on first use (PEP 562), for every package here.

A package whose `__init__` imported its modules would load TensorFlow with the
first light module imported from it (a config, the constants a command's flags
need), so a command line's errors could not come back before it loads. Each
package instead names where its public names live, and they are imported when
first used.
"""

import importlib
import sys


def lazy_names(package, exports, submodules=()):
    """`(__all__, __getattr__, __dir__)` for `package`, whose public names load on first use.

    Args:
        package: the package's `__name__`.
        exports: {public name: full name of the module that defines it}.
        submodules: full names of submodules reached as attributes
            (`albert_tf.optimizers`).
    """
    names = sorted(exports) + [module.rpartition(".")[2] for module in submodules]

    def __getattr__(name):
        if name in exports:
            value = getattr(importlib.import_module(exports[name]), name)
        elif f"{package}.{name}" in submodules:
            value = importlib.import_module(f"{package}.{name}")
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        setattr(sys.modules[package], name, value)  # later lookups skip __getattr__
        return value

    def __dir__():
        return sorted(set(vars(sys.modules[package])) | set(names))

    return names, __getattr__, __dir__
