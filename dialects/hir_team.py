"""Teams of the hir dialect: an ordered list of ranks, or a family of
translates of one (docs/hir.md, "Teams").

A collective that runs within every slice of a mesh is one op whose team is
its first slice's ranks plus the strides of the others: `[0 to 64]
translated [65536 step 64]` is the 65,536 rows of a [65536, 64] mesh. The
op, its text and the work of every pass stay the size of one team, and each
rank finds its own team arithmetically when the program runs (`Team.of`).

Part of the hir dialect (`fuserc.dialects.hir`)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from functools import cached_property
from typing import Any

Translate = tuple[int, int]
"""`(count, stride)`: the team repeated `count` times, `stride` ranks apart."""


class Team(tuple):  # type: ignore[type-arg]
    """A team: its ranks in team order (the tuple, the *base* team), and
    `translates`, a grid of offsets `sum(i_k * stride_k)`, `0 <= i_k <
    count_k`: the family of teams `base + offset`, one per offset (offset 0
    is the base itself). Without translates it is the plain list of ranks,
    equal (and hashing equal) to the tuple of them.

    Members of the family must be disjoint: each factor either interleaves
    the base (all the interleaving offsets together stay below the spacing
    of the base's ranks, their gcd) or lies beyond everything below it (its
    stride at least the span of the teams the smaller factors make). Every
    mesh slice along a mesh axis of a mesh with increasing, equally spaced
    ids is of this form (`check` says what is wrong with one that is not).

    The size of every team of the family is `len(team)`; a rank's own team,
    its position in it and membership are found in time linear in the
    factors (`of`, `position`, `covers`), never by listing the family."""

    translates: tuple[Translate, ...]

    def __new__(cls, ranks: Iterable[int], translates: Sequence[Translate] = ()) -> "Team":
        team = super().__new__(cls, ranks)
        team.translates = tuple((int(n), int(s)) for n, s in translates if n != 1)
        return team

    def __reduce__(self) -> tuple[Any, ...]:
        return (Team, (tuple(self), self.translates))

    def __eq__(self, other: object) -> bool:
        return tuple.__eq__(self, other) is True and getattr(other, "translates", ()) == self.translates  # type: ignore[arg-type]

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return tuple.__hash__(self) if not self.translates else hash((tuple.__hash__(self), self.translates))

    def __repr__(self) -> str:
        return f"Team({tuple(self)!r}, {self.translates!r})" if self.translates else tuple.__repr__(self)

    # ---- the family ---------------------------------------------------------------
    @property
    def count(self) -> int:
        """How many teams the family has."""
        return math.prod(n for n, _ in self.translates)

    def offsets(self) -> Iterator[int]:
        """Every translate's offset, the base's (0) first."""
        offs = [0]
        for n, s in self.translates:
            offs = [o + i * s for i in range(n) for o in offs]
        yield from offs

    def teams(self) -> Iterator[tuple[int, ...]]:
        """Every team of the family as its ranks (linear in the family:
        for what must see each team, such as the nodes each one spans)."""
        for o in self.offsets():
            yield tuple(r + o for r in self)

    def members(self) -> list[int]:
        """Every rank of every team, increasing."""
        return sorted(r for t in self.teams() for r in t)

    # ---- structure ----------------------------------------------------------------
    @cached_property
    def _layout(self) -> tuple[int, list[Translate], list[Translate], int] | str:
        """(q, fine factors, coarse factors, low) where q is the gcd of the
        base's spacing, the fine factors interleave the base (stride
        ascending), the coarse ones stack teams (stride descending), low the
        smallest base rank; or the reason the family is not disjoint."""
        if not self.translates:
            return (0, [], [], min(self) if self else 0)
        if any(n < 1 or s < 1 for n, s in self.translates):
            return "each translate needs a count >= 1 and a stride >= 1"
        low, high = min(self), max(self)
        q = 0
        for r in self:
            q = math.gcd(q, r - low)
        fine: list[Translate] = []
        coarse: list[Translate] = []
        extent = 0  # the largest offset the fine factors make
        for n, s in sorted(self.translates, key=lambda t: t[1]):
            if not coarse and q and s > extent and extent + (n - 1) * s < q:
                fine.append((n, s))
                extent += (n - 1) * s
            else:
                coarse.append((n, s))
        span = high - low + extent + 1
        for n, s in coarse:
            if s < span:
                return f"the translate {n} step {s} overlaps the teams its smaller strides make (each spans {span} ranks)"
            span += (n - 1) * s
        return (q, fine, coarse[::-1], low)

    def check(self) -> str | None:
        """None when the family's teams are disjoint by the rule above, else why not."""
        layout = self._layout
        return layout if isinstance(layout, str) else None

    @cached_property
    def _index(self) -> dict[int, int] | range:
        if len(self) >= 2 and self[1] > self[0] and tuple.__eq__(self, tuple(range(self[0], self[-1] + 1, self[1] - self[0]))):  # type: ignore[arg-type]
            return range(self[0], self[-1] + 1, self[1] - self[0])
        return {r: i for i, r in enumerate(self)}

    def _base_position(self, rank: int) -> int | None:
        index = self._index
        if isinstance(index, range):
            return index.index(rank) if rank in index else None
        return index.get(rank)

    def locate(self, rank: int) -> tuple[int, int] | None:
        """(offset of the rank's own team, its position there), or None
        when no team of the family holds it."""
        layout = self._layout
        if isinstance(layout, str):
            raise ValueError(layout)
        q, fine, coarse, low = layout
        d, offset = rank - low, 0
        if d < 0:
            return None
        for n, s in coarse:
            i = d // s
            if i >= n:
                return None
            d -= i * s
            offset += i * s
        if fine:
            f = (rank - offset - self[0]) % q
            offset += f
            for n, s in reversed(fine):
                i = f // s
                if i >= n:
                    return None
                f -= i * s
            if f:
                return None
        p = self._base_position(rank - offset)
        return None if p is None else (offset, p)

    def covers(self, rank: int) -> bool:
        return self.locate(rank) is not None

    def position(self, rank: int) -> int | None:
        """`rank`'s position in its own team."""
        found = self.locate(rank)
        return None if found is None else found[1]

    def of(self, rank: int) -> tuple[int, ...] | None:
        """`rank`'s own team of the family, as its ranks."""
        found = self.locate(rank)
        if found is None:
            return None
        return tuple(self) if found[0] == 0 else tuple(r + found[0] for r in self)

    @property
    def top(self) -> int:
        """The largest rank of the family (a job needs this many ranks plus one)."""
        return max(self) + sum((n - 1) * s for n, s in self.translates)

    def translates_text(self) -> str:
        """`translated [N step S, ...]`, or '' without translates."""
        if not self.translates:
            return ""
        return " translated [" + ", ".join(f"{n} step {s}" for n, s in self.translates) + "]"
