"""The venvs some tests run other packages in (TensorFlow 2.20 for TF-Serving, the TFLite Task Library),
made once per user and machine, with uv (the test extra) where the running Python has it, else with pip.
Standard library only: `.ci/run` runs it as `.venv/bin/python tests/venv_cache.py` to make them while
the tests start, and the tests find them made or wait for them.
"""

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

# What tensorflow/serving's newest build links: TensorFlow's and TensorFlow Text's ops of this minor version.
TF_SERVING_REQUIREMENTS = ["tensorflow==2.20.*", "tensorflow-text==2.20.*"]
# tflite-support 0.4.4 (2023, the last release) pins protobuf < 4 and links libusb-1.0, which this
# machine image lacks: libusb-package ships it.
TASK_LIBRARY_REQUIREMENTS = ["tflite-support==0.4.4", "numpy<2", "libusb-package==1.0.30.0"]
# name -> (requirements, install timeout in seconds)
VENVS = {"tf-serving": (TF_SERVING_REQUIREMENTS, 1800), "task-library": (TASK_LIBRARY_REQUIREMENTS, 600)}


def venv_cache():
    """The per-user folder the test venvs are kept in: $XDG_CACHE_HOME/albert-tf/test-venvs (~/.cache/...)."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "albert-tf", "test-venvs")


def venv_python(name):
    """The python of the venv `name` of VENVS (holding its requirements, no albert-tf), made once per user and machine.

    The venv's folder is named by a hash of its requirements and of the Python that runs it, so a
    second run (another clone, a fresh CI checkout) finds it made, and a changed pin makes a new one.
    One process builds it while any other that needs it waits on a lock; it is built beside its
    final name and renamed into place, so a run that stops halfway leaves no half-made venv there. A
    failed install raises AssertionError with the installer's output.
    """
    requirements, timeout = VENVS[name]
    key = hashlib.sha256("\n".join([sys.version, *requirements]).encode()).hexdigest()[:16]
    venv = os.path.join(venv_cache(), f"{name}-{key}")
    python = os.path.join(venv, "bin", "python")
    os.makedirs(venv_cache(), exist_ok=True)
    with open(f"{venv}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(python):
            return python
        building = tempfile.mkdtemp(prefix=f".{name}-", dir=venv_cache())
        try:
            install, venv_flags = _installer(os.path.join(building, "bin", "python"))
            subprocess.run([sys.executable, "-m", "venv", "--clear", *venv_flags, building], check=True, timeout=300)
            done = subprocess.run([*install, "-q", *requirements], capture_output=True, text=True, timeout=timeout)
            if done.returncode != 0:
                raise AssertionError(f"could not install {requirements}:\n{done.stderr[-4000:]}")
            os.rename(building, venv)
        finally:
            shutil.rmtree(building, ignore_errors=True)
    return python


def _installer(python):
    """(the install command for the venv of `python`, extra `venv` flags): uv's where it is importable."""
    try:
        import uv
    except ImportError:
        return [python, "-m", "pip", "install"], []
    # The venv then needs no pip of its own: uv installs into it from outside, in seconds, not minutes,
    # with the bytecode that pip would compile (no process writes it where PYTHONDONTWRITEBYTECODE is set).
    return [uv.find_uv_bin(), "pip", "install", "--compile-bytecode", "--python", python], ["--without-pip"]


if __name__ == "__main__":
    for name in VENVS:
        print(name, venv_python(name), flush=True)
