"""rlvr.data.dataset: loading, routing, validation errors, tokenization; and the shipped data/math files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr.data.dataset import (
    DataError,
    RowFormat,
    load_prompts,
    load_rows,
    rows_to_prompts,
    split_by_domain,
    tokenize_prompts,
)

REPO = Path(__file__).resolve().parents[2]
DOMAINS = {"arithmetic", "word_problems"}


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def user(content: str) -> list[dict]:
    return [{"role": "user", "content": content}]


@pytest.fixture
def tiny_tokenizer():
    """A whitespace WordLevel tokenizer with a one-line chat template: one token per word or punctuation run."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["[UNK]", "<", ">", "user", "assistant", "system", "what", "is", "1", "+", "2", "?", "be", "brief"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    template = ("{% for m in messages %}<{{ m['role'] }}> {{ m['content'] }} {% endfor %}"
                "{% if add_generation_prompt %}<assistant>{% endif %}")
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", chat_template=template)


# ------------------------------------------------------------------------------------------------ loading


def test_load_jsonl_and_route_by_domain_column(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [
        {"id": "a", "domain": "arithmetic", "messages": user("1+1?"), "ground_truth": "2", "tag": "add_1digit"},
        {"id": "b", "domain": "word_problems", "messages": user("Tom..."), "ground_truth": "7", "difficulty": "easy"},
    ])
    prompts = load_prompts([path], RowFormat(), DOMAINS, "train")
    assert [p.domain for p in prompts] == ["arithmetic", "word_problems"]
    assert [p.uid for p in prompts] == ["train:a", "train:b"]
    assert prompts[0].source == f"{path}:0" and prompts[1].source == f"{path}:1"
    assert prompts[0].messages == user("1+1?") and prompts[0].text is None
    assert prompts[0].ground_truth == "2"
    # meta: the remaining columns (absent ones come back as None through datasets' schema unification)
    assert prompts[0].meta["tag"] == "add_1digit"
    assert prompts[1].meta["difficulty"] == "easy"
    assert not {"id", "domain", "messages", "ground_truth"} & set(prompts[0].meta)
    by_domain = split_by_domain(prompts)
    assert list(by_domain) == ["arithmetic", "word_problems"]
    assert [p.uid for p in by_domain["word_problems"]] == ["train:b"]


def test_route_by_tag_map_and_text_prompt_from_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = str(tmp_path / "d.parquet")
    pq.write_table(pa.table({
        "prompt": ["What is 1 + 2?", "Sum 3 and 4."],
        "answer": ["3", "7"],
        "tag": ["add_1digit", "word_add"],
    }), path)
    fmt = RowFormat(answer_key="answer", tag_to_domain={"add_1digit": "arithmetic", "word_add": "word_problems"})
    prompts = load_prompts([path], fmt, DOMAINS, "val")
    assert [p.domain for p in prompts] == ["arithmetic", "word_problems"]
    assert [p.uid for p in prompts] == ["val:0", "val:1"]  # no id column: the row index
    assert prompts[0].text == "What is 1 + 2?" and prompts[0].messages is None
    assert prompts[1].ground_truth == "7"
    assert prompts[1].meta == {"tag": "word_add"}


def test_domain_column_wins_over_tag(tmp_path):
    rows = [{"domain": "word_problems", "tag": "add_1digit", "messages": user("x"), "ground_truth": "1"}]
    fmt = RowFormat(tag_to_domain={"add_1digit": "arithmetic"})
    assert rows_to_prompts(rows, "f.jsonl", fmt, DOMAINS, "train")[0].domain == "word_problems"


def test_unknown_domain_names_file_row_domain_and_known_domains(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [
        {"domain": "arithmetic", "messages": user("a"), "ground_truth": "1"},
        {"domain": "arithmetic", "messages": user("b"), "ground_truth": "1"},
        {"domain": "code", "messages": user("c"), "ground_truth": "1"},
    ])
    with pytest.raises(DataError) as e:
        load_prompts([path], RowFormat(), DOMAINS, "train")
    msg = str(e.value)
    assert msg.startswith(f"{path}:2: ")
    assert "row 2 routes to domain 'code' which has no reward worker" in msg
    assert "known domains: arithmetic, word_problems" in msg


def test_unknown_tag_and_unroutable_row():
    fmt = RowFormat(tag_to_domain={"add_1digit": "arithmetic"})
    with pytest.raises(DataError, match=r"^f\.jsonl:0: .*tag 'mystery' is not in tag_to_domain"):
        rows_to_prompts([{"tag": "mystery", "prompt": "x", "ground_truth": "1"}], "f.jsonl", fmt, DOMAINS, "t")
    with pytest.raises(DataError, match=r"^f\.jsonl:1: row 1 has neither a 'domain' column nor a 'tag'"):
        rows_to_prompts([{"tag": "add_1digit", "prompt": "x", "ground_truth": "1"},
                         {"prompt": "y", "ground_truth": "1"}], "f.jsonl", fmt, DOMAINS, "t")


def test_missing_answer_names_the_key(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [
        {"domain": "arithmetic", "messages": user("a"), "ground_truth": "1"},
        {"domain": "arithmetic", "messages": user("b")},
    ])
    with pytest.raises(DataError, match=rf"^{path}:1: row 1 has no answer column 'ground_truth'"):
        load_prompts([path], RowFormat(), DOMAINS, "train")


def test_missing_prompt_and_malformed_messages():
    with pytest.raises(DataError, match=r"^f\.jsonl:0: no prompt: neither 'messages' nor 'prompt'"):
        rows_to_prompts([{"domain": "arithmetic", "ground_truth": "1"}], "f.jsonl", RowFormat(), DOMAINS, "t")
    bad = [{"domain": "arithmetic", "messages": [{"role": "user"}], "ground_truth": "1"}]
    with pytest.raises(DataError, match=r"^f\.jsonl:0: 'messages'\[0\] must be a \{role, content\} dict"):
        rows_to_prompts(bad, "f.jsonl", RowFormat(), DOMAINS, "t")
    with pytest.raises(DataError, match=r"'messages' must be a list"):
        rows_to_prompts([{"domain": "arithmetic", "messages": "hi", "ground_truth": "1"}], "f.jsonl",
                        RowFormat(), DOMAINS, "t")


def test_bad_extension_and_missing_file(tmp_path):
    csv = tmp_path / "d.csv"
    csv.write_text("a,b\n1,2\n")
    with pytest.raises(DataError, match=r"d\.csv: unsupported file extension '\.csv'"):
        load_rows(csv)
    missing = str(tmp_path / "nope.jsonl")
    with pytest.raises(DataError, match=rf"^{missing}: no such file"):
        load_prompts([missing], RowFormat(), DOMAINS, "train")


def test_unreadable_file_is_a_data_error(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text('{"domain": "arithmetic", \n')
    with pytest.raises(DataError, match=r"broken\.jsonl:0: line 1 is not valid JSON"):
        load_rows(path)
    other = tmp_path / "broken.json"
    other.write_text('{"domain": "arithmetic", \n')
    with pytest.raises(DataError, match=r"broken\.json: could not read as json"):
        load_rows(other)


def test_mixed_type_answer_column_is_an_error_not_a_silent_reparse(tmp_path):
    # datasets stores a mixed-type column as JSON and would hand back "007" as 7: refuse instead
    path = write_jsonl(tmp_path / "d.jsonl", [
        {"domain": "arithmetic", "prompt": "a", "ground_truth": 3},
        {"domain": "arithmetic", "prompt": "b", "ground_truth": "007"},
    ])
    with pytest.raises(DataError, match=r"d\.jsonl: column 'ground_truth' mixes value types"):
        load_prompts([path], RowFormat(), DOMAINS, "train")
    ints = write_jsonl(tmp_path / "ints.jsonl", [{"domain": "arithmetic", "prompt": "a", "ground_truth": 7}])
    assert load_prompts([ints], RowFormat(), DOMAINS, "train")[0].ground_truth == 7  # one type: kept as is


def test_system_prompt_prepended():
    rows = [
        {"domain": "arithmetic", "messages": user("1+2?"), "ground_truth": "3"},
        {"domain": "arithmetic", "messages": [{"role": "system", "content": "own"}, *user("2+2?")],
         "ground_truth": "4"},
        {"domain": "arithmetic", "prompt": "3+3=", "ground_truth": "6"},
    ]
    prompts = rows_to_prompts(rows, "f.jsonl", RowFormat(system_prompt="Be brief."), DOMAINS, "train")
    assert prompts[0].messages == [{"role": "system", "content": "Be brief."}, *user("1+2?")]
    assert prompts[1].messages[0] == {"role": "system", "content": "own"}  # a row's own system message wins
    assert len(prompts[1].messages) == 2
    assert prompts[2].text == "Be brief.\n\n3+3="
    assert rows[0]["messages"] == user("1+2?")  # the input rows are not modified


def test_uids_unique_across_files_and_duplicates_rejected(tmp_path):
    row = {"domain": "arithmetic", "messages": user("a"), "ground_truth": "1"}
    a = write_jsonl(tmp_path / "a.jsonl", [row, row])
    b = write_jsonl(tmp_path / "b.jsonl", [row])
    assert [p.uid for p in load_prompts([a, b], RowFormat(), DOMAINS, "train")] == ["train:0", "train:1", "train:2"]
    dup = write_jsonl(tmp_path / "dup.jsonl", [{**row, "id": "x"}, {**row, "id": "x"}])
    with pytest.raises(DataError, match=rf"^{dup}:1: duplicate uid 'train:x' \(also {dup}:0\)"):
        load_prompts([dup], RowFormat(), DOMAINS, "train")


# ------------------------------------------------------------------------------------------- tokenization


def test_tokenize_fills_ids_and_drops_overlong(tiny_tokenizer):
    rows = [
        {"domain": "arithmetic", "messages": user("what is 1 + 2 ?"), "ground_truth": "3"},
        {"domain": "arithmetic", "messages": user("what is 1 + 2 + 2 + 2 + 2 + 2 ?"), "ground_truth": "11"},
        {"domain": "arithmetic", "prompt": "what is 2 + 2 ?", "ground_truth": "4"},
    ]
    prompts = rows_to_prompts(rows, "f.jsonl", RowFormat(), DOMAINS, "train")
    kept, dropped = tokenize_prompts(prompts, tiny_tokenizer, max_prompt_length=12)

    assert dropped == ["f.jsonl:1"]
    assert [p.uid for p in kept] == ["train:0", "train:2"]
    v = tiny_tokenizer.get_vocab()
    expected_chat = [v[w] for w in "< user > what is 1 + 2 ? < assistant >".split()]
    assert kept[0].prompt_ids == expected_chat  # a flat list of ints, generation prompt included
    assert all(type(t) is int for t in kept[0].prompt_ids)
    assert kept[1].prompt_ids == [v[w] for w in "what is 2 + 2 ?".split()]
    assert prompts[0].prompt_ids == []  # inputs untouched

    # exactly at the limit is kept; no limit keeps everything
    kept, dropped = tokenize_prompts(prompts[:1], tiny_tokenizer, max_prompt_length=len(expected_chat))
    assert len(kept) == 1 and dropped == []
    kept, dropped = tokenize_prompts(prompts, tiny_tokenizer, max_prompt_length=None)
    assert len(kept) == 3 and dropped == []


def test_tokenize_with_system_prompt(tiny_tokenizer):
    rows = [{"domain": "arithmetic", "messages": user("what is 1 + 2 ?"), "ground_truth": "3"}]
    prompts = rows_to_prompts(rows, "f.jsonl", RowFormat(system_prompt="be brief"), DOMAINS, "train")
    (p,), _ = tokenize_prompts(prompts, tiny_tokenizer, max_prompt_length=100)
    v = tiny_tokenizer.get_vocab()
    assert p.prompt_ids[:5] == [v[w] for w in "< system > be brief".split()]


def test_batched_tokenization_equals_one_prompt_at_a_time(default_model_dir):
    """The default model's tokenizer over every shipped train and validation row (chat prompts, a system prompt added
    to some) and text prompts: the batched path gives each prompt exactly the ids one call per prompt gives."""
    from transformers import AutoTokenizer

    from rlvr.data.dataset import _encode

    tokenizer = AutoTokenizer.from_pretrained(default_model_dir)
    files = sorted((REPO / "data").glob("*/*.jsonl"))
    prompts = [p for f in files for p in load_prompts([f], RowFormat(), DOMAINS | {"code", "judge"}, "train")]
    texts = [{"domain": "arithmetic", "prompt": t, "ground_truth": "4"} for t in ("2 + 2 = ?", "x")]
    prompts += rows_to_prompts(texts, "f.jsonl", RowFormat(), DOMAINS, "train")
    prompts += rows_to_prompts([{"domain": "arithmetic", "messages": user("hi"), "ground_truth": "1"}], "g.jsonl",
                               RowFormat(system_prompt="be brief"), DOMAINS, "train")
    kept, dropped = tokenize_prompts(prompts, tokenizer, max_prompt_length=None)
    assert dropped == [] and len(kept) == len(prompts) > 3000
    assert [p.prompt_ids for p in kept] == [_encode(p, tokenizer) for p in prompts]


def test_a_prompt_the_template_cannot_render_is_named(tiny_tokenizer):
    rows = [{"domain": "arithmetic", "messages": user("what is 1 ?"), "ground_truth": "1"}] * 2
    prompts = rows_to_prompts(rows, "f.jsonl", RowFormat(), DOMAINS, "train")
    tiny_tokenizer.chat_template = None
    with pytest.raises(DataError, match=r"^f\.jsonl:0: could not apply the chat template"):
        tokenize_prompts(prompts, tiny_tokenizer, max_prompt_length=None)


# ------------------------------------------------------------------------------------------ shipped data


def test_shipped_math_data():
    files = {s: REPO / "data" / "math" / f"{s}.jsonl" for s in ("train", "val")}
    prompts = {s: load_prompts([str(f)], RowFormat(), DOMAINS, s) for s, f in files.items()}

    assert len(prompts["train"]) == 3000 and len(prompts["val"]) == 128
    for split, ps in prompts.items():
        by_domain = split_by_domain(ps)
        assert set(by_domain) == DOMAINS, split
        questions = [p.messages[-1]["content"] for p in ps]
        assert len(questions) == len(set(questions)), f"duplicate question in {split}"
        for p in ps:
            assert p.messages[-1]["content"].endswith(" Give the final answer as a number in \\boxed{}.")
            assert isinstance(p.ground_truth, str) and str(int(p.ground_truth)) == p.ground_truth, p.source
            assert p.meta["difficulty"] in ("easy", "medium")
            assert p.meta["tag"]
    assert len(split_by_domain(prompts["val"])["arithmetic"]) == 64
    assert len(split_by_domain(prompts["val"])["word_problems"]) == 64

    train_q = {p.messages[-1]["content"] for p in prompts["train"]}
    val_q = {p.messages[-1]["content"] for p in prompts["val"]}
    assert not train_q & val_q


def test_generator_is_deterministic(tmp_path):
    import subprocess
    import sys

    script = REPO / "scripts" / "make_math_data.py"
    subprocess.run([sys.executable, str(script), "--out-dir", str(tmp_path)], check=True, capture_output=True)
    for name in ("train.jsonl", "val.jsonl"):
        assert (tmp_path / name).read_bytes() == (REPO / "data" / "math" / name).read_bytes(), name
