"""Fine-tuning examples to model inputs: `[CLS] A [SEP] (B [SEP])`, refused or cut when too long.

The packing itself is `input_pipeline.finetuning.text_inputs`', the one that
`predict`, `AlbertPreprocessor` and the exports use; this adds what training
data needs on top: an error naming the example's file and line, or a count
of the examples it cut.
"""

from albert_tf.utils.config_base import check_positive_int
from albert_tf.utils.errors import UserError
from input_pipeline.finetuning.text_inputs import pack_ids, pack_window_ids
from input_pipeline.packing import check_truncate_from


class TextEncoder:
    """Encodes `TextExample`s, truncating or refusing texts that do not fit.

    Args:
        tokenizer: an `AlbertTokenizer`.
        max_seq_length: longest input, special pieces included.
        truncate: False raises on an example longer than `max_seq_length`,
            naming its file and line; True truncates it (longest text first)
            and counts it in `num_truncated`.
        truncate_from: which pieces truncation drops: "end" (BERT's),
            "start" or "middle" (`input_pipeline.packing.keep_pieces`).
        max_windows: `encode_windows` reads a single text longer than
            `max_seq_length` as up to this many windows
            (`input_pipeline.packing.split_windows`); truncation then applies
            beyond `max_windows * (max_seq_length - 2)` pieces.
    """

    def __init__(self, tokenizer, max_seq_length, truncate=False, truncate_from="end", max_windows=1):
        check_truncate_from(truncate_from)
        if max_seq_length < 3:
            raise UserError(f"`max_seq_length` must be at least 3. Received: max_seq_length={max_seq_length}")
        check_positive_int("max_windows", max_windows)
        self.tokenizer = tokenizer
        self.max_seq_length = max_seq_length
        self.truncate = truncate
        self.truncate_from = truncate_from
        self.max_windows = max_windows
        self.num_truncated = 0
        self.num_windowed = 0

    def encode(self, example):
        """Returns: dict of int32 arrays (seq,), seq <= max_seq_length."""
        ids_a = self.tokenizer.encode(example.text_a)
        ids_b = None if example.text_b is None else self.tokenizer.encode(example.text_b)
        specials = 2 if ids_b is None else 3
        length = len(ids_a) + len(ids_b or []) + specials
        if length > self.max_seq_length:
            if not self.truncate:
                raise UserError(
                    f"{example.source}: {length} pieces, longer than max_seq_length="
                    f"{self.max_seq_length}. Raise --max-seq-length (the model allows "
                    "up to max_position_embeddings), pass --truncate, or (classification and regression "
                    "of single texts) read it as several windows with --max-windows."
                )
            self.num_truncated += 1
        return pack_ids(ids_a, ids_b, self.max_seq_length, self.truncate_from)

    def encode_all(self, examples):
        return [self.encode(example) for example in examples]

    def encode_windows(self, example):
        """One text as its windows: a list of dicts of int32 arrays (seq,), `[CLS] window [SEP]` each.

        A text that fits `max_seq_length` is one window (as `encode`); a
        longer one is split into near-equal windows, at most `max_windows`;
        beyond that it is cut (`truncate`) or refused. Pairs are not split.
        """
        if example.text_b is not None:
            if self.max_windows > 1:
                raise UserError(f"{example.source}: a text pair; long-text windows (max_windows="
                                 f"{self.max_windows}) read single texts only. Use max_windows=1 for pairs.")
            return [self.encode(example)]
        ids = self.tokenizer.encode(example.text_a)
        window = self.max_seq_length - 2
        if len(ids) > window * self.max_windows:
            if not self.truncate:
                raise UserError(
                    f"{example.source}: {len(ids)} pieces, more than max_windows={self.max_windows} windows of "
                    f"max_seq_length={self.max_seq_length} hold ({window * self.max_windows}). Raise "
                    "--max-windows or pass --truncate."
                )
            self.num_truncated += 1
        windows = pack_window_ids(ids, self.max_seq_length, self.max_windows, self.truncate_from)
        self.num_windowed += len(windows) > 1
        return windows
