"""`DistillConfig`: how a student learns from its teacher, and its size (no TensorFlow: the CLI reads it first)."""

import dataclasses

from albert_tf.utils.config_base import JsonConfig, check_choice, check_fraction, check_positive, doc

# Student sizes relative to the teacher: (layers, width) as fractions of the teacher's L and of its H, heads
# and intermediate size. The embedding size E stays the teacher's (it is a small part of the cost per token).
STUDENT_SIZES = {
    "quarter": (0.25, 1.0),  # a quarter of the layers, as wide: starts from the teacher's weights
    "half": (0.5, 1.0),
    "narrow": (0.5, 0.5),  # half the layers, half the width: starts fresh
    "tiny": (0.25, 0.5),
}
# A quarter of the demo's L 4 kept its teacher's median dev accuracy on two tasks with unlabelled text (rt 72.0
# against 71.2, source 97.4 against 97.4; bench/results/distill.md). From the teacher's weights it beat a fresh
# start on rt (72.0 against 68.4) and was 0.4 points behind on source, inside the seeds' spread: "auto" starts
# from the teacher wherever the widths allow it.
DEFAULT_STUDENT_SIZE = "quarter"
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
    student: str = doc(DEFAULT_STUDENT_SIZE, "Student size relative to the teacher: quarter (1/4 of the layers), "
                       "half (1/2), narrow (1/2 the layers and 1/2 the width) or tiny (1/4 and 1/2).",
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
