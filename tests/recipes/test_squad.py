import json

import numpy as np
import pytest

from albert_tf.recipes.squad_answers import (
    SpanPrediction, best_null_threshold, exact_match, f1_score, normalize_answer, squad_predictions, squad_scores,
)
from data_fixtures import small_tokenizer
from input_pipeline.finetuning import SquadExample, SquadFeaturizer, read_squad

CONTEXT = (
    "The film opened in Paris (1990). Critics praised the acting, the music and the long "
    "final scene, which many called the best of the decade. Audiences were slower to warm "
    "to it, but by the end of the year the film had found its public in every city where "
    "it was shown, and the director began work on a sequel set in Berlin."
)


def example(question, answer=None, impossible=False, qas_id="q"):
    answers = () if answer is None else ((answer, CONTEXT.index(answer)),)
    return SquadExample(qas_id, question, CONTEXT, answers, impossible, "test")


def window_text(feature, s, e):
    return CONTEXT[feature.char_spans[s][0] : feature.char_spans[e][1]]


def write_squad(tmp_path, qas):
    path = tmp_path / "squad.json"
    path.write_text(json.dumps({"version": "v2.0", "data": [{"title": "t", "paragraphs": [
        {"context": CONTEXT, "qas": qas}]}]}))
    return str(path)


def test_reader_checks_answers_against_the_context(tmp_path):
    good = {"id": "a", "question": "Where?", "answers": [{"text": "Paris", "answer_start": CONTEXT.index("Paris")}]}
    none = {"id": "b", "question": "Who?", "answers": [], "is_impossible": True}
    bad = {"id": "c", "question": "When?", "answers": [{"text": "1990", "answer_start": 3}]}
    result = read_squad(write_squad(tmp_path, [good, none]))
    assert [e.is_impossible for e in result.examples] == [False, True]
    path = write_squad(tmp_path, [good, bad])
    with pytest.raises(ValueError, match=r"squad.json: .*qas\[1\] \(id 'c'\).*'1990' is not found.*occurs at"):
        read_squad(path)
    skipped = read_squad(path, on_error="skip")
    assert len(skipped.examples) == 1 and len(skipped.skipped) == 1


def test_answer_inside_a_word_maps_to_its_own_pieces():
    tokenizer = small_tokenizer()
    feature, = SquadFeaturizer(tokenizer, max_seq_length=128).featurize([example("When?", "1990")])
    assert window_text(feature, feature.start_position, feature.end_position) == "1990"
    # Every context piece maps back to raw characters that tokenize to it.
    ids, spans = SquadFeaturizer(tokenizer).context_pieces(CONTEXT)
    assert ids == tokenizer.encode(CONTEXT)


def test_answer_across_a_document_stride_boundary():
    tokenizer = small_tokenizer()
    answer = "the best of the decade"
    # Size the windows so that the first one ends two pieces into the answer.
    ids, spans = SquadFeaturizer(tokenizer).context_pieces(CONTEXT)
    answer_start = next(i for i, (_, end) in enumerate(spans) if end > CONTEXT.index(answer))
    question_length = len(tokenizer.encode("Which?"))
    featurizer = SquadFeaturizer(
        tokenizer, max_seq_length=question_length + 3 + answer_start + 2, doc_stride=4,
        max_query_length=8)
    features = featurizer.featurize([example("Which?", answer)])
    assert len(features) > 2
    # The answer straddles the end of the first window: that window has no label ...
    first = features[0]
    last_context = max(first.char_spans)
    assert first.char_spans[last_context][1] < CONTEXT.index(answer) + len(answer)
    assert first.char_spans[last_context][1] > CONTEXT.index(answer)
    assert (first.start_position, first.end_position) == (0, 0)
    # ... and a later window holds all of it.
    labelled = [f for f in features if f.start_position]
    assert labelled and all(window_text(f, f.start_position, f.end_position) == answer for f in labelled)

    # Post-processing: high logits on the answer in every window holding it, and
    # an even higher span in a window that is not its max-context window.
    starts = [np.zeros(len(f.inputs["token_ids"])) for f in features]
    ends = [np.zeros(len(f.inputs["token_ids"])) for f in features]
    for f, s, e in zip(features, starts, ends):
        if f.start_position:
            s[f.start_position], e[f.end_position] = 5.0, 5.0
        not_max = [p for p, is_max in f.max_context.items() if not is_max]
        if not_max:
            s[not_max[0]], e[not_max[0]] = 9.0, 9.0
    prediction = squad_predictions([example("Which?", answer)], features, starts, ends)["q"]
    assert prediction.text == answer
    assert prediction.nbest[0] == (answer, 10.0)


def test_max_answer_length_and_unanswerable_questions():
    tokenizer = small_tokenizer()
    ex = example("Where?", impossible=True)
    feature, = SquadFeaturizer(tokenizer, max_seq_length=128).featurize([ex])
    assert (feature.start_position, feature.end_position) == (0, 0)
    n = len(feature.inputs["token_ids"])
    start, end = np.zeros(n), np.zeros(n)
    first_ctx = min(feature.char_spans)
    start[first_ctx], end[first_ctx + 1] = 3.0, 3.0  # a two-piece span scoring 6
    start[0], end[0] = 4.0, 4.0  # null score 8
    v2 = squad_predictions([ex], [feature], [start], [end], version_2=True)["q"]
    assert v2.text == "" and v2.null_score_diff == pytest.approx(2.0)
    kept = squad_predictions([ex], [feature], [start], [end], version_2=True, null_score_diff_threshold=2.5)
    assert kept["q"].text == window_text(feature, first_ctx, first_ctx + 1)
    v1 = squad_predictions([ex], [feature], [start], [end], max_answer_length=1)["q"]
    assert v1.text != window_text(feature, first_ctx, first_ctx + 1)  # too long for 1 piece
    assert squad_scores([ex], {"q": ""}) == {
        "exact_match": 100.0, "f1": 100.0, "has_answer_f1": 0.0, "no_answer_f1": 100.0,
        "has_answer_total": 0, "no_answer_total": 1}


def test_official_normalisation_and_scores():
    assert normalize_answer("  The  Cat's, hat! ") == "cats hat"
    assert exact_match("the Paris", "Paris.") == 1.0
    assert f1_score("in Paris France", "Paris") == pytest.approx(2 * (1 / 3) * 1 / (1 / 3 + 1))
    assert f1_score("", "") == 1.0 and f1_score("x", "") == 0.0
    ex = SquadExample("q", "?", "a b c", (("Paris", 0), ("the city of Paris", 0)), False, "t")
    assert squad_scores([ex], {"q": "city of paris"})["exact_match"] == 100.0
    assert squad_scores([ex], {})["f1"] == 0.0


def test_best_null_threshold_is_the_f1_best_cut_of_the_sorted_diffs():
    questions = [example("Where?", "Paris", qas_id="a"), example("Who sang?", impossible=True, qas_id="b"),
                 example("Where later?", "Berlin", qas_id="c")]
    spans = {"a": SpanPrediction("Paris", 5.0, -2.0, []), "b": SpanPrediction("the music", 1.0, 1.0, []),
             "c": SpanPrediction("acting", 4.0, 3.0, [])}
    # Answering a only (threshold -2) scores 2 of 3; also answering b (wrong) or c (wrong) scores less.
    assert best_null_threshold(questions, spans) == (pytest.approx(200 / 3), -2.0)
    no_spans = {k: SpanPrediction("", -np.inf, np.inf, []) for k in spans}
    assert best_null_threshold(questions, no_spans) == (pytest.approx(100 / 3), 0.0)
