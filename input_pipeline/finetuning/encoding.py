"""Sentences and sentence pairs to model inputs: `[CLS] A [SEP] (B [SEP])` (see `input_pipeline.packing`)."""

from input_pipeline.packing import check_truncate_from, pack, truncate_pair


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
    """

    def __init__(self, tokenizer, max_seq_length, truncate=False, truncate_from="end"):
        check_truncate_from(truncate_from)
        if max_seq_length < 3:
            raise ValueError(f"`max_seq_length` must be at least 3. Received: max_seq_length={max_seq_length}")
        self.tokenizer = tokenizer
        self.max_seq_length = max_seq_length
        self.truncate = truncate
        self.truncate_from = truncate_from
        self.num_truncated = 0

    def encode(self, example):
        """Returns: dict of int32 arrays (seq,), seq <= max_seq_length."""
        ids_a = self.tokenizer.encode(example.text_a)
        ids_b = None if example.text_b is None else self.tokenizer.encode(example.text_b)
        specials = 2 if ids_b is None else 3
        length = len(ids_a) + len(ids_b or []) + specials
        if length > self.max_seq_length:
            if not self.truncate:
                raise ValueError(
                    f"{example.source}: {length} pieces, longer than max_seq_length="
                    f"{self.max_seq_length}. Raise --max-seq-length (the model allows "
                    "up to max_position_embeddings) or pass --truncate."
                )
            self.num_truncated += 1
            ids_a, truncated_b = truncate_pair(
                ids_a, ids_b, self.max_seq_length - specials, self.truncate_from
            )
            ids_b = None if ids_b is None else truncated_b
        return pack(ids_a, ids_b)

    def encode_all(self, examples):
        return [self.encode(example) for example in examples]
