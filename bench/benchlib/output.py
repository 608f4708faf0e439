"""Where a benchmark's results go: its Markdown table, and its figures."""

import os


def emit_table(text, path=None):
    """Prints `text` and, with a `path`, also writes it there (creating the folder)."""
    print(text)
    if path:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w") as f:
            f.write(text + "\n")


def pyplot():
    """matplotlib.pyplot drawing to files only (the Agg backend: no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    return plt


def save_figure(figure, path):
    """Lays `figure` out, writes it to `path` at 100 dpi (creating the folder) and closes it."""
    figure.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    figure.savefig(path, dpi=100)
    pyplot().close(figure)
