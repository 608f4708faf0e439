"""Runs the TFLite Task Library's BertNLClassifier on a .tflite file, as an app would: raw text in, categories out.

    python task_library_worker.py MODEL.tflite < texts.json > results.json

Runs under its own virtual environment (export_fixtures.task_library_python): tflite-support 0.4.4,
the last release, needs protobuf < 4, which TensorFlow 2.21 cannot share a process or a venv with.
Prints, per text, {index: [name, score]} of the one head.
"""

import json
import sys

from tflite_support.task import text


def main(model_path):
    texts = json.load(sys.stdin)
    classifier = text.BertNLClassifier.create_from_file(model_path)
    results = []
    for line in texts:
        (head,) = classifier.classify(line).classifications
        # The Task Library leaves `index` at 0; the categories come in the label file's order.
        results.append({str(i): [c.category_name, c.score] for i, c in enumerate(head.categories)})
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
