"""A LangGraph ``StateGraph`` run as a straight walk of its own nodes, without Pregel.

LangGraph's compiled graph runs every invoke through its Pregel loop: channels,
tasks, writers and a superstep per node. For the risk graph that machinery costs
about 1,860 us per decision against about 87 us for the same node functions called
in order (``flinkai bench agents --floor``, ``step_costs_us``), and the job spends
most of its time per decision there. :class:`GraphPlan` reads the walk from the
builder LangGraph defines and validates (nodes, edges, branches, channels) and
runs it directly: from ``START``'s one way out, each node on a read-only view of the
state, its update merged, its edge or router followed, until ``END``.

It is only the same as Pregel for graphs where Pregel itself runs one node per
superstep and keeps the last value of every channel, so it refuses, when built,
anything else (:class:`~flinkai.agents.errors.PlanError`): reducer channels, join
(waiting) edges, a source with more or fewer than one way out, a branch whose
destinations are not declared, a cycle, retry/cache/timeout policies, deferred or
error-handler nodes, ``Command`` destinations, managed values, a node or branch
input schema other than the state's, a schema that is not a ``TypedDict``, and node
or router callables that are async or take more than the state. While running it
is stricter than Pregel (which, in langgraph 1.2.24, silently drops unknown keys in
an input or update and takes ``None`` as no update): an unknown key, a node result
that is not a dict, or a router result that is a fan-out (list, ``Send``) or not a
declared destination is a ``PlanError``.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from flinkai.agents.errors import PlanError

if typing.TYPE_CHECKING:
    from langgraph.graph import StateGraph

__all__ = ["GraphPlan"]

_Fn = Callable[[Mapping[str, Any]], Any]


@dataclass(frozen=True)
class _Exit:
    """A source's one way out: a fixed ``target``, or a ``router`` mapped through ``ends``."""

    target: str | None = None
    router: _Fn | None = None
    ends: Mapping[Hashable, str] | None = None


class GraphPlan:
    """The nodes and routers of an uncompiled ``StateGraph``, walked in order.

    Args:
        builder: The graph as defined in LangGraph (``StateGraph``, not compiled).

    Raises:
        PlanError: LangGraph's own validation fails, or the graph uses anything the
            plan cannot run as Pregel would (see the module docstring).
    """

    def __init__(self, builder: StateGraph[Any, Any, Any, Any]) -> None:
        from langgraph.channels.last_value import LastValue
        from langgraph.graph import END, START
        from langgraph.types import Send

        try:
            builder.validate()  # LangGraph's checks: known nodes, an entry point
        except ValueError as e:
            raise PlanError(f"LangGraph refuses the graph: {e}") from e
        schema = builder.state_schema
        if not typing.is_typeddict(schema):
            raise PlanError(f"the state schema must be a TypedDict, got {schema!r}")
        if builder.input_schema is not schema or builder.output_schema is not schema:
            raise PlanError("input and output schemas must be the state schema")
        if builder.managed:
            raise PlanError(f"managed values are not supported: {sorted(builder.managed)}")
        reducers = sorted(k for k, ch in builder.channels.items() if type(ch) is not LastValue)
        if reducers:
            raise PlanError(f"channel(s) {reducers} have a reducer; only last-value channels")
        if builder.waiting_edges:
            raise PlanError(f"join edges are not supported: {sorted(builder.waiting_edges)}")
        self.channels = frozenset(builder.channels)
        self._end = END
        self._nodes: dict[str, _Fn] = {}
        for name, spec in builder.nodes.items():
            refused = [what for what, used in (
                ("retry_policy", spec.retry_policy), ("cache_policy", spec.cache_policy),
                ("defer", spec.defer), ("timeout", getattr(spec, "timeout", None)),
                ("is_error_handler", getattr(spec, "is_error_handler", False)),
                ("error_handler_node", getattr(spec, "error_handler_node", None)),
                ("ends (Command destinations)", spec.ends)) if used]  # fmt: skip
            if refused:
                raise PlanError(f"node {name!r} uses {refused}")
            if spec.input_schema is not schema:
                raise PlanError(f"node {name!r} reads {spec.input_schema!r}, not the state")
            self._nodes[name] = _plain_func(spec.runnable, f"node {name!r}")
        exits: dict[str, _Exit] = {}
        for source in (START, *builder.nodes):
            edges = [dst for src, dst in builder.edges if src == source]
            branches = builder.branches.get(source, {})
            if len(edges) + len(branches) != 1:
                raise PlanError(f"{source!r} needs exactly one way out (an edge or a branch); "
                                f"it has edges to {sorted(edges)} and branches {sorted(branches)}")  # fmt: skip
            if edges:
                exits[source] = _Exit(target=edges[0])
                continue
            ((cond, branch),) = branches.items()
            what = f"branch {cond!r} of {source!r}"
            if branch.ends is None:
                raise PlanError(f"{what} has no declared destinations (give a path map "
                                "or a Literal return type)")  # fmt: skip
            if branch.input_schema not in (None, schema):
                raise PlanError(f"{what} reads {branch.input_schema!r}, not the state")
            exits[source] = _Exit(router=_plain_func(branch.path, what), ends=dict(branch.ends))
        self._exits = exits
        self._start = START
        self._fanout = (list, tuple, Send)
        _refuse_cycles(exits, END)

    def invoke(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """Run the graph on ``state``; the final state, as ``compiled.invoke`` returns it.

        Raises:
            PlanError: An unknown input key, or a node or router that broke the rules.
        """
        unknown = state.keys() - self.channels
        if unknown:
            raise PlanError(f"input key(s) {sorted(unknown)} are not in the state schema")
        values = dict(state)
        view = MappingProxyType(values)  # nodes read it; only the plan writes
        at = self._next(self._start, view)
        while at != self._end:
            update = self._nodes[at](view)
            if not isinstance(update, dict):
                raise PlanError(f"node {at!r} returned {type(update).__name__}, not a dict")
            bad = update.keys() - self.channels
            if bad:
                raise PlanError(f"node {at!r} returned key(s) {sorted(bad)} not in the state")
            values.update(update)
            at = self._next(at, view)
        return values

    def _next(self, source: str, view: Mapping[str, Any]) -> str:
        way = self._exits[source]
        if way.target is not None:
            return way.target
        assert way.router is not None and way.ends is not None
        result = way.router(view)
        if isinstance(result, self._fanout):
            raise PlanError(f"router of {source!r} fanned out ({result!r}); one destination only")
        try:
            return way.ends[result]
        except (KeyError, TypeError):
            raise PlanError(f"router of {source!r} returned {result!r}, not one of "
                            f"{list(way.ends)}") from None  # fmt: skip


def _plain_func(runnable: Any, what: str) -> _Fn:
    """The sync function behind a node's or router's ``RunnableCallable`` that takes only
    the state (LangGraph passes config, runtime or store to functions that ask)."""
    func = getattr(runnable, "func", None)
    if func is None or inspect.iscoroutinefunction(func):
        raise PlanError(f"{what} is not a plain sync function: {runnable!r}")
    if getattr(runnable, "func_accepts", None) or getattr(runnable, "explode_args", False):
        raise PlanError(f"{what} takes more than the state: {runnable!r}")
    return typing.cast(_Fn, func)


def _refuse_cycles(exits: Mapping[str, _Exit], end: str) -> None:
    """Depth-first over every possible successor; a node met again on its own path is a cycle."""

    def successors(source: str) -> list[str]:
        way = exits[source]
        targets = [way.target] if way.target is not None else list((way.ends or {}).values())
        return [t for t in targets if t != end]

    done: set[str] = set()

    def visit(node: str, path: list[str]) -> None:
        if node in path:
            raise PlanError(f"cycle: {' -> '.join([*path[path.index(node) :], node])}")
        if node in done:
            return
        for nxt in successors(node):
            visit(nxt, [*path, node])
        done.add(node)

    for source in exits:
        visit(source, [])
