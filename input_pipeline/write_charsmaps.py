"""Writes the charsmaps `input_pipeline.spiece_normalizer` ships (`SHIPPED_CHARSMAPS`).

Run once per SentencePiece or Python version whose charsmap keys are new
(tests/pipeline/test_spiece_normalizer.py says when):

    python -m input_pipeline.write_charsmaps
"""

import dataclasses
import os

from input_pipeline import spiece_normalizer
from input_pipeline.text_normalization import Preprocessing
from input_pipeline.tokenizer import AlbertTokenizer


def main(directory=spiece_normalizer.SHIPPED_CHARSMAPS):
    """Writes into `directory` the charsmaps, computed, of the models `AlbertTokenizer.train` makes with
    the English presets, cased and uncased, under this Python and SentencePiece; prints their names.

    Returns:
        list of the names written.
    """
    shipped, written = spiece_normalizer._charsmap, []

    def computed(normalizer_spec, preprocessing):  # the spec of the model just trained, before its rewrite
        name = spiece_normalizer._charsmap_key(normalizer_spec, preprocessing)
        charsmap = spiece_normalizer._compute_charsmap(normalizer_spec, preprocessing)
        with open(os.path.join(directory, name), "wb") as f:
            f.write(charsmap)
        written.append(name)
        print(name, preprocessing)
        return charsmap

    os.makedirs(directory, exist_ok=True)
    english = Preprocessing.for_language("en")
    spiece_normalizer._charsmap = computed
    try:
        for preprocessing in (english, dataclasses.replace(english, strip_accents=False, lower_case=False)):
            AlbertTokenizer.train(["a tiny corpus", "of a few words"] * 20, vocab_size=22, preprocessing=preprocessing)
    finally:
        spiece_normalizer._charsmap = shipped
    return written


if __name__ == "__main__":
    main()
