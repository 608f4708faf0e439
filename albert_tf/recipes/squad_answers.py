"""SQuAD post-processing (n-best span search, v2 no-answer) and the official scoring."""

import collections
import dataclasses
import math
import re
import string

import numpy as np

from input_pipeline.finetuning.squad import MAX_ANSWER_TOKENS


@dataclasses.dataclass(frozen=True)
class SpanPrediction:
    """The answer chosen for one question.

    Attributes:
        text: the answer, an exact substring of the raw context ("" = no answer).
        score: start + end logit of the best non-null span (-inf if none).
        null_score_diff: null score minus `score` (v2; compare with the threshold).
        nbest: list of (text, score), best first, at most `n_best_size`.
    """

    text: str
    score: float
    null_score_diff: float
    nbest: list


def squad_predictions(examples, features, start_logits, end_logits, n_best_size=20,
                      max_answer_length=MAX_ANSWER_TOKENS, version_2=False, null_score_diff_threshold=0.0):
    """Picks each question's answer from the logits of all its windows.

    A span is valid when both ends are context pieces of one window, the end
    is not before the start, it has at most `max_answer_length` pieces, and
    the window is the start piece's max-context window. Only the
    `n_best_size` best starts and ends of each window are paired, as in the
    original. For SQuAD v2.0 the null score is the lowest [CLS] score
    (start_logits[0] + end_logits[0]) over the question's windows; the
    question gets "" when null - best span > `null_score_diff_threshold`.

    Args:
        examples: list of `SquadExample`.
        features: list of `SquadFeature`, `example_index` pointing into `examples`.
        start_logits, end_logits: one float array (seq,) per feature (any
            padding past the feature's length is ignored).

    Returns:
        dict qas_id -> `SpanPrediction`.
    """
    by_example = collections.defaultdict(list)
    for index, feature in enumerate(features):
        by_example[feature.example_index].append(index)
    predictions = {}
    for example_index, example in enumerate(examples):
        candidates, null_score = [], np.inf
        for index in by_example.get(example_index, []):
            feature = features[index]
            length = len(feature.inputs["token_ids"])
            start, end = np.asarray(start_logits[index])[:length], np.asarray(end_logits[index])[:length]
            null_score = min(null_score, float(start[0] + end[0]))
            for s in _top(start, n_best_size):
                if s not in feature.char_spans or not feature.max_context.get(s, False):
                    continue
                for e in _top(end, n_best_size):
                    if e not in feature.char_spans or e < s or e - s + 1 > max_answer_length:
                        continue
                    begin_char, end_char = feature.char_spans[s][0], feature.char_spans[e][1]
                    candidates.append((float(start[s] + end[e]), example.context[begin_char:end_char]))
        nbest, seen = [], set()
        for score, text in sorted(candidates, key=lambda c: -c[0]):
            if text not in seen:
                seen.add(text)
                nbest.append((text, score))
            if len(nbest) == n_best_size:
                break
        best_text, best_score = nbest[0] if nbest else ("", -np.inf)
        diff = null_score - best_score if version_2 else -np.inf
        if version_2 and (not nbest or diff > null_score_diff_threshold):
            best_text = ""
        predictions[example.qas_id] = SpanPrediction(best_text, best_score, float(diff), nbest)
    return predictions


def best_null_threshold(examples, spans):
    """The no-answer threshold that maximizes F1, as SQuAD v2.0's evaluation finds it.

    Questions are answered in order of rising `null_score_diff`; the threshold
    is the diff at which the running F1 total peaks (below every diff, all
    questions get "").

    Args:
        examples: list of `SquadExample` with gold answers.
        spans: dict qas_id -> `SpanPrediction` made with an infinite threshold
            (so `text` is the best non-null span).

    Returns:
        (best F1 in percent, threshold).
    """
    total = sum(1.0 for e in examples if e.is_impossible)
    # Below every finite diff: all questions get "" (an infinite diff, no span at all, always does).
    finite = [d for d in (spans[e.qas_id].null_score_diff for e in examples) if math.isfinite(d)]
    best, threshold = total, min(finite) - 1.0 if finite else 0.0
    for example in sorted(examples, key=lambda e: spans[e.qas_id].null_score_diff):
        span = spans[example.qas_id]
        if example.is_impossible:
            total -= 1.0 if span.text else 0.0
        else:
            total += max(f1_score(span.text, t) for t, _ in example.answers)
        if total > best:
            best, threshold = total, span.null_score_diff
    return 100.0 * best / len(examples), float(threshold)


def _top(logits, n):
    return [int(i) for i in np.argsort(-logits, kind="stable")[:n]]


# ---- the official evaluation script (v1.1 and v2.0 agree on these) ----------------------

def normalize_answer(text):
    """Lowercase, drop punctuation and the articles a/an/the, collapse whitespace."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def exact_match(prediction, truth):
    return float(normalize_answer(prediction) == normalize_answer(truth))


def f1_score(prediction, truth):
    """Token-overlap F1; two empty answers score 1 (v2.0), one empty scores 0."""
    pred_tokens, truth_tokens = normalize_answer(prediction).split(), normalize_answer(truth).split()
    if not pred_tokens or not truth_tokens:
        return float(pred_tokens == truth_tokens)
    common = collections.Counter(pred_tokens) & collections.Counter(truth_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(truth_tokens)
    return 2 * precision * recall / (precision + recall)


def squad_scores(examples, answers):
    """Official EM and F1 (in percent), max over each question's gold answers.

    Args:
        examples: list of `SquadExample`; an impossible one's only gold answer is "".
        answers: dict qas_id -> predicted text (a missing id scores 0).

    Returns:
        dict with exact_match, f1, and for sets with unanswerable questions
        also has_answer_f1 / no_answer_f1 and their counts.
    """
    if not examples:
        raise ValueError("No examples to score.")
    em, f1, has = [], [], []
    for example in examples:
        truths = [""] if example.is_impossible else [t for t, _ in example.answers]
        prediction = answers.get(example.qas_id)
        if prediction is None:
            em.append(0.0)
            f1.append(0.0)
        else:
            em.append(max(exact_match(prediction, t) for t in truths))
            f1.append(max(f1_score(prediction, t) for t in truths))
        has.append(not example.is_impossible)
    em, f1, has = np.array(em), np.array(f1), np.array(has)
    scores = {"exact_match": 100.0 * em.mean(), "f1": 100.0 * f1.mean()}
    if not has.all():
        scores.update(
            has_answer_f1=100.0 * f1[has].mean() if has.any() else 0.0,
            no_answer_f1=100.0 * f1[~has].mean(),
            has_answer_total=int(has.sum()),
            no_answer_total=int((~has).sum()),
        )
    return {k: float(v) if isinstance(v, (float, np.floating)) else v for k, v in scores.items()}
