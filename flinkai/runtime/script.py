"""Parse a multi-statement Flink SQL script into statements that know their line.

The runner needs the line of each statement so every error can name
``file:line`` and the statement, instead of a wall of Java stack trace.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from flinkai.runtime.errors import ScriptError

__all__ = [
    "Kind",
    "OperatorSpec",
    "Script",
    "Statement",
    "parse_operator",
    "parse_script",
    "parse_set",
    "substitute",
]


class Kind(Enum):
    """What the runner does with a statement."""

    SET = "set"  # SET 'key' = 'value': goes into the table config
    RESET = "reset"
    INSERT = "insert"  # collected into one statement set: one job per script
    QUERY = "query"  # SELECT / SHOW / DESCRIBE / EXPLAIN: executed and printed
    DDL = "ddl"  # everything else (CREATE / DROP / ALTER / USE) runs at once
    #: CREATE [TEMPORARY] VIEW v AS APPLY OPERATOR 'module.fn' TO t [WITH (...)]:
    #: a DataStream operator (keyed state, timers) between two tables.
    OPERATOR = "operator"


@dataclass(frozen=True)
class Statement:
    """One SQL statement, without its trailing semicolon."""

    text: str
    line: int
    kind: Kind

    @property
    def summary(self) -> str:
        """The statement on one line, shortened for error messages."""
        flat = " ".join(self.text.split())
        return flat if len(flat) <= 120 else flat[:117] + "..."


@dataclass(frozen=True)
class Script:
    """A parsed script: its path (for messages) and its statements in order."""

    path: Path
    statements: tuple[Statement, ...]

    def where(self, stmt: Statement) -> str:
        return f"{self.path}:{stmt.line}"


_SET_RE = re.compile(r"^SET\s+'([^']+)'\s*=\s*'((?:[^']|'')*)'$", re.I | re.S)
_PLACEHOLDER_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_OPERATOR_RE = re.compile(
    r"^CREATE\s+(TEMPORARY\s+)?VIEW\s+(\w+)\s+AS\s+APPLY\s+OPERATOR\s+'([^']+)'\s+TO\s+(\w+)"
    r"(?:\s+WITH\s*\((.*)\))?$",
    re.I | re.S,
)
_OPERATOR_HEAD_RE = re.compile(r"^CREATE\s+(?:TEMPORARY\s+)?VIEW\s+\w+\s+AS\s+APPLY\s", re.I)
_OPTION_RE = re.compile(r"\s*'((?:[^']|'')*)'\s*=\s*'((?:[^']|'')*)'\s*(,|\Z)", re.S)
_BLOCK_START_RE = re.compile(r"^(EXECUTE\s+STATEMENT\s+SET\s+BEGIN|BEGIN\s+STATEMENT\s+SET)$", re.I)


def _split(text: str, path: Path) -> list[tuple[str, int]]:
    """Split on ``;`` outside quotes and comments; return (statement, first line)."""
    out: list[tuple[str, int]] = []
    buf: list[str] = []
    line = 1
    start_line: int | None = None
    i, n = 0, len(text)
    quote: str | None = None
    while i < n:
        ch = text[i]
        if quote is None and text.startswith("--", i):
            end = text.find("\n", i)
            i = n if end < 0 else end  # keep the newline for line counting
            continue
        if quote is None and text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise ScriptError(f"{path}:{line}: unterminated /* comment")
            line += text.count("\n", i, end)
            i = end + 2
            buf.append(" ")
            continue
        if quote is not None:
            if ch == quote:
                # '' and `` escape the quote character inside a literal
                if i + 1 < n and text[i + 1] == quote:
                    buf.append(ch * 2)
                    i += 2
                    continue
                quote = None
        elif ch in ("'", "`", '"'):
            quote = ch
        if ch == "\n":
            line += 1
        if quote is None and ch == ";":
            stmt = "".join(buf).strip()
            if stmt:
                out.append((stmt, start_line or line))
            buf, start_line = [], None
            i += 1
            continue
        if start_line is None and not ch.isspace():
            start_line = line
        buf.append(ch)
        i += 1
    if quote is not None:
        raise ScriptError(f"{path}:{line}: unterminated {quote} quote")
    tail = "".join(buf).strip()
    if tail:
        out.append((tail, start_line or line))
    return out


@dataclass(frozen=True)
class OperatorSpec:
    """A parsed ``APPLY OPERATOR`` statement.

    Attributes:
        view: Name of the view the operator's output is registered as.
        target: ``module.function`` of the operator factory.
        source: Name of the input table or view.
        options: The ``WITH`` options, quotes unescaped, in order.
    """

    view: str
    target: str
    source: str
    options: dict[str, str]


def _kind(text: str) -> Kind:
    if _OPERATOR_HEAD_RE.match(text):
        return Kind.OPERATOR
    first = text.split(None, 1)[0].upper()
    if first == "SET":
        return Kind.SET
    if first == "RESET":
        return Kind.RESET
    if first == "INSERT":
        return Kind.INSERT
    if first in ("SELECT", "WITH", "SHOW", "DESCRIBE", "DESC", "EXPLAIN", "VALUES"):
        return Kind.QUERY
    return Kind.DDL


def parse_script(text: str, path: str | Path = "<script>") -> Script:
    """Parse a script; ``EXECUTE STATEMENT SET BEGIN ... END`` blocks are flattened.

    Every INSERT of a script runs in one job anyway, so a block only needs to hold
    INSERTs; anything else inside it is an error.
    """
    path = Path(path)
    stmts: list[Statement] = []
    in_block: int | None = None
    for raw, line in _split(text, path):
        if _BLOCK_START_RE.match(" ".join(raw.split())):
            in_block = line
            continue
        # "EXECUTE STATEMENT SET BEGIN INSERT ..." arrives as one chunk: peel the header off.
        m = re.match(r"^(EXECUTE\s+STATEMENT\s+SET\s+BEGIN)\s+", raw, re.I)
        if m:
            in_block = line
            line += raw[: m.end()].count("\n")
            raw = raw[m.end() :]
        if raw.upper() == "END":
            if in_block is None:
                raise ScriptError(f"{path}:{line}: END without a statement set")
            in_block = None
            continue
        kind = _kind(raw)
        if in_block is not None and kind is not Kind.INSERT:
            raise ScriptError(
                f"{path}:{line}: only INSERT statements may appear in a statement set"
            )
        if kind is Kind.SET and not _SET_RE.match(raw):
            raise ScriptError(f"{path}:{line}: expected SET 'key' = 'value', got: {raw[:80]}")
        stmt = Statement(raw, line, kind)
        if kind is Kind.OPERATOR:
            try:
                parse_operator(stmt)
            except ScriptError as e:
                raise ScriptError(f"{path}:{line}: {e}") from e
        stmts.append(stmt)
    if in_block is not None:
        raise ScriptError(f"{path}:{in_block}: statement set is never closed with END")
    return Script(path, tuple(stmts))


def parse_set(stmt: Statement) -> tuple[str, str]:
    """Key and value of a SET statement (quotes unescaped)."""
    m = _SET_RE.match(stmt.text)
    if m is None:  # parse_script already validated this
        raise ScriptError(f"line {stmt.line}: malformed SET")
    return m.group(1), m.group(2).replace("''", "'")


def _parse_options(text: str) -> dict[str, str]:
    options: dict[str, str] = {}
    pos, n = 0, len(text)
    if not text.strip():
        return options
    while pos < n:
        m = _OPTION_RE.match(text, pos)
        if m is None:
            raise ScriptError(f"expected 'key' = 'value' options, got: {text[pos:][:80].strip()}")
        key, value = m.group(1).replace("''", "'"), m.group(2).replace("''", "'")
        if key in options:
            raise ScriptError(f"option {key!r} given twice")
        options[key] = value
        pos = m.end()
        if m.group(3) == "," and not text[pos:].strip():
            raise ScriptError("trailing comma in options")
    return options


def parse_operator(stmt: Statement) -> OperatorSpec:
    """View, factory, source and options of an ``APPLY OPERATOR`` statement.

    Args:
        stmt: A statement of kind :attr:`Kind.OPERATOR`.

    Returns:
        The parsed statement.

    Raises:
        ScriptError: If the statement does not match
            ``CREATE [TEMPORARY] VIEW v AS APPLY OPERATOR 'module.fn' TO t [WITH (...)]``
            or its options are malformed (the message has no location; callers add it).
    """
    m = _OPERATOR_RE.match(stmt.text.strip())
    if m is None:
        raise ScriptError(
            "expected CREATE [TEMPORARY] VIEW name AS APPLY OPERATOR 'module.function' "
            f"TO table [WITH ('key' = 'value', ...)], got: {stmt.summary}"
        )
    view, target, source, opts = m.group(2), m.group(3), m.group(4), m.group(5)
    if "." not in target.strip(".") or target.startswith(".") or target.endswith("."):
        raise ScriptError(f"operator must be 'module.function', got {target!r}")
    return OperatorSpec(view, target, source, _parse_options(opts or ""))


def substitute(
    text: str,
    lookup: Callable[[str], str | None] | Mapping[str, str],
    path: str | Path = "<script>",
) -> str:
    """Fill ``${NAME}`` / ``${NAME:-default}``; every unresolved name is reported at once."""
    get = lookup.get if isinstance(lookup, Mapping) else lookup
    missing: dict[str, int] = {}

    def repl(m: re.Match[str]) -> str:
        value = get(m.group(1))
        if value is None:
            if m.group(2) is not None:
                return m.group(2)
            missing.setdefault(m.group(1), text.count("\n", 0, m.start()) + 1)
            return m.group(0)
        return value

    result = _PLACEHOLDER_RE.sub(repl, text)
    if missing:
        where = ", ".join(f"${{{k}}} (line {v})" for k, v in missing.items())
        raise ScriptError(
            f"{path}: unresolved placeholder(s) {where}; set them with --var NAME=VALUE, "
            "an environment variable, or `vars:` in the config"
        )
    return result
