"""docs/config.md is generated from the config models; this fails when it is out of date."""

from __future__ import annotations

from pydantic import BaseModel, Field

from rlvr.config.docs import COMMAND, DOC_PATH, render, sections, source_comments
from rlvr.config.root import Config


def test_docs_config_md_is_up_to_date():
    assert DOC_PATH.read_text() == render(), f"docs/config.md is out of date: run `{COMMAND}` and commit it"


def test_every_key_of_every_section_is_documented():
    documented = {row[0].strip("`") for _, _, rows in sections() for row in rows}
    assert {f"run.{k}" for k in Config.model_fields["run"].default.model_fields} <= documented
    assert "domains.<name>.reward.timeout_s" in documented and "generation.vllm.kv_cache_gib" in documented
    assert all(row[4] for _, _, rows in sections() for row in rows), "a key without a meaning"


class _Example(BaseModel):
    plain: int = 1
    beside: int = Field(2, ge=0)  # the comment beside it
    # the comment above it,
    # on two lines
    above: str = "x"
    long: tuple[int, int] = (  # a field over several lines
        1, 2)


def test_meanings_come_from_the_comments_beside_or_above_a_key():
    assert source_comments(_Example) == {"beside": "the comment beside it",
                                         "above": "the comment above it, on two lines",
                                         "long": "a field over several lines"}
    (_, _, rows), = sections(_Example, "ex.")
    assert rows[1] == ["`ex.beside`", "`int`", "`2`", ">= 0", "the comment beside it"]
