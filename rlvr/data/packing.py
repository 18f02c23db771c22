"""Packed micro-batches: rows laid end to end in one token stream, for a forward with no pad tokens.

A micro-batch of n right-padded rows (lengths l_b) becomes one stream of sum(l_b) tokens whose position ids restart
at 0 for each row; transformers' causal LMs then attend block-diagonally (each token sees only its own row) when
they are given position ids and no attention mask. The model's output is taken only at the stream positions whose
next token is a wanted target, and scattered back to the rows' target columns, so everything after the forward (the
loss, its global token count, the logprob and value tensors) keeps the padded layout.

`balanced_bins` splits rows into micro-batches under a token budget with similar totals (verl's
use_dynamic_bsz, OpenRLHF's packing_samples).

Shared prompts (`prefix_units`, `pack_units`): a GRPO group's samples repeat one prompt, and a padded or plainly
packed micro-batch computes it once per sample. Rows whose tokens before their first loss target are the same make
one unit in the stream: the prompt once, then each row's response, whose position ids go on from the prompt's end
and which attends to the prompt and to itself alone (a tree mask over the unit, rlvr/models/segment_attention.py).
Each response token sees exactly the keys it sees in its own row, so the outputs are the padded path's within float
rounding; the prompt's gradient is the sum over the group's rows, as when it is computed once per row. With the
shipped configs' ~55-token prompts and <= 96-token responses, a group of 4 is ~1/3 fewer tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


def balanced_bins(lengths: list[int], max_tokens: int) -> list[list[int]]:
    """Row indices per micro-batch: the fewest bins of at most `max_tokens` tokens (a row longer than the budget
    gets a bin of its own) that the longest-first greedy fill finds, each bin's rows in ascending index order.
    Greedy onto the lightest bin balances the totals; with k bins it starts from ceil(total / budget)."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    if not lengths:
        return []
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    alone = [i for i in order if lengths[i] >= max_tokens]
    rest = [i for i in order if lengths[i] < max_tokens]
    k = math.ceil(sum(lengths[i] for i in rest) / max_tokens) if rest else 0
    while True:
        bins: list[list[int]] = [[] for _ in range(k)]
        loads = [0] * k
        fits = True
        for i in rest:
            j = min(range(k), key=lambda b: (loads[b], b))
            if loads[j] + lengths[i] > max_tokens:
                fits = False
                break
            bins[j].append(i)
            loads[j] += lengths[i]
        if fits:
            return [[i] for i in alone] + [sorted(b) for b in bins if b]
        k += 1


@dataclass(frozen=True)
class PackedLayout:
    """Where n rows sit in one stream. `position_ids` [1, L]; the output is wanted at stream positions `keep` [K]
    (a position's output concerns the next token), which are row `rows[k]`'s target column `start + cols[k]`.
    The stream is made of units of `unit_lengths` tokens: a row alone (causal attention, mask None), or rows that
    share a prompt (`unit_masks`: [n, n] bool, True where a query may attend to a key)."""

    position_ids: torch.Tensor
    keep: torch.Tensor
    rows: torch.Tensor
    cols: torch.Tensor
    unit_lengths: tuple[int, ...] = ()
    unit_masks: tuple[torch.Tensor | None, ...] = ()

    def scatter(self, out: torch.Tensor, n_rows: int, n_cols: int) -> torch.Tensor:
        """out [1, K, ...] at the kept positions -> [n_rows, n_cols, ...], 0 elsewhere (differentiable)."""
        rows = out.new_zeros((n_rows, n_cols, *out.shape[2:]))
        return rows.index_put((self.rows.to(out.device), self.cols.to(out.device)), out[0])


def pack_layout(lengths: list[int], start: int = 0) -> PackedLayout:
    """The layout of rows of `lengths` tokens packed end to end, keeping target columns start .. l_b - 2 of each row
    (column t of a row is the prediction of its token t + 1 from position t)."""
    return pack_units(lengths, lengths, [[b] for b in range(len(lengths))], start)


def packed_input_ids(input_ids: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    """[1, sum(lengths)]: each right-padded row's tokens, end to end."""
    return torch.cat([input_ids[b, :length] for b, length in enumerate(lengths)])[None]


def prefix_lengths(loss_mask: torch.Tensor, lengths: list[int]) -> list[int]:
    """Each row's prompt: its tokens before the first loss target (target column t is token t + 1), or the whole
    row when it has no loss position."""
    firsts = [row.nonzero() for row in loss_mask]
    return [int(f[0]) + 1 if len(f) else length for f, length in zip(firsts, lengths)]


def prefix_units(input_ids: torch.Tensor, lengths: list[int], prefixes: list[int]) -> list[list[int]]:
    """Rows grouped into units, in order of first appearance: the rows whose first `prefixes[b]` tokens are the
    same tokens (and as many), or a row alone (one with no response tokens, or a prompt no other row has)."""
    units: dict[tuple, list[int]] = {}
    for b, (length, p) in enumerate(zip(lengths, prefixes)):
        key = (p, *input_ids[b, :p].tolist()) if p < length else ("alone", b)
        units.setdefault(key, []).append(b)
    return list(units.values())


def unit_prompt(unit: list[int], lengths: list[int], prefixes: list[int]) -> int:
    """The tokens a unit lays down once: its rows' shared prompt, or a row alone whole."""
    return prefixes[unit[0]] if len(unit) > 1 else lengths[unit[0]]


def unit_tokens(unit: list[int], lengths: list[int], prefixes: list[int]) -> int:
    """A unit's stream length: its prompt once and every row's response (a row alone: the row)."""
    p = unit_prompt(unit, lengths, prefixes)
    return p + sum(lengths[b] - p for b in unit)


def tree_mask(segments: list[int], positions: list[int]) -> torch.Tensor:
    """[n, n] bool over a unit's tokens: segment 0 is the shared prompt, segment i row i's response. A query attends
    to keys of the prompt or of its own segment at a position id not after its own (causal within each branch)."""
    seg, pos = torch.tensor(segments), torch.tensor(positions)
    return ((seg[None, :] == 0) | (seg[None, :] == seg[:, None])) & (pos[None, :] <= pos[:, None])


def pack_units(lengths: list[int], prefixes: list[int], units: list[list[int]], start: int = 0) -> PackedLayout:
    """The layout of `units` (prefix_units) end to end: a unit of one row is the row, a unit of several its rows'
    shared prompt of `prefixes[b]` tokens once, then each row's response (position ids from the prompt's end on).
    Target columns start .. l_b - 2 of each row are kept, as in pack_layout."""
    position_ids, keep, rows, cols, unit_lengths, masks, offset = [], [], [], [], [], [], 0
    for unit in units:
        p = unit_prompt(unit, lengths, prefixes)
        prompt_at, segments = offset, [0] * p
        position_ids.extend(range(p))
        offset += p
        for i, b in enumerate(unit, 1):
            response_at = offset
            position_ids.extend(range(p, lengths[b]))
            segments.extend([i] * (lengths[b] - p))
            offset += lengths[b] - p
            targets = range(start, lengths[b] - 1)
            keep.extend(prompt_at + t if t < p else response_at + t - p for t in targets)
            rows.extend([b] * len(targets))
            cols.extend(t - start for t in targets)
        unit_lengths.append(offset - prompt_at)
        masks.append(tree_mask(segments, position_ids[prompt_at:]) if len(unit) > 1 else None)
    as_long = lambda xs: torch.tensor(xs, dtype=torch.long)  # noqa: E731
    return PackedLayout(as_long(position_ids)[None], as_long(keep), as_long(rows), as_long(cols),
                        tuple(unit_lengths), tuple(masks))


def packed_unit_ids(input_ids: torch.Tensor, lengths: list[int], prefixes: list[int],
                    units: list[list[int]]) -> torch.Tensor:
    """[1, L]: the token stream of pack_units' layout."""
    pieces = []
    for unit in units:
        p = unit_prompt(unit, lengths, prefixes)
        pieces.append(input_ids[unit[0], :p])
        pieces.extend(input_ids[b, p : lengths[b]] for b in unit)
    return torch.cat(pieces)[None]
