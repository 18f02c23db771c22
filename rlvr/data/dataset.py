"""Dataset loading: files (jsonl / json / parquet, read with HF `datasets`) -> routed `Prompt`s -> token ids.

The flow, each step a plain function:

    rows = load_rows(path)                                            # list[dict], one per row
    prompts = rows_to_prompts(rows, path, fmt, known_domains, split)  # routed, validated Prompts
    prompts, dropped = tokenize_prompts(prompts, tokenizer, max_prompt_length)
    by_domain = split_by_domain(prompts)                              # one list per domain scheduler

(`load_prompts` runs the first two over several files.) Every problem with a row raises `DataError` with the
file and the 0-based row index in front (`data/math/train.jsonl:17: ...`); a row whose domain has no reward
worker is an error, never a silent default (DESIGN.md, DynamicSamplingScheduler).

Or, given a `bad` list, a row with a problem is skipped and recorded there as a `BadRow` (file, row, line,
reason, message): a missing answer or prompt, a domain or tag that routes nowhere, invalid UTF-8 or JSON in a
.jsonl line, a duplicate uid. The caller counts them, names them, and stops only when nothing usable is left
(rlvr/pipeline/build.py `load_domain_data`, `data.bad_rows`).
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr.data.types import Prompt

FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}


class DataError(ValueError):
    """A data file or row that cannot be used; the message names the file and, for a row, its index."""


class RowError(DataError):
    """One row that cannot be used; `reason` is a short name for counting (missing_answer, unmapped_tag, ...)."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


@dataclass
class BadRow:
    """A skipped row: `source` is `file:row` (0-based row index, as in every DataError), `line` its 1-based line
    in a .jsonl file (None for other formats)."""

    source: str
    reason: str
    message: str
    line: int | None = None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def summarize_bad_rows(bad: list[BadRow], examples: int = 3) -> str:
    """'12 rows skipped: missing_answer 10 (data/x.jsonl:3 line 4, ...), invalid_utf8 2 (...)'."""
    by_reason: dict[str, list[BadRow]] = {}
    for b in bad:
        by_reason.setdefault(b.reason, []).append(b)
    parts = []
    for reason, rows in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
        named = ", ".join(b.source + (f" line {b.line}" if b.line else "") for b in rows[:examples])
        parts.append(f"{reason} {len(rows)} ({named}{', ...' if len(rows) > examples else ''})")
    return f"{len(bad)} rows skipped: " + "; ".join(parts)


@dataclass
class RowFormat:
    """Which columns of a row hold what.

    The prompt is `messages_key` (a list of {role, content} chat messages) or, failing that, `prompt_key`
    (a string: a raw text prompt; or a list of messages, as in verl-style files). The domain is `domain_key`,
    or failing that `tag_to_domain[row[tag_key]]`. `id_key` (optional) names the row in its uid.
    `system_prompt`, when set, is prepended as a system message to chat prompts that have none of their own
    (a row's own system message wins), and in front of raw text prompts followed by a blank line.
    """

    prompt_key: str = "prompt"
    messages_key: str = "messages"
    answer_key: str = "ground_truth"
    domain_key: str = "domain"
    tag_key: str = "tag"
    tag_to_domain: dict[str, str] = field(default_factory=dict)
    id_key: str = "id"
    system_prompt: str | None = None


def load_rows(path: str | Path, exact_columns: Iterable[str] = (),
              bad: list[BadRow] | None = None) -> list[dict[str, Any] | None]:
    """All rows of one file as dicts; the format comes from the extension (.jsonl, .json, .parquet).

    A .jsonl line that is not valid UTF-8 or not a JSON object is an error naming its line; with a `bad` list it
    is recorded there instead and its row comes back as None (row indices stay those of the file's lines).

    Columns missing from some rows come back as None in those rows (datasets unifies the schema). A column
    whose type differs across rows (strings in some rows, numbers in others) is stored by datasets as JSON, and
    its strings are re-parsed on the way out ("007" -> 7, "1" -> 1): for the columns named in `exact_columns`
    (the answer, say) that is a DataError rather than a silent change of value.
    """
    path = str(path)
    fmt = FORMATS.get(Path(path).suffix.lower())
    if fmt is None:
        raise DataError(f"{path}: unsupported file extension {Path(path).suffix!r}; "
                        f"expected one of {', '.join(FORMATS)}")
    if not Path(path).is_file():
        raise DataError(f"{path}: no such file")
    import datasets  # heavy import, only when data is actually read

    cleaned, skipped = _checked_jsonl(path, bad) if Path(path).suffix.lower() == ".jsonl" else (None, set())
    try:
        if cleaned is None:
            ds = datasets.load_dataset(fmt, data_files=path, split="train")
        else:  # the file with its bad lines blanked out, read from a temporary copy
            with tempfile.TemporaryDirectory(prefix="rlvr-data-") as tmp:
                copy = Path(tmp) / Path(path).name
                copy.write_bytes(cleaned)
                ds = datasets.load_dataset(fmt, data_files=str(copy), split="train", keep_in_memory=True)
    except Exception as e:  # datasets raises many types (ArrowInvalid, DatasetGenerationError, ...)
        cause = e.__cause__ or e
        raise DataError(f"{path}: could not read as {fmt}: {type(cause).__name__}: {cause}") from e
    for col in exact_columns:
        if isinstance(ds.features.get(col), datasets.Json):
            raise DataError(f"{path}: column {col!r} mixes value types across rows (e.g. strings and numbers); "
                            f"datasets would re-parse its strings as JSON (\"007\" -> 7), so give every row "
                            f"the same type (quote all the answers)")
    rows: list[dict[str, Any] | None] = ds.to_list()
    for i in skipped:
        rows[i] = None
    return rows


def _checked_jsonl(path: str, bad: list[BadRow] | None) -> tuple[bytes | None, set[int]]:
    """Checks every line of a .jsonl file (UTF-8, a JSON object). All good: (None, {}). Else, with `bad`: the
    bad lines recorded, and the file's bytes with `{}` in their place (so datasets still reads one row per line)
    with their row indices; without `bad`: a RowError naming the first bad line."""
    raw = Path(path).read_bytes().split(b"\n")
    problems: list[tuple[int, int, str, str]] = []  # (row, line, reason, message)
    row = 0
    for n, line in enumerate(raw, start=1):
        if not line.strip():
            continue  # datasets skips blank lines: they are no row
        try:
            value = json.loads(line.decode("utf-8"))
            if not isinstance(value, dict):
                problems.append((row, n, "not_an_object", f"line {n} is a JSON {type(value).__name__}, not an object"))
        except UnicodeDecodeError as e:
            problems.append((row, n, "invalid_utf8", f"line {n} is not valid UTF-8 ({e.reason} at byte {e.start})"))
        except ValueError as e:
            problems.append((row, n, "invalid_json", f"line {n} is not valid JSON: {e}"))
        row += 1
    if not problems:
        return None, set()
    if bad is None:
        r, _, _, message = problems[0]
        raise RowError(f"{path}:{r}: {message}", problems[0][2])
    for r, n, reason, message in problems:
        bad.append(BadRow(f"{path}:{r}", reason, f"{path}:{r}: {message}", line=n))
    blank = {n for _, n, _, _ in problems}
    lines = [b"{}" if n in blank else line for n, line in enumerate(raw, start=1)]
    return b"\n".join(lines), {r for r, _, _, _ in problems}


def rows_to_prompts(
    rows: Iterable[Mapping[str, Any]],
    path: str | Path,
    fmt: RowFormat,
    known_domains: Iterable[str],
    split: str,
    *,
    uid_offset: int = 0,
    bad: list[BadRow] | None = None,
) -> list[Prompt]:
    """Validate and route rows into Prompts. With `bad`, a row that cannot be used is recorded there and
    skipped (None rows, already recorded by load_rows, are skipped silently); without it, it raises RowError.

    uid is f"{split}:{row id}" when the row has an id, else f"{split}:{uid_offset + index}"; `load_prompts`
    passes the number of rows before this file as `uid_offset` so id-less rows of several files stay distinct.
    meta holds every column not consumed here (the tag stays in meta, for per-tag metrics).
    """
    path = str(path)
    known = set(known_domains)
    consumed = {fmt.prompt_key, fmt.messages_key, fmt.answer_key, fmt.domain_key, fmt.id_key}
    prompts: list[Prompt] = []
    seen: dict[str, str] = {}
    for i, row in enumerate(rows):
        if row is None and bad is not None:
            continue
        where = f"{path}:{i}"
        try:
            prompt = _row_to_prompt(row, i, where, fmt, known, split, uid_offset, consumed)
            if prompt.uid in seen:
                raise RowError(f"{where}: duplicate uid {prompt.uid!r} (also {seen[prompt.uid]})", "duplicate_uid")
        except RowError as e:
            if bad is None:
                raise
            bad.append(BadRow(where, e.reason, str(e), line=None))
            continue
        seen[prompt.uid] = where
        prompts.append(prompt)
    return prompts


def _row_to_prompt(row: Any, i: int, where: str, fmt: RowFormat, known: set[str], split: str, uid_offset: int,
                   consumed: set[str]) -> Prompt:
    if not isinstance(row, Mapping):
        raise RowError(f"{where}: row {i} is a {type(row).__name__}, not an object", "not_an_object")
    domain = _route(row, i, where, fmt, known)
    messages, text = _prompt_of(row, where, fmt)
    answer = row.get(fmt.answer_key)
    if answer is None:
        raise RowError(f"{where}: row {i} has no answer column {fmt.answer_key!r} (missing or null)", "missing_answer")
    row_id = row.get(fmt.id_key)
    uid = f"{split}:{row_id if row_id is not None else uid_offset + i}"
    meta = {k: v for k, v in row.items() if k not in consumed}
    return Prompt(uid=uid, domain=domain, ground_truth=answer, messages=messages, text=text, meta=meta, source=where)


def _route(row: Mapping[str, Any], i: int, where: str, fmt: RowFormat, known: set[str]) -> str:
    domain = row.get(fmt.domain_key)
    if domain is None:
        tag = row.get(fmt.tag_key)
        if tag is None:
            raise RowError(f"{where}: row {i} has neither a {fmt.domain_key!r} column nor a {fmt.tag_key!r} "
                           f"column to route it by", "unroutable")
        if not isinstance(tag, str) or tag not in fmt.tag_to_domain:
            raise RowError(f"{where}: row {i} has no {fmt.domain_key!r} column and its tag {tag!r} is not in "
                           f"tag_to_domain (known tags: {', '.join(sorted(fmt.tag_to_domain)) or 'none'})",
                           "unmapped_tag")
        domain = fmt.tag_to_domain[tag]
    if not isinstance(domain, str):
        raise RowError(f"{where}: row {i} has a non-string domain {domain!r}", "unknown_domain")
    if domain not in known:
        raise RowError(f"{where}: row {i} routes to domain {domain!r} which has no reward worker; "
                       f"known domains: {', '.join(sorted(known)) or 'none'}", "unknown_domain")
    return domain


def _prompt_of(row: Mapping[str, Any], where: str, fmt: RowFormat) -> tuple[list[dict] | None, str | None]:
    """(messages, None) for a chat prompt, (None, text) for a raw one."""
    value = row.get(fmt.messages_key)
    key = fmt.messages_key
    if value is None:
        value, key = row.get(fmt.prompt_key), fmt.prompt_key
    if value is None:
        raise RowError(f"{where}: no prompt: neither {fmt.messages_key!r} nor {fmt.prompt_key!r} is set", "no_prompt")
    if isinstance(value, str):
        if key == fmt.messages_key:
            raise RowError(f"{where}: {key!r} must be a list of {{role, content}} messages, got a string",
                           "bad_prompt")
        text = value if fmt.system_prompt is None else f"{fmt.system_prompt}\n\n{value}"
        return None, text
    if not isinstance(value, list) or not value:
        raise RowError(f"{where}: {key!r} must be a non-empty list of {{role, content}} messages, "
                       f"got {type(value).__name__}", "bad_prompt")
    messages: list[dict] = []
    for j, m in enumerate(value):
        if not (isinstance(m, Mapping) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
            raise RowError(f"{where}: {key!r}[{j}] must be a {{role, content}} dict of strings, got {m!r:.200}",
                           "bad_prompt")
        messages.append({k: v for k, v in m.items() if v is not None})  # schema unification adds None keys
    if fmt.system_prompt is not None and messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": fmt.system_prompt})
    return messages, None


def load_prompts(paths: Iterable[str | Path], fmt: RowFormat, known_domains: Iterable[str],
                 split: str, bad: list[BadRow] | None = None) -> list[Prompt]:
    """Load, validate and route the rows of every file, in order; uids are unique across all the files. With
    `bad`, unusable rows are recorded there (with their .jsonl line) and skipped."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    known = set(known_domains)
    prompts: list[Prompt] = []
    seen: dict[str, str] = {}
    n_rows = 0
    for path in paths:
        file_bad: list[BadRow] | None = [] if bad is not None else None
        rows = load_rows(path, exact_columns=[fmt.answer_key], bad=file_bad)
        for p in rows_to_prompts(rows, path, fmt, known, split, uid_offset=n_rows, bad=file_bad):
            if p.uid in seen:
                message = f"{p.source}: duplicate uid {p.uid!r} (also {seen[p.uid]})"
                if file_bad is None:
                    raise RowError(message, "duplicate_uid")
                file_bad.append(BadRow(p.source, "duplicate_uid", message))
                continue
            seen[p.uid] = p.source
            prompts.append(p)
        n_rows += len(rows)
        if file_bad:
            bad.extend(with_lines(file_bad))
    return prompts


def with_lines(bad: list[BadRow]) -> list[BadRow]:
    """Fills in the 1-based line of each bad row of a .jsonl file (blank lines are no rows)."""
    by_file: dict[str, list[BadRow]] = {}
    for b in bad:
        if b.line is None:
            by_file.setdefault(b.source.rsplit(":", 1)[0], []).append(b)
    for path, rows in by_file.items():
        if Path(path).suffix.lower() != ".jsonl" or not Path(path).is_file():
            continue
        lines = [n for n, line in enumerate(Path(path).read_bytes().split(b"\n"), start=1) if line.strip()]
        for b in rows:
            row = int(b.source.rsplit(":", 1)[1])
            b.line = lines[row] if row < len(lines) else None
    return bad


def split_by_domain(prompts: Iterable[Prompt]) -> dict[str, list[Prompt]]:
    """Prompts grouped by domain, domains in order of first appearance, rows in their original order."""
    out: dict[str, list[Prompt]] = {}
    for p in prompts:
        out.setdefault(p.domain, []).append(p)
    return out


def tokenize_prompts(prompts: Iterable[Prompt], tokenizer: Any,
                     max_prompt_length: int | None) -> tuple[list[Prompt], list[str]]:
    """Fill `prompt_ids`; returns (kept prompts, sources of the prompts dropped for being too long).

    Chat prompts go through `tokenizer.apply_chat_template(..., add_generation_prompt=True)`; text prompts
    through plain tokenization (with the tokenizer's special tokens, e.g. BOS). A prompt longer than
    `max_prompt_length` tokens is dropped and its source returned, for the caller to count and log.
    The input Prompts are not modified; the kept ones are copies.
    """
    prompts = list(prompts)
    kept: list[Prompt] = []
    dropped: list[str] = []
    for p, ids in zip(prompts, _encode_all(prompts, tokenizer)):
        if max_prompt_length is not None and len(ids) > max_prompt_length:
            dropped.append(p.source)
            continue
        kept.append(dataclasses.replace(p, prompt_ids=ids))
    return kept, dropped


def _encode_all(prompts: list[Prompt], tokenizer: Any) -> list[list[int]]:
    """Every prompt's ids, as `_encode` gives them, in two batched calls: the chat template rendered for all chat
    prompts at once, then one tokenizer call per kind (a pipeline's build tokenised the 3,000 math rows one by one,
    0.49 s of each build; batched 0.22 s). apply_chat_template(tokenize=True) is the same two steps: render, then
    tokenise without adding special tokens (the template writes them). A batch that fails goes one prompt at a
    time, so the error names its row."""
    chats = [i for i, p in enumerate(prompts) if p.messages is not None]
    texts = [i for i, p in enumerate(prompts) if p.messages is None and p.text is not None]
    if len(chats) + len(texts) < len(prompts):
        return [_encode(p, tokenizer) for p in prompts]  # a prompt with neither: its DataError
    try:
        rendered = tokenizer.apply_chat_template([prompts[i].messages for i in chats], add_generation_prompt=True,
                                                 tokenize=False) if chats else []
    except ValueError:
        return [_encode(p, tokenizer) for p in prompts]
    out: list[list[int]] = [[] for _ in prompts]
    for rows, strings, special in ((chats, rendered, False), (texts, [prompts[i].text for i in texts], True)):
        if rows:
            for i, ids in zip(rows, tokenizer(strings, add_special_tokens=special)["input_ids"]):
                out[i] = [int(t) for t in ids]
    return out


def _encode(p: Prompt, tokenizer: Any) -> list[int]:
    if p.messages is not None:
        try:
            out = tokenizer.apply_chat_template(p.messages, add_generation_prompt=True, tokenize=True)
        except ValueError as e:  # e.g. a tokenizer without a chat template
            raise DataError(f"{p.source}: could not apply the chat template: {e}") from e
    elif p.text is not None:
        out = tokenizer(p.text)
    else:
        raise DataError(f"{p.source}: prompt {p.uid!r} has neither messages nor text")
    return _flat_ids(out, p.source)


def _flat_ids(out: Any, source: str) -> list[int]:
    """A flat list of ints from whatever the tokenizer returned (list, BatchEncoding/dict, tensor, batch of 1)."""
    if isinstance(out, Mapping) or hasattr(out, "input_ids"):  # dict / BatchEncoding
        out = out["input_ids"]
    if hasattr(out, "tolist"):  # torch / numpy
        out = out.tolist()
    out = list(out)
    if out and not isinstance(out[0], int) and hasattr(out[0], "__len__"):  # a batch of one sequence
        if len(out) != 1:
            raise DataError(f"{source}: tokenizer returned a batch of {len(out)} sequences for one prompt")
        out = out[0].tolist() if hasattr(out[0], "tolist") else list(out[0])
    return [int(t) for t in out]
