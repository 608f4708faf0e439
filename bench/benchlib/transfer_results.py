"""bench/transfer.py's results: each fine-tuning's cached result, and figures over several seeded splits."""

import json
import math
import os

import numpy as np

RESULT_FILE = "transfer_result.json"


def reused(out, key):
    """The result a killed or earlier run left in `out` for these settings, else None.

    The settings must be the same, except that a result with a probe also
    serves a run without one (the fine-tuning is the same).
    """
    path = os.path.join(out, RESULT_FILE)
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        saved = json.load(f)
    settings = dict(saved["settings"])
    if settings.get("probe") and not key.get("probe"):
        settings["probe"] = key.get("probe")
    return saved["result"] if settings == key else None


def mean_over_splits(results, row, task, field="test"):
    """Mean of one field over the splits run, or None where no split has it."""
    values = [r[field] for r in results[row].get(task, []) if r.get(field) is not None]
    return float(np.mean(values)) if values else None


def paired_differences(results, row, task):
    """Test accuracy of `row` minus random init's, per split, in points; and the mean's standard error."""
    diffs = 100 * (np.array([r["test"] for r in results[row][task]])
                   - np.array([r["test"] for r in results["random init"][task]]))
    return diffs, np.std(diffs, ddof=1) / math.sqrt(len(diffs))
