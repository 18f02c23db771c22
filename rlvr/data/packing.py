"""Packed micro-batches: rows laid end to end in one token stream, for a forward with no pad tokens.

A micro-batch of n right-padded rows (lengths l_b) becomes one stream of sum(l_b) tokens whose position ids restart
at 0 for each row; transformers' causal LMs then attend block-diagonally (each token sees only its own row) when
they are given position ids and no attention mask. The model's output is taken only at the stream positions whose
next token is a wanted target, and scattered back to the rows' target columns, so everything after the forward (the
loss, its global token count, the logprob and value tensors) keeps the padded layout.

`balanced_bins` splits rows into micro-batches under a token budget with similar totals (verl's
use_dynamic_bsz, OpenRLHF's packing_samples).
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
    (a position's output concerns the next token), which are row `rows[k]`'s target column `start + cols[k]`."""

    position_ids: torch.Tensor
    keep: torch.Tensor
    rows: torch.Tensor
    cols: torch.Tensor

    def scatter(self, out: torch.Tensor, n_rows: int, n_cols: int) -> torch.Tensor:
        """out [1, K, ...] at the kept positions -> [n_rows, n_cols, ...], 0 elsewhere (differentiable)."""
        rows = out.new_zeros((n_rows, n_cols, *out.shape[2:]))
        return rows.index_put((self.rows.to(out.device), self.cols.to(out.device)), out[0])


def pack_layout(lengths: list[int], start: int = 0) -> PackedLayout:
    """The layout of rows of `lengths` tokens packed end to end, keeping target columns start .. l_b - 2 of each row
    (column t of a row is the prediction of its token t + 1 from position t)."""
    position_ids, keep, rows, cols, offset = [], [], [], [], 0
    for b, length in enumerate(lengths):
        position_ids.extend(range(length))
        targets = range(start, length - 1)
        keep.extend(offset + t for t in targets)
        rows.extend([b] * len(targets))
        cols.extend(t - start for t in targets)
        offset += length
    as_long = lambda xs: torch.tensor(xs, dtype=torch.long)  # noqa: E731
    return PackedLayout(as_long(position_ids)[None], as_long(keep), as_long(rows), as_long(cols))


def packed_input_ids(input_ids: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    """[1, sum(lengths)]: each right-padded row's tokens, end to end."""
    return torch.cat([input_ids[b, :length] for b, length in enumerate(lengths)])[None]
