"""Turn a Java exception surfacing through Py4J into a few readable lines."""

from __future__ import annotations

import re

__all__ = ["summarize_java_error"]

_NOISE = (
    "java.util.concurrent.ExecutionException",
    "java.util.concurrent.CompletionException",
    "org.apache.flink.runtime.client.JobExecutionException: Job execution failed",
    "org.apache.flink.runtime.JobException: Recovery is suppressed",
)


def _causes_from_py4j(exc: BaseException) -> list[str] | None:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        java = getattr(cur, "java_exception", None)
        if java is not None:
            out = []
            j = java
            for _ in range(20):  # Java cause chains can be cyclic in theory
                if j is None:
                    break
                out.append(str(j.toString()))
                j = j.getCause()
            return out
        cur = cur.__cause__ or cur.__context__
    return None


def _causes_from_text(text: str) -> list[str]:
    lines = text.splitlines()
    out = [lines[0]] if lines else []
    out += [ln.split("Caused by:", 1)[1].strip() for ln in lines if ln.startswith("Caused by:")]
    return out


def _python_error(text: str) -> str | None:
    """The last line of a Python traceback embedded in a Java message (UDF failures)."""
    if "Traceback (most recent call last)" not in text:
        return None
    tail = text.split("Traceback (most recent call last)")[-1]
    candidates = [
        ln.strip()
        for ln in tail.splitlines()
        if re.match(r"^\s*[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b", ln)
    ]
    return candidates[-1] if candidates else None


def _short_class(line: str) -> str:
    """``org.apache.flink.table.api.ValidationException: m`` -> ``ValidationException: m``."""
    return re.sub(r"^(?:[a-z_][\w]*\.)+([A-Z]\w*(?:\$\w+)?)(?=:|$)", r"\1", line)


def summarize_java_error(exc: BaseException, max_lines: int = 3) -> str:
    """The top-level message and the root cause, without stack frames."""
    causes = _causes_from_py4j(exc) or _causes_from_text(str(exc))
    causes = [c for c in causes if c and not any(c.startswith(n) for n in _NOISE)]
    py = _python_error(str(exc)) or next(filter(None, (_python_error(c) for c in causes)), None)
    picked: list[str] = []
    for c in ([causes[0]] if causes else []) + causes[-(max_lines - 1) :]:
        first = _short_class(c.splitlines()[0].strip())
        message = first.split(": ", 1)[-1]
        # Java wrappers repeat their cause's message; keep each message once.
        if first and not any(message in p for p in picked):
            picked.append(first)
    if py:
        picked.append(f"Python error in a UDF: {py}")
    return "\n  ".join(picked) if picked else type(exc).__name__
