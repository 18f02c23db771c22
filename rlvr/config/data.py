"""The `model` and `data` sections: which model, which files, and how rows are read."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlvr.config.base import Strict


class ModelConfig(Strict):
    path: str = "smollm2-135m-instruct"  # the embedded default, or any local HF model directory
    cache_dir: str | None = None


class DataConfig(Strict):
    train_files: list[str]
    val_files: list[str] = []
    prompt_key: str = "prompt"
    messages_key: str = "messages"
    answer_key: str = "ground_truth"
    domain_key: str = "domain"
    tag_key: str = "tag"
    tag_to_domain: dict[str, str] = {}
    id_key: str = "id"
    system_prompt: str | None = None
    max_prompt_length: int = Field(256, ge=1)  # longer prompts are dropped, counted and logged
    # A row that cannot be used (no answer, a tag or domain that routes nowhere, invalid UTF-8 or JSON, a duplicate
    # id). skip: counted, named in <run_dir>/bad_rows.jsonl and the log, and left out (an error only if a domain
    # is left with no training rows); error: the first one stops the run before it starts.
    bad_rows: Literal["skip", "error"] = "skip"
