"""The distillation loss is the formula, and the student's size and start are what the settings say."""

import numpy as np
import pytest

from albert_tf.config import AlbertConfig
from albert_tf.recipes.distill import distillation_loss, resolve_init, start_student, student_config
from albert_tf.recipes.distill_config import DistillConfig
from albert_tf.utils.errors import UserError


def _softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _cross_entropy(labels, logits, weight):
    """The classifier's label loss: cross-entropy, mean over the whole batch with `weight` (0 drops a row)."""
    return np.mean(-np.log(_softmax(logits)[np.arange(len(labels)), labels]) * weight)


@pytest.mark.parametrize("temperature, label_weight", [(1.0, 0.5), (3.0, 0.3), (2.0, 0.0)])
def test_the_loss_is_weighted_label_loss_plus_t_squared_kl_of_the_softened_outputs(temperature, label_weight):
    rng = np.random.default_rng(0)
    teacher, student = rng.normal(size=(6, 3)) * 3, rng.normal(size=(6, 3)) * 3
    labels = rng.integers(0, 3, 6)
    labelled = np.array([1, 1, 0, 1, 0, 0], "float32")  # three rows of unlabelled text

    got = distillation_loss(labels, teacher.astype("float32"), student.astype("float32"), labelled, temperature,
                            label_weight, lambda y, w: _cross_entropy(labels, student, np.asarray(w)),
                            regression=False)

    p, q = _softmax(teacher / temperature), _softmax(student / temperature)
    kl = np.mean(np.sum(p * np.log(p / q), -1))  # KL(teacher || student), mean over every row
    hard = -np.log(_softmax(student)[np.arange(6), labels])[labelled == 1].mean()  # mean over the labelled rows
    np.testing.assert_allclose(float(got), label_weight * hard + (1 - label_weight) * temperature ** 2 * kl, rtol=1e-5)


def test_a_regression_student_learns_the_teacher_score_by_squared_error():
    teacher, student = np.array([[0.5], [2.0], [-1.0]], "float32"), np.array([1.0, 1.0, 1.0], "float32")
    labels, labelled = np.array([0.0, 3.0, 0.0], "float32"), np.array([0, 1, 0], "float32")
    got = distillation_loss(labels, teacher, student, labelled, 4.0, 0.25,
                            lambda y, w: np.mean((y - student) ** 2 * np.asarray(w)), regression=True)
    # T does not apply to scores: 0.25 * (3 - 1)^2 on the one labelled row + 0.75 * mean squared error to the teacher.
    np.testing.assert_allclose(float(got), 0.25 * 4.0 + 0.75 * np.mean([0.25, 1.0, 4.0]), rtol=1e-6)


TEACHER = AlbertConfig(vocab_size=100, embedding_size=16, hidden_size=32, num_hidden_layers=8, num_attention_heads=4,
                       intermediate_size=64)


def test_named_sizes_scale_the_teacher_and_flags_override_them():
    assert student_config(TEACHER, DistillConfig()).num_hidden_layers == 2
    narrow = student_config(TEACHER, DistillConfig(student="narrow"))
    assert (narrow.num_hidden_layers, narrow.hidden_size, narrow.num_attention_heads, narrow.intermediate_size,
            narrow.embedding_size) == (4, 16, 2, 32, 16)
    assert student_config(TEACHER, DistillConfig(student_layers=3, student_hidden_size=24,
                                                 student_heads=3)).hidden_size == 24


def test_a_student_as_large_as_the_teacher_is_refused():
    with pytest.raises(UserError, match="--student must be smaller than the teacher"):
        student_config(TEACHER, DistillConfig(student="quarter", student_layers=8))


def test_the_teacher_start_needs_the_teacher_widths():
    quarter = student_config(TEACHER, DistillConfig(student="quarter"))
    narrow = student_config(TEACHER, DistillConfig(student="narrow"))
    assert resolve_init(DistillConfig(), TEACHER, quarter) == "teacher"
    assert resolve_init(DistillConfig(), TEACHER, narrow) == "embeddings"
    with pytest.raises(UserError, match="--student-init teacher needs the teacher's widths"):
        resolve_init(DistillConfig(student_init="teacher"), TEACHER, narrow)
    other_e = student_config(TEACHER, DistillConfig(student="narrow", student_embedding_size=8))
    assert resolve_init(DistillConfig(), TEACHER, other_e) == "fresh"
    with pytest.raises(UserError, match="--student-init embeddings needs the teacher's embedding size E"):
        resolve_init(DistillConfig(student_init="embeddings"), TEACHER, other_e)


def test_a_narrower_student_starts_from_the_teacher_embeddings_and_the_teacher_is_unchanged():
    from albert_tf import AlbertBackbone

    teacher = AlbertBackbone(TEACHER)
    before = [w.copy() for w in teacher.get_weights()]
    narrow = student_config(TEACHER, DistillConfig(student="narrow"))
    student = start_student(teacher, narrow, "embeddings")
    assert student.config.hidden_size == 16
    for mine, theirs in zip(student.embeddings.get_weights(), teacher.embeddings.get_weights(), strict=True):
        np.testing.assert_array_equal(mine, theirs)
    fresh = start_student(teacher, narrow, "fresh")
    assert not np.array_equal(fresh.embeddings.get_weights()[0], teacher.embeddings.get_weights()[0])
    for now, then in zip(teacher.get_weights(), before, strict=True):
        np.testing.assert_array_equal(now, then)
