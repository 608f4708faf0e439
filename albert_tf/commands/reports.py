"""What the data commands print about a corpus and the sentence pairs it makes, warnings on stderr.

`create-data`, `pretrain` and `train-tokenizer` share these lines; they sit
below the commands so that no command imports another.
"""

import sys


def report_pairs(pair_stats, task, command, where=""):
    """Prints what the data makes of the pair task, and one warning line when pairs cannot form."""
    print(f"Sentence pairs{where}: {pair_stats.describe()}")
    if not pair_stats.pairs_cannot_form(task):
        return
    single = f"{100 * pair_stats.single_sentence_share:.0f}% of the {pair_stats.num_documents} documents"
    if pair_stats.single_sentence_share >= 0.5:
        cause = f"{single} have one sentence, which pairs with another document (label 1)"
    else:
        cause = (f"only {single} have one sentence, but most sequences hold one sentence, which pairs with another "
                 "document (label 1): sentences longer than a sequence, as when long texts are read as sentences")
    print(
        f"albert-tf {command}: warning: {100 * pair_stats.label_1_share:.0f}% of the examples have "
        f"sentence_order_label 1, so the {task} task learns little: {cause}. For one text per line, pass "
        "--format lines --split-sentences (or write one sentence per line, a blank line between documents).",
        file=sys.stderr,
    )


def report_corpus_notes(corpus, command):
    """Prints the corpus's notes on how its files were read (`Corpus.notes`), one warning line each."""
    for note in corpus.notes:
        print(f"albert-tf {command}: warning: {note}", file=sys.stderr)
