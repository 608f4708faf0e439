"""The web page's files, without TensorFlow: the page, its script and MediaPipe Tasks for Web's files.

`albert_tf.export.web` writes them beside the model; `albert-tf export
--format web` looks for MediaPipe's files (`find_mediapipe`) before the model
loads, so that a wrong --mediapipe costs no conversion.
"""

import json
import os
import shutil
import subprocess

from albert_tf.utils import files
from albert_tf.utils.errors import UserError
from albert_tf.utils.layout import WEB_MEDIAPIPE_DIR, WEB_MODEL_DIR, WEB_PAGE_FILE, WEB_SCRIPT_FILE

# The @mediapipe/tasks-text release the page is tested with (tests/browser/package.json pins the same).
MEDIAPIPE_VERSION = "1.0.1"
MEDIAPIPE_PACKAGE = "@mediapipe/tasks-text"
# What the page loads from the package: the ES module bundle, and the wasm runtime with and without
# SIMD (FilesetResolver picks one by what the browser supports). The package's *_module_* wasm is
# for `forTextTasks(path, true)`, which the page does not use.
MEDIAPIPE_FILES = (
    "text_bundle.mjs",
    "wasm/text_wasm_internal.js", "wasm/text_wasm_internal.wasm",
    "wasm/text_wasm_nosimd_internal.js", "wasm/text_wasm_nosimd_internal.wasm",
)
_ASSETS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "web_page")
_VERSION_SLOT = "%MEDIAPIPE_VERSION%"


def how_to_get_mediapipe():
    """The one line that says how to get MediaPipe's files for the page."""
    return (f"npm install {MEDIAPIPE_PACKAGE}@{MEDIAPIPE_VERSION}, then export again with "
            f"--mediapipe node_modules/{MEDIAPIPE_PACKAGE}")


def find_mediapipe(package_dir=None, search=(".",)):
    """The installed @mediapipe/tasks-text directory and its version, or (None, None).

    Args:
        package_dir: the package directory a user named (checked, never searched past).
        search: directories whose node_modules/ are looked in, in order, before
            npm's global root (`npm root -g`, when npm is on the PATH).

    Raises:
        UserError: `package_dir` is not an @mediapipe/tasks-text package with the files the page loads.
    """
    if package_dir is not None:
        return package_dir, _package_version(package_dir, "--mediapipe")
    roots = [os.path.join(directory, "node_modules") for directory in search]
    npm = shutil.which("npm")
    if npm:
        done = subprocess.run([npm, "root", "-g"], capture_output=True, text=True, timeout=60)
        if done.returncode == 0 and done.stdout.strip():
            roots.append(done.stdout.strip())
    for root in roots:
        candidate = os.path.join(root, *MEDIAPIPE_PACKAGE.split("/"))
        if os.path.isdir(candidate):
            return candidate, _package_version(candidate, f"{MEDIAPIPE_PACKAGE} in {root}")
    return None, None


def _package_version(package_dir, name):
    manifest = os.path.join(package_dir, "package.json")
    try:
        package = json.loads(files.read_text(manifest))
    except (OSError, ValueError) as e:
        raise UserError(f"{name} {package_dir}: not an npm package ({manifest}: {e}); {how_to_get_mediapipe()}.")
    found = package.get("name") if isinstance(package, dict) else None
    if found != MEDIAPIPE_PACKAGE:
        raise UserError(f"{name} {package_dir}: its package.json names {found!r}, not {MEDIAPIPE_PACKAGE}.")
    missing = [f for f in MEDIAPIPE_FILES if not files.isfile(os.path.join(package_dir, f))]
    if missing:
        raise UserError(f"{name} {package_dir}: {MEDIAPIPE_PACKAGE} {package.get('version')} lacks "
                        f"{', '.join(missing)}; {how_to_get_mediapipe()}.")
    return str(package.get("version"))


def write_page(site_dir, mediapipe_dir=None):
    """Writes the page, its script and (from `mediapipe_dir`, a checked package) MediaPipe's files into `site_dir`."""
    with open(os.path.join(_ASSETS, WEB_PAGE_FILE), encoding="utf-8") as f:
        page = f.read().replace(_VERSION_SLOT, MEDIAPIPE_VERSION)
    files.write_text(os.path.join(site_dir, WEB_PAGE_FILE), page)
    with open(os.path.join(_ASSETS, WEB_SCRIPT_FILE), encoding="utf-8") as f:
        files.write_text(os.path.join(site_dir, WEB_SCRIPT_FILE), f.read())
    if mediapipe_dir is None:
        return
    for name in MEDIAPIPE_FILES:
        target = os.path.join(site_dir, WEB_MEDIAPIPE_DIR, name)
        files.makedirs(os.path.dirname(target))
        files.write_bytes(target, files.read_bytes(os.path.join(mediapipe_dir, name)))
