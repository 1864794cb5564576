"""Property-based fuzz of every parse function and of the SQL script parser.

The promise under test: no input stops a job. Each parse function returns a result or
a reason for every input, never raises, and every string it hands back to Flink
converts to Arrow (a lone surrogate in a string column fails the task there, outside
any Python function). The script parser either parses or raises ``ScriptError``.

Each test counts the inputs it tried (``record_property("inputs", n)``; run with
``-rA -s`` to see the counts printed).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flinkai.functions.events import ClickEvent, Invalid, Reason, parse_click
from flinkai.functions.feature_events import FeatureEvent, parse_feature_event
from flinkai.runtime.errors import ScriptError
from flinkai.runtime.script import Kind, parse_operator, parse_script, parse_set, substitute
from flinkai.udfs import text_events

LIMIT = 256
EXAMPLES = 2000
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,  # shared 2-core machines: timing is not what is tested
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,  # CI reruns the same inputs; a failure reproduces
)
REASONS = {r.value for r in Reason}

#: Hand-picked worst cases: what made the fuzz fail before, and its neighbours.
WORST = [
    b"[" * 5000,
    b"{" * 5000,
    b'{"a":' * 5000,
    b"[" * 100_000 + b"]" * 100_000,
    b'{"user_id": 1, "click_text": "x", "event_time": ' + b"9" * 5000 + b"}",
    b'{"id": 1, "features": [' + b"9" * 4000 + b"]}",
    b'{"user_id": "\\ud800", "click_text": "x", "event_time": 1}',
    b'{"user_id": "u", "click_text": "\\udfff", "event_time": 1}',
    b'{"id": "\\ud800", "features": [1]}',
    b'{"user_id": "u", "click_text": "x", "event_time": NaN}',
    b'{"user_id": "u", "click_text": "x", "event_time": Infinity}',
    b'{"user_id": "u", "click_text": "x", "event_time": "0001-01-01T00:00:00+01:00"}',
    b'{"user_id": "u", "click_text": "x", "event_time": "9999-12-31T23:59:59-01:00"}',
    b'{"id": 1, "features": [NaN, Infinity, -Infinity, 1e999]}',
    b'{"stream_id": "s", "text": "x", "event_time": -1e300}',
    b"\xff\xfe\x00",
    b"\x00" * 100,
    b'"just a string"',
    b"",
]


def _json_values() -> st.SearchStrategy[Any]:
    scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text()
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
        max_leaves=20,
    )


def _event_like(fields: tuple[str, ...]) -> st.SearchStrategy[bytes]:
    """JSON objects with the right field names and values of any type or size."""
    value = (
        _json_values()
        | st.text(min_size=LIMIT - 2, max_size=LIMIT + 2)
        | st.sampled_from(["2026-12-01T08:00:00Z", "0001-01-01T00:00:00+14:00", "x"])
        | st.sampled_from([float("nan"), float("inf"), -float("inf"), 10**400])
    )
    obj = st.fixed_dictionaries({}, optional={f: value for f in fields})
    return obj.map(lambda o: json.dumps(o, allow_nan=True).encode("utf-8", "surrogatepass"))


def _valid_like(fields: tuple[str, ...]) -> st.SearchStrategy[bytes]:
    """Mostly well-formed events: an id, any text, a time; the parse should often pass."""
    ident, body, *when = fields
    values: dict[str, st.SearchStrategy[Any]] = {
        ident: st.integers() | st.text(max_size=20),
        body: st.lists(st.floats()) if body == "features" else st.text(max_size=LIMIT // 2),
    }
    for name in when:
        times = st.datetimes().map(lambda d: d.isoformat())
        values[name] = st.integers(-(10**15), 10**15) | times
    obj = st.fixed_dictionaries(values)
    return obj.map(lambda o: json.dumps(o).encode("utf-8", "surrogatepass"))


def _payloads(fields: tuple[str, ...]) -> st.SearchStrategy[bytes | None]:
    deep = st.integers(1, 20_000).map(lambda n: b"[" * n)
    return st.one_of(
        _valid_like(fields),
        st.none(),
        st.binary(max_size=300),
        st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass")),
        _json_values().map(lambda v: json.dumps(v).encode()),
        _event_like(fields),
        deep,
        st.sampled_from(WORST),
    )


def _arrow_safe(values: list[object]) -> None:
    """Strings as Flink's Arrow coder sends them; raises where the task would fail."""
    pa.array([v for v in values if isinstance(v, str)], type=pa.string())


class _Count:
    def __init__(self) -> None:
        self.n = 0
        self.outcomes: Counter[str] = Counter()

    def __call__(self, outcome: str) -> None:
        self.n += 1
        self.outcomes[outcome] += 1


@pytest.fixture
def tried(record_property: Callable[[str, object], None]) -> Iterator[_Count]:
    count = _Count()
    yield count
    record_property("inputs", count.n)
    print(f"\n  {count.n} inputs: {dict(count.outcomes)}")
    # every example ran (hypothesis may add a few replays on top)
    assert count.n >= EXAMPLES


def test_parse_click_never_raises(tried: _Count) -> None:
    @FUZZ
    @given(_payloads(("user_id", "click_text", "event_time")))
    def check(payload: bytes | None) -> None:
        got = parse_click(payload, LIMIT)
        if isinstance(got, ClickEvent):
            assert len(got.click_text.encode()) <= LIMIT and got.click_text.strip()
            _arrow_safe([got.user_id, got.click_text, got.event_time])
            tried("ok")
        else:
            assert isinstance(got, Invalid) and got.reason.value in REASONS
            _arrow_safe([got.detail])
            tried(got.reason.value)

    check()


def test_parse_feature_event_never_raises(tried: _Count) -> None:
    @FUZZ
    @given(_payloads(("id", "features")))
    def check(payload: bytes | None) -> None:
        got = parse_feature_event(payload)
        if isinstance(got, FeatureEvent):
            assert all(isinstance(v, float) for v in got.features)
            _arrow_safe([got.id])
            pa.array([got.features], type=pa.list_(pa.float32()))
            tried("ok")
        else:
            assert isinstance(got, Invalid) and got.reason.value in REASONS
            _arrow_safe([got.detail])
            tried(got.reason.value)

    check()


def test_parse_text_event_never_raises(tried: _Count) -> None:
    @FUZZ
    @given(st.lists(_payloads(("stream_id", "text", "event_time")), min_size=1, max_size=4))
    def check(payloads: list[bytes | None]) -> None:
        frame = text_events.parse_text_events(payloads, LIMIT)
        assert len(frame) == len(payloads)
        for row in frame.itertuples(index=False):
            ok = row.error_reason is None
            assert ok == (row.stream_id is not None and row.event_ms is not None)
            assert ok or row.error_reason in REASONS
            _arrow_safe([row.stream_id, row.text, row.error_detail])
            tried("ok" if ok else str(row.error_reason))

    check()


def test_worst_cases_get_a_reason() -> None:
    """The fuzz corpus's worst cases, by name: each a reason code, none an exception."""
    got = {p[:12]: parse_click(p, LIMIT) for p in WORST}
    deep = parse_click(b"[" * 5000, LIMIT)
    assert isinstance(deep, Invalid) and deep.reason is Reason.TOO_DEEPLY_NESTED
    surrogate = parse_click(WORST[6], LIMIT)
    assert isinstance(surrogate, Invalid) and "surrogate" in surrogate.detail
    huge = parse_feature_event(WORST[5])  # 4,000 digits: JSON takes it, float() cannot
    assert isinstance(huge, Invalid) and huge.reason is Reason.INVALID_FIELD
    assert "float range" in huge.detail
    early = parse_click(WORST[11], LIMIT)
    assert isinstance(early, Invalid) and early.reason is Reason.INVALID_FIELD
    assert all(isinstance(r, Invalid) for r in got.values())


def _sql_fragments() -> st.SearchStrategy[str]:
    pieces = st.sampled_from(
        [
            "SET 'a' = 'b';",
            "SET 'x' = ",
            "INSERT INTO t SELECT 1;",
            "CREATE TABLE t (x STRING) WITH ('k' = 'a;b');",
            "CREATE TEMPORARY VIEW v AS APPLY OPERATOR 'm.f' TO t WITH ('a' = '1');",
            "CREATE VIEW v AS APPLY OPERATOR",
            "EXECUTE STATEMENT SET BEGIN",
            "BEGIN STATEMENT SET;",
            "END;",
            "-- comment\n",
            "/* open comment",
            "*/",
            "'",
            "''",
            "`",
            "${NAME}",
            "${NAME:-default}",
            "${",
            ";",
            "\n",
        ]
    )
    return st.lists(pieces | st.text(max_size=20), max_size=12).map("".join)


def test_script_parser_parses_or_says_why(tried: _Count) -> None:
    @FUZZ
    @given(_sql_fragments())
    def check(text: str) -> None:
        try:
            filled = substitute(text, lambda name: "v" if name == "NAME" else None, "job.sql")
            script = parse_script(filled, "job.sql")
            for stmt in script.statements:
                if stmt.kind is Kind.SET:
                    parse_set(stmt)
                elif stmt.kind is Kind.OPERATOR:
                    parse_operator(stmt)
        except ScriptError as e:
            assert str(e)  # a reason, not an empty error
            tried("ScriptError")
        else:
            tried("parsed")

    check()
