"""Matmul FLOPs of an ALBERT pass, to turn a measured time into a fraction of the machine's ceiling."""


def albert_flops(hidden, layers, intermediate, embedding, vocab, batch, seq, predictions=0, train=False):
    """Matmul FLOPs of one ALBERT forward pass (x3 with `train`: the backward pass is two matmuls per matmul).

    Counts the E -> H projection, per layer the QKV/output projections, the
    attention scores and context, and the FFN; the pooler; and, with
    `predictions`, the MLM head (H -> E transform and the E x V decoder).
    """
    tokens = batch * seq
    per_layer = 2 * tokens * (4 * hidden * hidden + 2 * hidden * intermediate) + 4 * batch * seq * seq * hidden
    forward = 2 * tokens * embedding * hidden + layers * per_layer + 2 * batch * hidden * hidden
    forward += 2 * batch * predictions * (hidden * embedding + embedding * vocab)
    return forward * (3 if train else 1)
