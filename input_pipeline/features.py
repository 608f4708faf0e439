"""Feature names shared by the input pipeline, the models and the exports.

Every example the input pipeline produces, and every model input, uses these
keys. Defining them once keeps the producer and the consumers in agreement.
"""

TOKEN_IDS = "token_ids"  # int32 [batch, seq]: SentencePiece ids, [CLS] A [SEP] B [SEP] pad...
SEGMENT_IDS = "segment_ids"  # int32 [batch, seq]: 0 up to and including the first [SEP], then 1
PADDING_MASK = "padding_mask"  # int32 [batch, seq]: 1 for real tokens, 0 for padding
MASK_POSITIONS = "mask_positions"  # int32 [batch, P]: indices of masked tokens, 0-padded
MASK_IDS = "mask_ids"  # int32 [batch, P]: original ids at mask_positions, 0-padded
MASK_WEIGHTS = "mask_weights"  # float32 [batch, P]: 1.0 for real predictions, 0.0 for padding
SENTENCE_ORDER_LABEL = "sentence_order_label"  # int32 [batch]: 1 = segments swapped, 0 = in order

BACKBONE_INPUTS = (TOKEN_IDS, SEGMENT_IDS, PADDING_MASK)
PRETRAINING_INPUTS = BACKBONE_INPUTS + (MASK_POSITIONS,)
PRETRAINING_LABELS = (MASK_IDS, MASK_WEIGHTS, SENTENCE_ORDER_LABEL)

# Label of pieces that carry no tag (padding, [CLS]/[SEP], and the pieces of a
# word after its first); the tagger's loss and accuracy skip them. Same value as HF.
IGNORE_LABEL = -100


def split_pretraining_example(example):
    """Splits one flat pretraining example dict into `(inputs, labels)` for `fit`."""
    inputs = {name: example[name] for name in PRETRAINING_INPUTS}
    labels = {name: example[name] for name in PRETRAINING_LABELS}
    return inputs, labels
