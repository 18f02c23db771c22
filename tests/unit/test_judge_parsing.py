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


# -- yes_no_logprobs: the verdict from the first token's probabilities ------------------------------------

from types import SimpleNamespace  # noqa: E402
from math import log  # noqa: E402

from rlvr.workers.rewards.judge_parsing import parse_logprob_verdict  # noqa: E402


def position(chosen, *top):
    """One `logprobs.content` entry: the chosen (token, p) and the top tokens as (token, p) pairs."""
    def tok(token, p):
        return {"token": token, "logprob": log(p)}
    return {**tok(*chosen), "top_logprobs": [tok(*t) for t in top]}


def logprob_verdict(content, **kwargs):
    reward, correct, why, p_yes = parse_logprob_verdict(content, **kwargs)
    assert isinstance(why, str) and why
    return reward, correct, p_yes


@pytest.mark.parametrize("content, expected, p_yes", [
    # YES and NO masses add up over case and space variants; the larger one wins.
    ([position(("Yes", 0.5), ("Yes", 0.5), (" yes", 0.1), ("No", 0.3), (" NO", 0.05))], YES, 0.6 / 0.95),
    ([position(("No", 0.4), ("No", 0.4), ("YES", 0.35), ("no", 0.1))], NO, 0.35 / 0.85),
    # The chosen token decides nothing by itself: "The" was chosen, but YES outweighs NO among the rest.
    ([position(("The", 0.6), ("The", 0.6), ("yes", 0.2), ("no", 0.1))], YES, 2 / 3),
    # Only one of the two among the top k: that one, with p_yes 1 or 0.
    ([position(("Yes", 0.9), ("Yes", 0.9), ("The", 0.05))], YES, 1.0),
    ([position(("It", 0.5), ("It", 0.5), (" No", 0.01))], NO, 0.0),
    # Punctuation and markdown glued to the word still count; other words that start alike do not.
    ([position(("Yes.", 0.3), ("Yes.", 0.3), ("**No", 0.2), ("Not", 0.4), ("Nope", 0.05))], YES, 0.6),
    ([position(("yes", 0.2), ("Yesterday", 0.5), ("yes", 0.2), ("NO!", 0.25))], NO, 0.2 / 0.45),
    # Without top_logprobs the chosen token still counts.
    ([{"token": " No", "logprob": log(0.7)}], NO, 0.0),
    # Leading filler ("**", whitespace) is skipped when a later token was returned.
    ([position(("**", 0.6), ("**", 0.6), ("Yes", 0.1)), position(("No", 0.8), ("No", 0.8), ("Yes", 0.1))],
     NO, 0.1 / 0.9),
    # ...but decides when it is all there is.
    ([position(("**", 0.6), ("**", 0.6), ("Yes", 0.1), ("no", 0.05))], YES, 0.1 / 0.15),
    # A word token decides at once: what follows it is not read.
    ([position(("Yes", 0.9), ("Yes", 0.9)), position(("No", 0.9), ("No", 0.9))], YES, 1.0),
    # The EOS token (a reply with empty text) carries the alternatives it beat.
    ([position(("<|im_end|>", 0.5), ("<|im_end|>", 0.5), ("No", 0.3), ("Yes", 0.1))], NO, 0.25),
])
def test_logprob_verdicts(content, expected, p_yes):
    reward, correct, got = logprob_verdict(content)
    assert (reward, correct) == expected and got == pytest.approx(p_yes)


def test_logprob_verdict_reports_the_masses():
    _, _, why, _ = parse_logprob_verdict([position(("Yes", 0.6), ("Yes", 0.6), ("No", 0.2))])
    assert "YES" in why and "P(yes)=0.6" in why and "P(no)=0.2" in why


def test_logprob_verdict_threshold():
    content = [position(("Yes", 0.6), ("Yes", 0.6), ("No", 0.3))]  # p_yes 2/3
    assert logprob_verdict(content, threshold=0.5)[:2] == YES
    assert logprob_verdict(content, threshold=0.7)[:2] == NO


def test_logprob_verdict_reads_openai_client_objects():
    entry = SimpleNamespace(token="No", logprob=log(0.6), top_logprobs=[
        SimpleNamespace(token="No", logprob=log(0.6)), SimpleNamespace(token="Yes", logprob=log(0.2))])
    reward, correct, p_yes = logprob_verdict([entry])
    assert (reward, correct) == NO and p_yes == pytest.approx(0.25)


@pytest.mark.parametrize("content", [
    None,
    [],
    "YES",  # text is not logprobs
    [position(("The", 0.6), ("The", 0.6), ("A", 0.1), ("Yesterday", 0.01), ("Not", 0.01))],  # neither word
    [position(("Correct", 0.9))],
    [{"token": None, "logprob": 0.0}],
    [{"token": "Yes", "logprob": "high"}],  # not a number: ignored, nothing left
    [{"token": "Yes", "logprob": float("nan")}],
    [{"token": "Yes", "logprob": float("-inf")}],  # probability 0
    [position(("\n", 0.5)), position(("  ", 0.5))],  # only filler
])
def test_logprob_verdict_invalid(content):
    assert logprob_verdict(content) == (None, None, None)


def test_yes_no_logprobs_mode_reads_text_as_yes_no():
    """A server that ignored `logprobs` sent text: the worker reads it as a yes_no reply."""
    assert verdict("Yes.", "yes_no_logprobs") == YES
    assert verdict("The response is correct.", "yes_no_logprobs") == INVALID
