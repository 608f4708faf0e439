"""Runs MediaPipe Tasks' TextClassifier on a .tflite file, as an app would: raw text in, categories out.

    python mediapipe_worker.py MODEL.tflite < texts.json > results.json

Its own process: MediaPipe carries its own TFLite runtime and absl, which
should not meet TensorFlow's in the test process. Prints, per text, the
categories of each head in output order: [{"head": ..., "scores": {index: [name, score]}}].
"""

import json
import sys

from mediapipe.tasks.python import text
from mediapipe.tasks.python.core import base_options


def main(model_path):
    texts = json.load(sys.stdin)
    options = text.TextClassifierOptions(base_options=base_options.BaseOptions(model_asset_path=model_path))
    results = []
    with text.TextClassifier.create_from_options(options) as classifier:
        for line in texts:
            heads = classifier.classify(line).classifications
            results.append([
                {"head": h.head_name, "scores": {c.index: [c.category_name, c.score] for c in h.categories}}
                for h in heads
            ])
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
