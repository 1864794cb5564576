"""The plan runtime: the risk graph decides as LangGraph's invoke does; what it refuses."""

from __future__ import annotations

import itertools
import operator
import random
from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.types import RetryPolicy, Send

from flinkai.agents.data import Account
from flinkai.agents.errors import AgentsError, PlanError
from flinkai.agents.graph import DecisionState, RiskGraph
from flinkai.agents.plan import GraphPlan
from flinkai.errors import ConfigError
from flinkai.operators.agents import parse_options

VERSIONS = {"fraud": "f", "credit": "c"}


class _Scorer:
    """A fixed score, or the first feature when ``value`` is ``None``."""

    def __init__(self, value: float | None = None) -> None:
        self.value = value

    def score(self, features: Sequence[float]) -> float:
        return float(features[0]) if self.value is None else self.value


def _graph(fraud: float | None, credit: float | None, runtime: Any = "plan") -> RiskGraph:
    return RiskGraph(_Scorer(fraud), _Scorer(credit), 0.5, 0.3, VERSIONS, runtime)


PATHS = [
    # fraud, credit, account, spend, expected reasons
    (0.9, 0.1, True, 0.0, ("fraud_high",)),
    (0.1, 0.1, False, 0.0, ("fraud_ok", "unknown_account")),
    (0.1, 0.9, True, 0.0, ("fraud_ok", "credit_high_risk")),
    (0.1, 0.1, True, 999.0, ("fraud_ok", "credit_ok", "over_limit")),
    (0.1, 0.1, True, 0.0, ("fraud_ok", "credit_ok", "within_limit")),
]


@pytest.mark.parametrize(("fraud", "credit", "account", "spend", "reasons"), PATHS)
def test_plan_decides_as_langgraph_on_every_path(
    fraud: float, credit: float, account: bool, spend: float, reasons: tuple[str, ...]
) -> None:
    acc = Account("7", credit_limit=1000.0, features=(1.0,) * 23) if account else None
    call = ("t", "7", 1, 5.0, (0.0,) * 28, acc, spend)
    plan, pregel = _graph(fraud, credit), _graph(fraud, credit, "langgraph")
    got = plan.decide(*call)
    assert got == pregel.decide(*call)
    assert got.reasons == reasons and got.approved is (reasons[-1] == "within_limit")
    assert (plan.runtime, pregel.runtime) == ("plan", "langgraph")


def _random_state(rng: random.Random) -> DecisionState:
    known = rng.random() > 0.2
    return {
        "tx_id": f"t{rng.randrange(10**6)}", "account_id": "7", "ts_ms": rng.randrange(10**9),
        "amount": rng.uniform(0.0, 300.0),
        "features": tuple(rng.random() for _ in range(28)),
        "credit_limit": rng.choice([1000.0, 50.0]) if known else None,
        "credit_features": tuple(rng.random() for _ in range(23)) if known else None,
        "spend_24h": rng.uniform(0.0, 1200.0),
        "reasons": rng.choice([[], ["earlier"]]), "path": rng.choice([[], ["before"]]),
    }  # fmt: skip


def test_plan_equals_langgraph_invoke_on_random_states() -> None:
    rng = random.Random(24)
    graph = _graph(None, None)  # scores are the first feature: every branch is taken
    outcomes = set()
    for _ in range(300):
        state = _random_state(rng)
        want = graph.compiled.invoke(state)
        assert graph.plan.invoke(state) == want
        outcomes.add(want["reasons"][-1])
    assert outcomes == {"fraud_high", "unknown_account", "credit_high_risk", "over_limit",
                        "within_limit"}  # fmt: skip


def test_invoke_dispatches_on_the_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    state = _random_state(random.Random(1))

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("the other runtime ran")

    plan = _graph(0.1, 0.1)
    monkeypatch.setattr(plan.compiled, "invoke", refuse)
    assert plan.invoke(state)["path"][-1] == "decide"
    pregel = _graph(0.1, 0.1, "langgraph")
    monkeypatch.setattr(pregel.plan, "invoke", refuse)
    assert pregel.invoke(state)["path"][-1] == "decide"
    with pytest.raises(ValueError, match="unknown runtime 'pregel'"):
        _graph(0.1, 0.1, "pregel")


def test_runtime_option_parses_and_bad_values_are_refused() -> None:
    base = {"key": "account_id", "payload": "payload"}
    assert parse_options(base).runtime == "plan"
    assert parse_options(base | {"runtime": ""}).runtime == "plan"
    assert parse_options(base | {"runtime": "langgraph"}).runtime == "langgraph"
    with pytest.raises(ConfigError, match=r"'runtime' is 'pregel'; expected one of \['plan', 'langgraph'\]"):  # fmt: skip
        parse_options(base | {"runtime": "pregel"})


# -- what the plan refuses --------------------------------------------------------------


class S(TypedDict, total=False):
    a: int
    b: str


class Reduced(TypedDict, total=False):
    a: int
    log: Annotated[list[str], operator.add]


class Other(TypedDict, total=False):
    a: int


def _set(**update: Any) -> Callable[[Any], dict[str, Any]]:
    return lambda state: dict(update)


def _chain(
    *nodes: tuple[str, Callable[..., Any]], schema: Any = S
) -> StateGraph[Any, Any, Any, Any]:
    """``START -> nodes[0] -> ... -> END``."""
    builder: StateGraph[Any, Any, Any, Any] = StateGraph(schema)
    for name, fn in nodes:
        builder.add_node(name, fn)
    names = [START, *(n for n, _ in nodes), END]
    for src, dst in itertools.pairwise(names):
        builder.add_edge(src, dst)
    return builder


def test_a_plain_chain_runs_and_plan_error_is_an_agents_error() -> None:
    builder = _chain(("x", _set(a=1)), ("y", lambda s: {"b": f"a={s['a']}"}))
    assert GraphPlan(builder).invoke({}) == {"a": 1, "b": "a=1"}
    assert issubclass(PlanError, AgentsError)


def _reducer() -> StateGraph[Any, Any, Any, Any]:
    return _chain(("x", _set(log=["x"])), schema=Reduced)


def _two_edges() -> StateGraph[Any, Any, Any, Any]:
    builder = _chain(("x", _set(a=1)), ("y", _set(a=2)))
    builder.add_edge("x", END)
    return builder


def _edge_and_branch() -> StateGraph[Any, Any, Any, Any]:
    builder = _chain(("x", _set(a=1)), ("y", _set(a=2)))
    builder.add_conditional_edges("x", lambda s: "y", {"y": "y", "end": END})
    return builder


def _no_way_out() -> StateGraph[Any, Any, Any, Any]:
    builder: StateGraph[Any, Any, Any, Any] = StateGraph(S)
    builder.add_node("x", _set(a=1))
    builder.add_node("y", _set(a=2))
    builder.add_edge(START, "x")
    builder.add_edge("x", END)
    return builder  # y has no edge out


def _two_starts() -> StateGraph[Any, Any, Any, Any]:
    builder = _chain(("x", _set(a=1)))
    builder.add_node("y", _set(b="y"))
    builder.add_edge(START, "y")
    builder.add_edge("y", END)
    return builder


def _cycle() -> StateGraph[Any, Any, Any, Any]:
    builder: StateGraph[Any, Any, Any, Any] = StateGraph(S)
    builder.add_node("x", _set(a=1))
    builder.add_node("y", _set(a=2))
    builder.add_edge(START, "x")
    builder.add_edge("x", "y")
    builder.add_conditional_edges("y", lambda s: "done", {"again": "x", "done": END})
    return builder


def _join() -> StateGraph[Any, Any, Any, Any]:
    builder: StateGraph[Any, Any, Any, Any] = StateGraph(S)
    for name in ("x", "y", "z"):
        builder.add_node(name, _set(a=1))
    builder.add_edge(START, "x")
    builder.add_edge(["x", "y"], "z")
    builder.add_edge("z", END)
    return builder


def _one_node(**node_options: Any) -> Callable[[], StateGraph[Any, Any, Any, Any]]:
    """A builder of START -> x -> END, node ``x`` added with ``node_options``."""

    def build() -> StateGraph[Any, Any, Any, Any]:
        builder: StateGraph[Any, Any, Any, Any] = StateGraph(S)
        builder.add_node("x", _set(a=1), **node_options)
        builder.add_edge(START, "x")
        builder.add_edge("x", END)
        return builder

    return build


async def _async_node(state: S) -> dict[str, Any]:
    return {"a": 1}


def _takes_config(state: S, config: RunnableConfig) -> dict[str, Any]:
    return {"a": 1}


def _branch_without_ends() -> StateGraph[Any, Any, Any, Any]:
    builder: StateGraph[Any, Any, Any, Any] = StateGraph(S)
    builder.add_node("x", _set(a=1))
    builder.add_edge(START, "x")
    builder.add_conditional_edges("x", lambda s: END)
    return builder


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (_reducer, r"channel\(s\) \['log'\] have a reducer"),
        (_two_edges, "'x' needs exactly one way out"),
        (_edge_and_branch, "'x' needs exactly one way out"),
        (_no_way_out, "'y' needs exactly one way out"),
        (_two_starts, "'__start__' needs exactly one way out"),
        (_cycle, "cycle: x -> y -> x"),
        (_join, "join edges are not supported"),
        (_one_node(retry_policy=RetryPolicy()), r"node 'x' uses \['retry_policy'\]"),
        (_one_node(defer=True), r"node 'x' uses \['defer'\]"),
        (lambda: _chain(("x", _async_node)), "node 'x' is not a plain sync function"),
        (lambda: _chain(("x", _takes_config)), "node 'x' takes more than the state"),
        (_branch_without_ends, "has no declared destinations"),
        (_one_node(input_schema=Other), "node 'x' reads"),
        (lambda: _chain(("x", _set(a=1)), ("y", _set(a=2)), schema=dict), "must be a TypedDict"),
    ],
)
def test_graphs_the_plan_cannot_run_as_pregel_are_refused_when_built(
    build: Callable[[], StateGraph[Any, Any, Any, Any]], message: str
) -> None:
    with pytest.raises(PlanError, match=message):
        GraphPlan(build())


def test_a_graph_langgraph_refuses_is_a_plan_error() -> None:
    builder: StateGraph[Any, Any, Any, Any] = StateGraph(S)
    builder.add_node("x", _set(a=1))
    builder.add_edge("x", END)  # no entry point
    with pytest.raises(PlanError, match="LangGraph refuses the graph"):
        GraphPlan(builder)


def _routed(router: Callable[[Any], Any]) -> GraphPlan:
    builder: StateGraph[Any, Any, Any, Any] = StateGraph(S)
    builder.add_node("x", _set(a=1))
    builder.add_node("y", _set(b="y"))
    builder.add_edge(START, "x")
    builder.add_conditional_edges("x", router, {"y": "y", "end": END})
    builder.add_edge("y", END)
    return GraphPlan(builder)


def test_a_router_result_is_mapped_through_its_ends() -> None:
    assert _routed(lambda s: "y").invoke({}) == {"a": 1, "b": "y"}
    assert _routed(lambda s: "end").invoke({}) == {"a": 1}


@pytest.mark.parametrize(
    ("result", "message"),
    [
        (["y"], "router of 'x' fanned out"),
        (Send("y", {}), "router of 'x' fanned out"),
        ("z", r"router of 'x' returned 'z', not one of \['y', 'end'\]"),
        ({"y": 1}, "router of 'x' returned"),  # unhashable
    ],
)
def test_a_router_with_no_single_declared_destination_fails(result: Any, message: str) -> None:
    plan = _routed(lambda s: result)
    with pytest.raises(PlanError, match=message):
        plan.invoke({})


@pytest.mark.parametrize(
    ("node", "message"),
    [
        (lambda s: None, "node 'x' returned NoneType, not a dict"),
        (lambda s: [("a", 1)], "node 'x' returned list, not a dict"),
        (_set(a=1, zz=2), r"node 'x' returned key\(s\) \['zz'\] not in the state"),
    ],
)
def test_a_node_update_must_be_a_dict_of_state_keys(
    node: Callable[[Any], Any], message: str
) -> None:
    plan = GraphPlan(_chain(("x", node)))
    with pytest.raises(PlanError, match=message):
        plan.invoke({})


def test_unknown_keys_fail_where_langgraph_drops_them() -> None:
    builder = _chain(("x", _set(a=1, zz=2)))
    plan = GraphPlan(builder)
    # langgraph 1.2.24 drops unknown keys of an input or an update silently.
    assert builder.compile().invoke({"b": "in", "zz": 0}) == {"a": 1, "b": "in"}
    with pytest.raises(PlanError, match=r"input key\(s\) \['zz'\] are not in the state schema"):
        plan.invoke({"b": "in", "zz": 0})
    with pytest.raises(PlanError, match="not in the state"):
        plan.invoke({"b": "in"})


def test_nodes_get_a_read_only_view_of_the_state() -> None:
    def writes(state: Any) -> dict[str, Any]:
        state["a"] = 5
        return {}

    with pytest.raises(TypeError):
        GraphPlan(_chain(("x", writes))).invoke({"a": 1})
