"""A static web page that runs an exported classifier in the browser with MediaPipe Tasks for Web.

    OUT/index.html       the page (UTF-8, declared)
    OUT/classify.js      its script: MediaPipe's TextClassifier on typed text and on a file's lines
    OUT/model/           what `export_tflite` writes: model.tflite with TFLite Model Metadata, ...
    OUT/mediapipe/       @mediapipe/tasks-text's JavaScript bundle and wasm files, when found

The page needs no network: MediaPipe's files are copied from an installed
`@mediapipe/tasks-text` (npm). Without them the site is still written, and the
page says how to add them. Any static server serves it (`python -m http.server`
in OUT); browsers refuse module scripts and fetches from file:// pages.
"""

import os

from albert_tf.export import signatures as signatures_lib
from albert_tf.export.tflite import export_tflite
from albert_tf.export.web_site import write_page
from albert_tf.utils import files
from albert_tf.utils.errors import UserError
from albert_tf.utils.layout import WEB_MODEL_DIR, WEB_PAGE_FILE


def export_web(model, out_dir, *, tokenizer, mediapipe_dir=None, overwrite=False, **tflite_options):
    """Writes the static site (see the module docstring) for a classifier, published whole.

    Args:
        model: an `AlbertClassifier` or `AlbertMultiLabelClassifier` (independent bars, each threshold marked).
        out_dir: output directory: new or empty, unless `overwrite`.
        tokenizer: the model's `AlbertTokenizer` (MediaPipe reads it from the model's metadata).
        mediapipe_dir: an installed @mediapipe/tasks-text (`find_mediapipe`), or None to write the site
            without MediaPipe's files.
        overwrite: replace a non-empty `out_dir`.
        **tflite_options: `export_tflite`'s max_length, quantize, representative_texts,
            truncate_from, max_windows.

    Returns:
        The path of the site's index.html.

    Raises:
        UserError: the model is not a classifier, there is no tokenizer, or `out_dir` cannot be written.
    """
    interface = signatures_lib.describe_model(model)
    if interface.kind not in signatures_lib.CLASSIFY_KINDS:
        raise UserError(f"--format web shows a classifier's label probabilities; this model is a {interface.kind} "
                        "(use --format tflite).")
    if tokenizer is None:
        raise UserError("--format web needs the model's tokenizer (MediaPipe tokenizes the typed text with it): "
                        "pass --tokenizer DIR.")
    with files.publish_output(out_dir, overwrite, (WEB_PAGE_FILE,), "out_dir") as staging:
        export_tflite(model, os.path.join(staging, WEB_MODEL_DIR), tokenizer=tokenizer, metadata=True, **tflite_options)
        write_page(staging, mediapipe_dir)
    return os.path.join(files.normpath(out_dir), WEB_PAGE_FILE)
