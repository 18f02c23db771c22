"""parse_verdict: reading YES/NO, scores and JSON out of judge replies; garbage is None, never a guess."""

import pytest

from rlvr.workers.rewards.judge_parsing import parse_verdict

YES, NO, INVALID = (1.0, True), (0.0, False), (None, None)


def verdict(text, mode="yes_no", max_score=10):
    reward, correct, why = parse_verdict(text, mode, max_score)
    assert isinstance(why, str) and why
    return reward, correct


@pytest.mark.parametrize("text, expected", [
    ("YES", YES),
    ("no", NO),
    ("Yes.", YES),
    ("  NO!\n", NO),
    ("**YES**", YES),
    ("'yes'", YES),
    ("Yes, the response is correct.", YES),
    ("The response is wrong. No.", NO),
    ("Yes. Yes, it matches the reference.", YES),  # several, all the same
    ("YES</answer>", YES),
    # The last verdict word wins when it concludes the reply (the judge changed its mind).
    ("No, wait. YES.", YES),
    ("Yes... actually no", NO),
    # A marked verdict wins over bare words, and the last marked one over earlier ones.
    ("Verdict: NO", NO),
    ("No doubt about it. Verdict: YES. Nothing else to add, no.", YES),
    ("Verdict: NO\nOn reflection...\nVerdict: YES", YES),
    ("**Final answer:** no", NO),
    ("Correct = yes", YES),
    # Parroted instructions are not verdicts.
    ("YES or NO", INVALID),
    ("Please answer yes/no.", INVALID),
    ("Answer YES or NO: no", NO),
    ("Reply with YES or NO. YES", YES),
    # "yes" / "no" inside other words never count.
    ("eyes", INVALID),
    ("The eyes have it, nobody knows, yesterday is gone", INVALID),
    ("I know the answer; it is notable", INVALID),
    ("yes_no", INVALID),
    ("no-one would say that", INVALID),
    # Both, with neither concluding: ambiguous.
    ("No it is not 5; yes it is 6 though, sometimes", INVALID),
    ("Yes, there is no mistake here.", INVALID),
    # Neither.
    ("The response is correct.", INVALID),
    ("", INVALID),
    ("   \n", INVALID),
    ("🙂🙂🙂", INVALID),
    ("\x00\x01 garbage \ufffd", INVALID),
    # Reasoning is dropped first.
    ("<think>yes? no? maybe yes</think>NO", NO),
    ("<think>it is surely yes", INVALID),  # ran out inside its reasoning: no verdict
    ("YES <think>but then again no", YES),  # text before an unclosed <think> is kept
])
def test_yes_no(text, expected):
    assert verdict(text) == expected


@pytest.mark.parametrize("text, reward", [
    ("Score: 7/10", 0.7),
    ("score = 7", 0.7),
    ("7/10", 0.7),
    ("Rating: 8 out of 10", 0.8),
    ("I would give it 8 out of 10.", 0.8),
    ("The score is 3", 0.3),
    ("**Score:** 10/10", 1.0),
    ("Score: 0", 0.0),
    ("Grade: 7.5", 0.75),
    ('{"score": 9}', 0.9),  # a JSON-looking reply still has a labelled score
    ("7", 0.7),
    (" 4. ", 0.4),
    ("Step 1 gets 3/10... Overall score: 6/10", 0.6),  # labelled beats unlabelled
    ("Score: 2/10, no, Score: 9/10", 0.9),  # the last labelled one
])
def test_score(text, reward):
    got, correct = verdict(text, "score")
    assert got == pytest.approx(reward) and correct is None  # the worker applies its threshold


@pytest.mark.parametrize("text", [
    "Score: 11",  # out of range: None, not clipped
    "Score: 11/10",
    "score: -1",
    "Rating: 12 out of 10",
    "4/5",  # another scale
    "It is correct.",
    "The date was 3/4/2024",
    "",
    "Score: high",
    "seven",
])
def test_score_invalid(text):
    assert verdict(text, "score") == INVALID


def test_score_other_max():
    assert verdict("Score: 4/5", "score", max_score=5) == (0.8, None)
    assert verdict("Score: 3", "score", max_score=5) == (0.6, None)
    assert verdict("Score: 7/10", "score", max_score=5) == INVALID


@pytest.mark.parametrize("text, expected", [
    ('{"verdict": "yes"}', YES),
    ('{"verdict": "NO", "reason": "off by one"}', NO),
    ('{"correct": true}', YES),
    ('{"correct": false}', NO),
    ('{"Verdict": "Correct"}', YES),
    ('{"verdict": "incorrect"}', NO),
    ('{"correct": 1}', YES),
    ('Here you go:\n```json\n{"verdict": "yes"}\n```\nHope that helps', YES),
    ('```\n{"correct": false}\n```', NO),
    ('{"score": 8}', (0.8, None)),
    ('{"score": "7/10"}', (0.7, None)),
    ('{"score": 2.5}', (0.25, None)),
    ('{"score": 8, "verdict": "no"}', (0.8, False)),  # score for the reward, verdict for correct
    ('noise {not json} {"other": 1} {"score": 6}', (0.6, None)),  # the first object with a known key
    ('{"details": {"score": 4}}', (0.4, None)),
    ('<think>{"verdict": "no"}</think>{"verdict": "yes"}', YES),
])
def test_json(text, expected):
    assert verdict(text, "json") == expected


@pytest.mark.parametrize("text", [
    "YES",  # no JSON at all
    "garbage",
    '{"verdict": "maybe"}',
    '{"score": true}',
    '{"score": 11}',
    '{"score": "7/5"}',
    '{"score": null}',
    '{"foo": 1}',
    '{"verdict": "yes"',  # truncated
    "```json\n{'verdict': 'yes'}\n```",  # not JSON (single quotes)
    "[1, 2, 3]",
])
def test_json_invalid(text):
    assert verdict(text, "json") == INVALID


def test_non_text_and_bad_arguments():
    assert parse_verdict(None, "yes_no")[:2] == INVALID
    with pytest.raises(ValueError):
        parse_verdict("YES", "stars")
    with pytest.raises(ValueError):
        parse_verdict("YES", "score", max_score=0)


def test_long_garbage_is_fast():
    import time

    text = ("{" * 2000) + "no yes " * 5000 + "0/0 " * 2000
    started = time.perf_counter()
    for mode in ("yes_no", "score", "json"):
        parse_verdict(text, mode)
    assert time.perf_counter() - started < 2.0
