"""`DistillConfig`: how a student learns from its teacher, and its size (no TensorFlow: the CLI reads it first)."""

import dataclasses

from albert_tf.utils.config_base import JsonConfig, check_choice, check_fraction, check_positive, doc

# Student sizes relative to the teacher: (layers, width) as fractions of the teacher's L and of its H, heads
# and intermediate size. The embedding size E stays the teacher's (it is a small part of the cost per token).
STUDENT_SIZES = {
    "quarter": (0.25, 1.0),  # a quarter of the layers, as wide: starts from the teacher's weights
    "half": (0.5, 1.0),
    "narrow": (0.5, 0.5),  # half the layers, half the width: starts from the teacher's embeddings
    "tiny": (0.25, 0.5),
}
# tiny: of the sizes measured on the demo's L 4, H 128 (bench/results/distill.md), the fastest, and it keeps the
# teacher's accuracy: with unlabelled text 98.6% and 100.4% of the teacher's median dev accuracy on two tasks, at
# about a twelfth of its TFLite float32 time. As the SavedModel export it is 3.4x to 4x faster there (a busy
# machine; `export --xla` 3.3x), short of 5x: a call's per-op costs (a LayerNorm about 0.1 ms whatever its size,
# transposes, softmax) shrink little with the width. At ALBERT-base's shape (seq 128), where those costs are a
# small part of a call, tiny's SavedModel export ran about 7x faster than the teacher's.
# From the teacher's embeddings it beat a fresh start on rt (70.2 against 68.0, the seeds' ranges apart) and tied
# on source: "auto" starts there where E allows it (narrow, L 2, is the exception measured: see the results).
DEFAULT_STUDENT_SIZE = "tiny"
STUDENT_INITS = ("teacher", "embeddings", "fresh")


@dataclasses.dataclass(frozen=True)
class DistillConfig(JsonConfig):
    """How a student learns from its teacher, and its size.

    Each field's meaning is its `help` below (also the command line's help).
    """

    temperature: float = doc(2.0, "T: the teacher's and the student's logits are divided by T before the softmax "
                             "the soft loss compares (classification); the loss is scaled by T^2.")
    label_weight: float = doc(0.5, "Weight of the label loss; the teacher's soft loss gets 1 - this (0: the "
                              "teacher alone; 1: the labels alone). keras.distillation.Distiller's default.")
    student: str = doc(DEFAULT_STUDENT_SIZE, "Student size relative to the teacher: tiny (1/4 of the layers and "
                       "1/2 the width), quarter (1/4 of the layers), half (1/2) or narrow (1/2 the layers and 1/2 "
                       "the width).",
                       choices=tuple(STUDENT_SIZES))
    student_layers: int | None = doc(None, "Student layers (default: by --student).")
    student_hidden_size: int | None = doc(None, "Student hidden size H (default: by --student).")
    student_embedding_size: int | None = doc(None, "Student embedding size E (default: the teacher's).")
    student_heads: int | None = doc(None, "Student attention heads (default: by --student).")
    student_intermediate_size: int | None = doc(None, "Student feed-forward width (default: by --student).")
    student_init: str = doc("auto", "teacher: start from the teacher's weights (its shared block run over fewer "
                            "layers, its head; needs the teacher's widths); embeddings: the teacher's embeddings "
                            "(word, position, token type and their LayerNorm; needs the teacher's E), the rest "
                            "fresh; fresh: random weights; auto: teacher where the widths allow it, else "
                            "embeddings where E does.", choices=("auto", *STUDENT_INITS))

    def __post_init__(self):
        check_positive("temperature", self.temperature)
        check_fraction("label_weight", self.label_weight)
        check_choice("student", self.student, tuple(STUDENT_SIZES))
        check_choice("student_init", self.student_init, ("auto", *STUDENT_INITS))
