"""Contextual Anomaly Detector, open-source edition (CAD OSE), as a streaming detector.

Written from the published description of Mikhail Smirnov's CAD OSE (the detector
``contextOSE`` of the Numenta Anomaly Benchmark; how it scores there and as the
operator runs it: docs/anomaly.md). Per point:

1. **Discretise.** The value becomes a level ``floor((x - value_min) / step)`` with
   ``step = (value_max - value_min) / (2**value_bits - 1)``, so ``value_min`` is
   level 0 and ``value_max`` the top level (a flat range uses ``step = 1``).
2. **Encode.** Each bit position ``i`` of the level gives one *sensor fact*
   ``2 i + bit``: a level always has ``value_bits`` facts. A level above the range
   has more bit positions (so new facts); a level below it gets the facts of its
   magnitude plus :data:`BELOW_RANGE_FACT`. In NAB the range is the file's own
   min/max, so neither happens there.
3. **Contexts.** A context pairs a *left semi-context* (a set of facts of the
   previous step: its sensor facts and its active "neurons") with a *right
   semi-context* (a set of facts of this step). Each step stores the *zero-level*
   context (all previous facts, all current facts); it is *new* when it was never
   seen.
4. **Activation.** A context is *selected* when its left facts are all in the
   previous step's facts, and *active* when its right facts are also all in the
   current ones; an active context's count goes up. The ``max_active_neurons`` most
   counted active contexts become neuron facts of the next step's left side.
5. **Growth.** Only on a new zero-level context: a selected-or-touched context that
   is zero-level and partly matched on both sides proposes the matched part as a new
   context (left part at most ``max_left_semi_context`` facts).
6. **Score.** ``(1 - active / selected + added / proposed) / 2``: the share of
   expected continuations that did not happen, plus the share of proposals that were
   really new (only when the zero-level context was new).
7. **Rest.** A score is reported only if no raw score of the last ``rest_period``
   steps reached ``base_threshold`` (the first ``rest_period`` steps report 0); in
   NAB ``rest_period`` is a fifth of the file's probationary period.

Ties among active contexts of equal count are broken by age (newer first); the
published version breaks them by hash order, so scores differ from NAB's result
files in detail (on ``art_daily_jumpsup`` 74% of the scores are equal, correlation
0.998). The state is plain data (:meth:`CadDetector.snapshot`) and, as published,
grows with every new context, so its size is bounded only by what the series holds.

**Bounded memory** (not in the published version): with ``max_contexts`` set, once
more contexts are stored the least recently used ones (last created or active
longest ago; the older id first on a tie) are evicted down to
``EVICT_TO`` of the cap, and semi-contexts no context uses any more go with them.
Ids are never reused, so the neuron facts of evicted contexts that remain inside
stored left semi-contexts cannot be mistaken for a new context's.

NAB hands the detector the min and max of the whole file (future values included);
the operator's ways without them are in :mod:`flinkai.anomaly.contextual`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flinkai.anomaly.errors import DetectorInputError

__all__ = [
    "BASE_THRESHOLD",
    "BELOW_RANGE_FACT",
    "EVICT_TO",
    "MAX_ACTIVE_NEURONS",
    "MAX_LEFT_SEMI_CONTEXT",
    "NEURON_FACT_BASE",
    "VALUE_BITS",
    "CadConfig",
    "CadDetector",
    "check_value",
    "encode_level",
    "rest_masked",
    "rest_step",
]

#: Bits of the discretised value: 2**3 = 8 levels (CAD OSE's ``numNormValueBits``).
VALUE_BITS = 3
#: A raw score at or above this starts a rest period (``baseThreshold``).
BASE_THRESHOLD = 0.75
#: Longest left part of a proposed context, in facts (``maxLeftSemiContextsLenght``).
MAX_LEFT_SEMI_CONTEXT = 7
#: Active contexts carried to the next step as neuron facts (``maxActiveNeuronsNum``).
MAX_ACTIVE_NEURONS = 15
#: Neuron facts are this plus the context id, apart from every sensor fact.
NEURON_FACT_BASE = 2**31
#: The extra sensor fact of a level below the range (never used with NAB's range).
BELOW_RANGE_FACT = -1
#: Levels are clamped to this many bits, so an extreme value cannot make thousands of facts.
_MAX_LEVEL_BITS = 62
#: A capped store evicts down to this share of ``max_contexts`` (so eviction, which
#: rebuilds the fact index, runs once per ``(1 - EVICT_TO) * max_contexts`` new contexts).
EVICT_TO = 0.75
_SNAPSHOT_VERSION = 3
#: Layouts :meth:`CadDetector.from_snapshot` still reads (2: neuron facts stored whole).
_READABLE_VERSIONS = (2, 3)

Facts = tuple[int, ...]


@dataclass(frozen=True)
class CadConfig:
    """CAD OSE's settings; the defaults are the published constants.

    Attributes:
        value_min: Value of level 0.
        value_max: Value of the top level.
        value_bits: Bits of the level (levels ``0 .. 2**value_bits - 1`` in range).
        base_threshold: Raw score that starts a rest period.
        rest_period: Steps after such a score that report 0 (NAB: probation / 5).
        max_left_semi_context: Longest left part of a proposed context.
        max_active_neurons: Active contexts carried forward as facts.
        first_context_needs_novelty: Context 0 (the first one stored) is considered
            only on steps that store a new zero-level context. The published
            implementation behaves so (its "nothing new" marker compares equal to id
            0) and its NAB results depend on it; ``False`` treats context 0 like any.
        max_contexts: Most contexts kept (least recently used evicted, see the module
            doc); 0 keeps every one, as published.
    """

    value_min: float
    value_max: float
    value_bits: int = VALUE_BITS
    base_threshold: float = BASE_THRESHOLD
    rest_period: int = 30
    max_left_semi_context: int = MAX_LEFT_SEMI_CONTEXT
    max_active_neurons: int = MAX_ACTIVE_NEURONS
    first_context_needs_novelty: bool = True
    max_contexts: int = 0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.value_min) and math.isfinite(self.value_max)):
            raise DetectorInputError(
                f"value range must be finite, got [{self.value_min}, {self.value_max}]"
            )
        if self.value_max < self.value_min:
            raise DetectorInputError(f"value_max {self.value_max} < value_min {self.value_min}")
        for name in ("value_bits", "rest_period", "max_left_semi_context", "max_active_neurons"):
            if int(getattr(self, name)) < 1:
                raise DetectorInputError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_contexts < 0 or 0 < self.max_contexts < 4:
            raise DetectorInputError(f"max_contexts must be 0 or >= 4, got {self.max_contexts}")

    @property
    def step(self) -> float:
        """Width of one level (``1`` for a flat range, as published)."""
        span = self.value_max - self.value_min
        top = 2**self.value_bits - 1
        return (span if span > 0 else float(top)) / top


def rest_masked(
    raw: Sequence[float], rest_period: int, base_threshold: float = BASE_THRESHOLD
) -> list[float]:
    """The scores :meth:`CadDetector.update` reports, from its raw scores, under
    ``rest_period``: the rest period only hides scores and never changes what the
    detector learns, so one run gives the scores of every rest period."""
    out: list[float] = []
    since_high = 1
    for r in raw:
        score, since_high = rest_step(r, since_high, rest_period, base_threshold)
        out.append(score)
    return out


def rest_step(
    raw: float, since_high: int, rest_period: int, base_threshold: float = BASE_THRESHOLD
) -> tuple[float, int]:
    """One step of the rest period: the score reported for ``raw`` (0 if a raw score
    of the last ``rest_period`` steps reached ``base_threshold``) and the new count of
    steps since such a score (1 at the start of a series)."""
    score = raw if since_high > rest_period else 0.0
    return score, (1 if raw >= base_threshold else since_high + 1)


def encode_level(level: int, value_bits: int) -> Facts:
    """Sensor facts of a level: ``2 i + bit`` per bit position, sorted."""
    magnitude = min(abs(level), 2**_MAX_LEVEL_BITS - 1)
    width = max(value_bits, magnitude.bit_length())
    facts = [2 * i + ((magnitude >> i) & 1) for i in range(width)]
    if level < 0:
        facts.insert(0, BELOW_RANGE_FACT)
    return tuple(facts)


def _pack(facts: Facts) -> list[int]:
    """``[n, *sensor facts, *neuron context ids]`` of sorted facts (sensor facts first)."""
    n = 0
    while n < len(facts) and facts[n] < NEURON_FACT_BASE:
        n += 1
    return [n, *facts[:n], *(f - NEURON_FACT_BASE for f in facts[n:])]


def _unpack(row: Sequence[int]) -> Facts:
    """The facts :func:`_pack` stored.

    Raises:
        ValueError: A sensor count outside the row.
    """
    n = int(row[0])
    if not 0 <= n < len(row):
        raise ValueError(f"sensor fact count {n} outside a row of {len(row)}")
    return (*map(int, row[1 : n + 1]), *(NEURON_FACT_BASE + int(c) for c in row[n + 1 :]))


def check_value(x: float) -> float:
    """``x`` as a finite float.

    Raises:
        DetectorInputError: ``x`` is not a number, or not finite.
    """
    try:
        v = float(x)
    except (TypeError, ValueError) as e:
        raise DetectorInputError(f"value must be a number, got {x!r}") from e
    if not math.isfinite(v):
        raise DetectorInputError(f"value must be finite, got {v}")
    return v


class CadDetector:
    """CAD OSE over one series: :meth:`update` scores a value and learns it."""

    def __init__(self, config: CadConfig) -> None:
        self.config = config
        self._step = config.step
        # Semi-contexts by id (ids only grow): facts, and fact -> ids holding it.
        self._left_facts: dict[int, Facts] = {}
        self._left_ids: dict[Facts, int] = {}
        self._left_index: dict[int, list[int]] = {}
        self._left_contexts: dict[int, dict[int, int]] = {}  # right id -> context id
        self._right_facts: dict[int, Facts] = {}
        self._right_ids: dict[Facts, int] = {}
        self._right_index: dict[int, list[int]] = {}
        # Contexts by id (ids only grow): activation count, whether stored as a
        # zero-level one, and the step it was last created or active at.
        self._count: dict[int, int] = {}
        self._zero: dict[int, bool] = {}
        self._used: dict[int, int] = {}
        self._next = [0, 0, 0]  # next left, right, context id
        self._prev_facts: Facts = ()
        self._left_limit = 0  # left semi-contexts that existed when _prev_facts was set
        self._since_high = 1  # steps since the last raw score >= base_threshold
        self.steps = 0
        self.last_raw = math.nan

    # -- memory ---------------------------------------------------------------------------

    def _semi(self, facts: Facts, left: bool) -> int:
        ids = self._left_ids if left else self._right_ids
        sid = ids.get(facts)
        if sid is None:
            store = self._left_facts if left else self._right_facts
            index = self._left_index if left else self._right_index
            slot = 0 if left else 1
            sid = self._next[slot]
            self._next[slot] += 1
            ids[facts] = sid
            store[sid] = facts
            for f in facts:
                index.setdefault(f, []).append(sid)
            if left:
                self._left_contexts[sid] = {}
        return sid

    def _store(self, left: Facts, right: Facts, zero_level: bool) -> tuple[int, bool]:
        """Context id of ``(left, right)``, created if new; True when created."""
        lid, rid = self._semi(left, True), self._semi(right, False)
        cid = self._left_contexts[lid].get(rid)
        if cid is None:
            cid = self._next[2]
            self._next[2] += 1
            self._left_contexts[lid][rid] = cid
            self._count[cid] = 0
            self._zero[cid] = zero_level
            self._used[cid] = self.steps
            return cid, True
        if zero_level:
            self._zero[cid] = True
        return cid, False

    def _evict(self) -> None:
        """Drop least recently used contexts down to ``EVICT_TO`` of the cap, and the
        semi-contexts left unused; then rebuild the fact indexes."""
        keep_n = max(1, int(self.config.max_contexts * EVICT_TO))
        order = sorted(self._count, key=lambda c: (self._used[c], c))
        for cid in order[: len(order) - keep_n]:
            del self._count[cid], self._zero[cid], self._used[cid]
        used_right: set[int] = set()
        for lid in list(self._left_contexts):
            table = {r: c for r, c in self._left_contexts[lid].items() if c in self._count}
            if table:
                self._left_contexts[lid] = table
                used_right.update(table)
            else:
                del self._left_contexts[lid]
                del self._left_ids[self._left_facts.pop(lid)]
        for rid in [r for r in self._right_facts if r not in used_right]:
            del self._right_ids[self._right_facts.pop(rid)]
        self._left_index = self._index(self._left_facts)
        self._right_index = self._index(self._right_facts)

    @staticmethod
    def _index(store: Mapping[int, Facts]) -> dict[int, list[int]]:
        index: dict[int, list[int]] = {}
        for sid in sorted(store):
            for f in store[sid]:
                index.setdefault(f, []).append(sid)
        return index

    @staticmethod
    def _cross(
        facts: Facts, index: Mapping[int, Sequence[int]], limit: int | None = None
    ) -> dict[int, list[int]]:
        """Semi-context id -> the given facts it holds (in ``facts`` order)."""
        out: dict[int, list[int]] = {}
        for f in facts:
            for sid in index.get(f, ()):
                if limit is None or sid < limit:
                    out.setdefault(sid, []).append(f)
        return out

    # -- one step -------------------------------------------------------------------------

    def facts_of(self, x: float) -> Facts:
        """Sensor facts of a value."""
        level = math.floor((x - self.config.value_min) / self._step)
        return encode_level(level, self.config.value_bits)

    def _raw(self, facts: Facts) -> float:
        cfg = self.config
        new_id: int | None = None
        proposed: set[tuple[Facts, Facts]] = set()
        if self._prev_facts:
            proposed.add((self._prev_facts, facts))
            cid, created = self._store(self._prev_facts, facts, zero_level=True)
            new_id = cid if created else None
        is_new = new_id is not None
        skip = new_id if is_new else (0 if cfg.first_context_needs_novelty else None)
        right = self._cross(facts, self._right_index)
        left = self._cross(self._prev_facts, self._left_index, self._left_limit)
        selected = 0
        active: list[int] = []
        proposals: list[tuple[Facts, Facts]] = []
        for lid in sorted(left):
            matched = left[lid]
            full = len(matched) == len(self._left_facts[lid])
            if not (full or is_new):
                continue  # only proposals need partial left matches, and only when new
            short = len(matched) <= cfg.max_left_semi_context
            for rid, cid in self._left_contexts[lid].items():
                if cid == skip:
                    continue
                r_matched = right.get(rid)
                if full:
                    selected += 1
                if not r_matched:
                    continue
                if full and len(r_matched) == len(self._right_facts[rid]):
                    self._count[cid] += 1
                    self._used[cid] = self.steps
                    active.append(cid)
                elif is_new and self._zero[cid] and short:
                    proposals.append((tuple(matched), tuple(r_matched)))
        share_active = len(active) / selected if selected else 0.0
        top = sorted(active, key=lambda c: (self._count[c], c))[-cfg.max_active_neurons :]
        self._prev_facts = tuple(sorted({*facts, *(NEURON_FACT_BASE + c for c in top)}))
        added = sum(self._store(lf, rf, zero_level=False)[1] for lf, rf in proposals)
        self._left_limit = self._next[0]
        proposed.update(proposals)
        share_added = (added + 1) / len(proposed) if is_new else 0.0
        return (1.0 - share_active + share_added) / 2.0

    def update(self, x: float) -> float:
        """Score ``x`` against the contexts learnt so far, then learn it.

        Returns:
            The anomaly score in [0, 1] (0 inside a rest period).

        Raises:
            DetectorInputError: ``x`` is not a finite number (the state is unchanged).
        """
        raw = self._raw(self.facts_of(check_value(x)))
        cfg = self.config
        if cfg.max_contexts and len(self._count) > cfg.max_contexts:
            self._evict()
        score, self._since_high = rest_step(
            raw, self._since_high, cfg.rest_period, cfg.base_threshold
        )
        self.steps += 1
        self.last_raw = raw
        return score

    # -- state ----------------------------------------------------------------------------

    @property
    def context_count(self) -> int:
        """Contexts stored so far."""
        return len(self._count)

    def snapshot(self) -> dict[str, Any]:
        """Plain-data state (lists of ints); the config is not included.

        Right semi-contexts are ``[id, *facts]``; left ones ``[id, n, *facts]`` with
        the first ``n`` facts sensor facts and the rest neuron facts stored as their
        context ids (``fact - NEURON_FACT_BASE``: small ints pickle in 2-3 bytes, a
        whole neuron fact in 7, and they fill most of a left semi-context); the
        previous step's facts likewise. Contexts are six ints each (id, left id, right
        id, count, zero-level, last used), all in id order.
        """
        rows: list[tuple[int, ...]] = []
        for lid, table in self._left_contexts.items():
            for rid, cid in table.items():
                rows.append((cid, lid, rid, self._count[cid], int(self._zero[cid]),
                             self._used[cid]))  # fmt: skip
        contexts = [v for row in sorted(rows) for v in row]
        return {
            "version": _SNAPSHOT_VERSION,
            "left": [[sid, *_pack(self._left_facts[sid])] for sid in sorted(self._left_facts)],
            "right": [[sid, *self._right_facts[sid]] for sid in sorted(self._right_facts)],
            "contexts": contexts,
            "next": list(self._next),
            "prev_facts": _pack(self._prev_facts),
            "left_limit": self._left_limit,
            "since_high": self._since_high,
            "steps": self.steps,
        }

    @classmethod
    def from_snapshot(cls, state: Mapping[str, Any], config: CadConfig) -> CadDetector:
        """Rebuild a detector from :meth:`snapshot` output and the current config.

        Raises:
            DetectorInputError: The snapshot is of another version or malformed.
        """
        version = state.get("version")
        if version not in _READABLE_VERSIONS:
            raise DetectorInputError(f"CAD snapshot version {version!r} unsupported")
        unpack = _unpack if version == 3 else (lambda row: tuple(map(int, row)))
        det = cls(config)
        # The operator rebuilds a key's detector from its state at every point, so
        # this runs per event: bulk conversions (map, zip, slices) instead of
        # per-value Python loops keep it near a millisecond at 1,000 contexts.
        try:
            for row in state["left"]:
                sid, facts = int(row[0]), unpack(row[1:])
                det._left_facts[sid] = facts
                det._left_ids[facts] = sid
                det._left_contexts[sid] = {}
            for row in state["right"]:
                sid, facts = int(row[0]), tuple(map(int, row[1:]))
                det._right_facts[sid] = facts
                det._right_ids[facts] = sid
            det._left_index = cls._index(det._left_facts)
            det._right_index = cls._index(det._right_facts)
            flat = list(map(int, state["contexts"]))
            if len(flat) % 6:
                raise ValueError("contexts must hold 6 ints each")
            cids, lids, rids = flat[0::6], flat[1::6], flat[2::6]
            unknown = set(rids) - det._right_facts.keys()
            if unknown:
                raise ValueError(f"contexts name unknown right semi-contexts {sorted(unknown)}")
            for cid, lid, rid in zip(cids, lids, rids, strict=True):
                det._left_contexts[lid][rid] = cid
            det._count = dict(zip(cids, flat[3::6], strict=True))
            det._zero = dict(zip(cids, map(bool, flat[4::6]), strict=True))
            det._used = dict(zip(cids, flat[5::6], strict=True))
            det._next = [int(v) for v in state["next"]]
            if len(det._next) != 3:
                raise ValueError("next must hold 3 ids")
            det._prev_facts = unpack(state["prev_facts"])
            det._left_limit = int(state["left_limit"])
            det._since_high = int(state["since_high"])
            det.steps = int(state["steps"])
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise DetectorInputError(f"malformed CAD snapshot: {e}") from e
        return det
