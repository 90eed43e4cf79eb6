"""Dispatch and combine (fuserc/dialects/fusion_dispatch.py) on torch
tensors of any device, and the local steps of their expert-parallel form:
`place_rows` (received rows into the experts' slots) and `pick_rows` (the
slots' rows back in the order they came). One sort of the pairs by expert
(stable, so each expert's pairs stay in token order) gives every row's slot.
"""

from __future__ import annotations

import torch

from fuserc.diagnostics import Diagnostic


def _slots(ids: torch.Tensor, experts: int, slots: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(order, expert, slot, counts): the pairs sorted by expert, each sorted
    pair's expert and row in its expert's slot, the rows per expert."""
    flat = ids.reshape(-1)
    if flat.numel() and (int(flat.min()) < 0 or int(flat.max()) >= experts):
        raise Diagnostic(f"expert ids must lie in [0, {experts}), got ids in [{int(flat.min())}, {int(flat.max())}]")
    order = torch.argsort(flat, stable=True)
    expert = flat[order]
    counts = torch.zeros(experts, dtype=torch.int64, device=flat.device).scatter_add_(0, flat, torch.ones_like(flat))
    if flat.numel() and int(counts.max()) > slots:
        raise Diagnostic(f"an expert is chosen {int(counts.max())} times by {slots} tokens: a token's ids must be distinct (as top-k's are)")
    starts = torch.cumsum(counts, 0) - counts
    slot = torch.arange(flat.numel(), device=flat.device) - starts[expert]
    return order, expert, slot, counts


def dispatch(x: torch.Tensor, ids: torch.Tensor, experts: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[T, H] or [T, k, H] rows with ids [T, k] -> ([experts, T, H] slots,
    the rows per expert); with ids [G, T, k] (and x [G, ...]) each group
    on its own: ([experts, G, T, H], [experts, G])."""
    if ids.dim() == 3:
        parts = [dispatch(xg, ig, experts) for xg, ig in zip(x, ids)]
        return torch.stack([p[0] for p in parts], 1), torch.stack([p[1] for p in parts], 1)
    tokens, k = ids.shape
    order, expert, slot, counts = _slots(ids, experts, tokens)
    rows = x.reshape(tokens * k, x.shape[-1])[order] if x.dim() == 3 else x[order // k]
    out = x.new_zeros(experts, tokens, x.shape[-1])
    out[expert, slot] = rows
    return out, counts


def combine(ye: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """[E, T, H] slots with ids [T, k] -> [T, k, H], each pair's row; with
    [E, G, T, H] and ids [G, T, k], each group's -> [G, T, k, H]."""
    if ids.dim() == 3:
        return torch.stack([combine(ye[:, g], ig) for g, ig in enumerate(ids)])
    experts, tokens, hidden = ye.shape
    order, expert, slot, _ = _slots(ids, experts, tokens)
    out = ye.new_zeros(ids.numel(), hidden)
    out[order] = ye[expert, slot]
    return out.reshape(*ids.shape, hidden)


def _received(counts: torch.Tensor, slots: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(expert, slot, total) of rows that came position by position, expert
    by expert (counts [P, E]): each expert's rows in team order."""
    positions, experts = counts.shape
    flat = counts.reshape(-1)
    total = int(flat.sum())
    block = torch.repeat_interleave(torch.arange(flat.numel(), device=counts.device), flat, output_size=total)
    first = torch.cumsum(flat, 0) - flat
    within = torch.arange(total, device=counts.device) - first[block]
    before = (torch.cumsum(counts, 0) - counts).reshape(-1)
    if experts and int(counts.sum(0).max()) > slots:
        raise Diagnostic(f"an expert received {int(counts.sum(0).max())} rows for {slots} slots")
    return block % experts, before[block] + within, total


def place_rows(rows: torch.Tensor, counts: torch.Tensor, slots: int) -> torch.Tensor:
    """Received rows [R, H] into [E, slots, H] (fusion.place_rows)."""
    expert, slot, total = _received(counts, slots)
    out = rows.new_zeros(counts.shape[1], slots, rows.shape[1])
    out[expert, slot] = rows[:total]
    return out


def pick_rows(ye: torch.Tensor, counts: torch.Tensor, rows: int) -> torch.Tensor:
    """[E, S, H] slots -> [rows, H] in received order (fusion.pick_rows)."""
    expert, slot, total = _received(counts, ye.shape[1])
    out = ye.new_zeros(rows, ye.shape[2])
    out[:total] = ye[expert, slot]
    return out
