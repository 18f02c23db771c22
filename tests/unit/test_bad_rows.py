"""Bad data rows: each one counted and named (file, row, line, reason), the rest used; a clear error before
training when a domain is left with nothing (rlvr.data.dataset, rlvr.pipeline.build.load_domain_data)."""

from __future__ import annotations

import json

import pytest

from rlvr.config.base import ConfigError
from rlvr.config.load import config_from_dict
from rlvr.data.dataset import BadRow, RowError, RowFormat, load_prompts, summarize_bad_rows
from rlvr.pipeline.build import load_domain_data
from tests.unit.test_dataset import DOMAINS, tiny_tokenizer, user  # noqa: F401 (a fixture)


def line(row: dict) -> bytes:
    return json.dumps(row).encode() + b"\n"


GOOD = {"domain": "arithmetic", "messages": user("what is 1 + 2 ?"), "ground_truth": "3"}


def messy_file(tmp_path) -> str:
    path = tmp_path / "messy.jsonl"
    path.write_bytes(b"".join([
        line({**GOOD, "id": "a"}),                                           # row 0, line 1: good
        line({"domain": "arithmetic", "messages": user("what is 1 ?"), "id": "b"}),  # row 1, line 2: no answer
        b'{"domain": "arithmetic", "prompt": "caf\xe9", "ground_truth": "1"}\n',   # row 2, line 3: Latin-1 byte
        b"\n",                                                               # line 4: blank, no row
        line({"tag": "poetry", "messages": user("what is 2 ?"), "ground_truth": "2", "id": "c"}),  # row 3, line 5
        b'{"domain": "arithmetic", "prompt": \n',                            # row 4, line 6: cut-off JSON
        line({**GOOD, "id": "a"}),                                           # row 5, line 7: duplicate id
        line({**GOOD, "id": "d", "domain": "word_problems"}),                # row 6, line 8: good
    ]))
    return str(path)


def test_bad_rows_are_skipped_counted_and_named_by_file_row_and_line(tmp_path):
    path = messy_file(tmp_path)
    bad: list[BadRow] = []
    prompts = load_prompts([path], RowFormat(tag_to_domain={"math": "arithmetic"}), DOMAINS, "train", bad=bad)
    assert [p.uid for p in prompts] == ["train:a", "train:d"]
    assert sorted((b.source, b.line, b.reason) for b in bad) == [
        (f"{path}:1", 2, "missing_answer"),
        (f"{path}:2", 3, "invalid_utf8"),
        (f"{path}:3", 5, "unmapped_tag"),
        (f"{path}:4", 6, "invalid_json"),
        (f"{path}:5", 7, "duplicate_uid"),
    ]
    assert all(b.message.startswith(b.source + ": ") for b in bad)
    summary = summarize_bad_rows(bad)
    assert summary.startswith("5 rows skipped: ") and f"{path}:2 line 3" in summary


def test_without_a_bad_list_the_first_bad_row_is_an_error_naming_its_line(tmp_path):
    path = messy_file(tmp_path)
    with pytest.raises(RowError, match=rf"^{path}:2: line 3 is not valid UTF-8") as err:
        load_prompts([path], RowFormat(), DOMAINS, "train")
    assert err.value.reason == "invalid_utf8"


def config(tmp_path, files: list[str], **data) -> object:
    return config_from_dict({
        "data": {"train_files": files, "max_prompt_length": 14, **data},
        "domains": {d: {"reward": {"worker": "rlvr.workers.rewards.math_rule.MathRuleRewardWorker"}}
                    for d in sorted(DOMAINS)},
        "rollout": {"domain_interleave_probs": {"arithmetic": 0.5, "word_problems": 0.5}},
    })


def test_load_domain_data_reports_every_bad_row_and_keeps_the_rest(tmp_path, tiny_tokenizer):
    path = messy_file(tmp_path)
    long = tmp_path / "long.jsonl"
    long.write_bytes(line({**GOOD, "id": "e", "messages": user("what is 1 + 2 + 1 + 2 ?")})  # 16 tokens
                     + line({**GOOD, "id": "f", "domain": "word_problems"}))
    data = load_domain_data(config(tmp_path, [path, str(long)]), tiny_tokenizer, report_dir=tmp_path)
    assert [p.uid for p in data["arithmetic"].train] == ["train:a"]
    assert [p.uid for p in data["word_problems"].train] == ["train:d", "train:f"]
    report = [json.loads(x) for x in (tmp_path / "bad_rows.jsonl").read_text().splitlines()]
    assert sorted(r["reason"] for r in report) == ["duplicate_uid", "invalid_json", "invalid_utf8", "missing_answer",
                                                   "too_long", "unmapped_tag"]
    too_long = [r for r in report if r["reason"] == "too_long"]
    assert [(r["source"], r["line"]) for r in too_long] == [(f"{long}:0", 1)]


def test_a_domain_left_with_no_usable_rows_is_an_error_before_training(tmp_path, tiny_tokenizer):
    path = tmp_path / "all_bad.jsonl"
    path.write_bytes(line({"domain": "arithmetic", "messages": user("what is 1 ?")})
                     + line({**GOOD, "domain": "word_problems"}))
    with pytest.raises(ConfigError, match=r"data\.train_files: no usable training rows route to domain 'arithmetic' "
                                          r"\(its probability .* is 0\.5\).*1 rows skipped: missing_answer 1"):
        load_domain_data(config(tmp_path, [str(path)]), tiny_tokenizer)


def test_bad_rows_error_mode_stops_at_the_first_one(tmp_path, tiny_tokenizer):
    with pytest.raises(ConfigError, match=r"data\.train_files: .*messy\.jsonl:2: line 3 is not valid UTF-8.*"
                                          r"data\.bad_rows: error stops at the first bad row"):
        load_domain_data(config(tmp_path, [messy_file(tmp_path)], bad_rows="error"), tiny_tokenizer)
