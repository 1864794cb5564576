"""Run a multi-statement Flink SQL script as one Flink job.

Statements run in order. ``SET`` goes into the table config, DDL runs at once, and
every ``INSERT`` is collected into one statement set, so a script with a result
sink and a dead-letter sink becomes a single job that reads its source once.

``CREATE [TEMPORARY] VIEW v AS APPLY OPERATOR 'module.fn' TO t [WITH (...)]`` calls
the operator factory ``fn(t_env, t_env.from_path(t), options) -> Table`` and
registers its result as the view ``v``. Factories build DataStream operators
(keyed state, timers) over ``to_data_stream`` / ``from_data_stream``; the INSERTs
that read the view include them, so the script still runs as one job.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import socket
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flinkai.config import Config
from flinkai.errors import FlinkAIError, SetupError
from flinkai.kafka.security import KafkaSecurity, secure_statement
from flinkai.runtime.environment import (
    BOUNDED_INPUT_KEY,
    Target,
    create_table_env,
    flink_settings,
)
from flinkai.runtime.errors import JobFailedError, ScriptError
from flinkai.runtime.guarantees import check_delivery, kafka_tables, scan_bound
from flinkai.runtime.jars import connector_jars
from flinkai.runtime.java_errors import summarize_java_error
from flinkai.runtime.script import (
    Kind,
    Script,
    Statement,
    parse_operator,
    parse_script,
    parse_set,
    substitute,
)
from flinkai.runtime.security import check_jvm_environment, check_kafka_logins, job_security
from flinkai.security import redact

__all__ = ["RunOptions", "RunResult", "default_udf_dirs", "load_script", "run_script"]

log = logging.getLogger(__name__)

_KAFKA_CONNECTOR_RE = re.compile(r"'connector'\s*=\s*'(upsert-)?kafka'", re.I)
_BOOTSTRAP_RE = re.compile(r"'properties\.bootstrap\.servers'\s*=\s*'([^']+)'", re.I)
_PY_FUNCTION_RE = re.compile(
    r"^CREATE\s+(?:TEMPORARY\s+)?(?:SYSTEM\s+)?FUNCTION\s+(?:IF\s+NOT\s+EXISTS\s+)?"
    r"(\S+)\s+AS\s+'([^']+)'\s+LANGUAGE\s+PYTHON",
    re.I | re.S,
)


@dataclass(frozen=True)
class RunOptions:
    """How to run a script."""

    target: Target = field(default_factory=Target)
    #: ``${NAME}`` values given on the command line; they win over env and config.
    variables: Mapping[str, str] = field(default_factory=dict)
    #: Folders with UDF modules, shipped to workers via ``python.files``.
    udf_dirs: tuple[Path, ...] = ()
    #: Block until the job ends (bounded sources) or is interrupted.
    wait: bool = True
    #: Give up waiting after this long; the job is cancelled. 0 waits forever.
    timeout_s: float = 0.0
    #: Check that every Kafka bootstrap address accepts TCP connections first.
    probe_kafka: bool = True
    #: Plan the job and return Flink's plan in ``RunResult.plan``; submit nothing.
    explain: bool = False


@dataclass(frozen=True)
class RunResult:
    """What happened to the job."""

    job_id: str | None
    status: str
    duration_s: float
    statements: int
    #: PyFlink ``JobClient`` of a detached (``wait=False``) run, to cancel or poll it.
    job_client: Any = field(default=None, repr=False, compare=False)
    #: Flink's plan of an ``explain`` run (abstract syntax tree, optimised and physical plans).
    plan: str | None = field(default=None, repr=False, compare=False)


def default_udf_dirs(script_path: Path) -> tuple[Path, ...]:
    """``udfs/`` next to the script's ``jobs/`` folder if there is one, else the bundled UDFs.

    The bundled folder (:mod:`flinkai.udfs`) ships in the wheel, so an installed
    flinkai runs ``jobs/*.sql`` from any folder. A user's own ``udfs/`` replaces it
    rather than joining it: Flink ships each folder under its name, and two folders
    named ``udfs`` would collide (pass ``--udfs`` to add a folder of another name).
    """
    from flinkai.paths import bundled_udf_dir

    beside = script_path.resolve().parent.parent / "udfs"
    return (beside,) if beside.is_dir() else (bundled_udf_dir(),)


def _transactional_id_prefix(path: Path, config: Config, variables: Mapping[str, str]) -> str:
    """Stable for one job (same script, same topics), different between jobs.

    Stability lets a restarted job find and abort its own lingering transactions;
    uniqueness keeps two jobs from fencing each other's producers.
    """
    import hashlib
    import json

    ident = json.dumps(
        [
            path.resolve().as_posix(),
            dict(variables),
            dict(config.vars),
            config.kafka.bootstrap_servers,
        ],
        sort_keys=True,
    )
    return f"flinkai-{path.stem}-{hashlib.sha256(ident.encode()).hexdigest()[:12]}"


def _lookup(
    config: Config, variables: Mapping[str, str], path: Path
) -> Callable[[str], str | None]:
    builtins = {
        "KAFKA_BOOTSTRAP": config.kafka.bootstrap_servers,
        "TRANSACTIONAL_ID_PREFIX": _transactional_id_prefix(path, config, variables),
    }

    def get(name: str) -> str | None:
        for source in (variables, os.environ, config.vars, builtins):
            if name in source:
                return str(source[name])
        return None

    return get


def load_script(path: Path, config: Config, variables: Mapping[str, str]) -> Script:
    """Read, fill placeholders and parse a script."""
    if not path.is_file():
        raise ScriptError(f"SQL script not found: {path}")
    text = substitute(path.read_text(encoding="utf-8"), _lookup(config, variables, path), path)
    return parse_script(text, path)


def _probe(address: str, timeout_s: float = 3.0) -> bool:
    host, _, port = address.strip().rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def _preflight(script: Script, options: RunOptions) -> list[Path]:
    """Checks that turn late, cryptic job failures into early, precise errors."""
    _check_udf_dir_names(script, options.udf_dirs)
    jars: list[Path] = []
    for stmt in script.statements:
        if _KAFKA_CONNECTOR_RE.search(stmt.text) and not jars:
            try:
                jars = connector_jars()
            except SetupError as e:
                raise ScriptError(f"{script.where(stmt)}: {e}") from e
        for servers in _BOOTSTRAP_RE.findall(stmt.text) if options.probe_kafka else ():
            dead = [a for a in servers.split(",") if not _probe(a)]
            if dead and len(dead) == len(servers.split(",")):
                raise ScriptError(
                    f"{script.where(stmt)}: Kafka is unreachable at {servers} "
                    "(start a local broker with `flinkai kafka start`, or set KAFKA_BOOTSTRAP)"
                )
        m = _PY_FUNCTION_RE.match(stmt.text)
        if m:
            _check_udf(script, stmt, m.group(1), m.group(2), options.udf_dirs)
        if stmt.kind is Kind.OPERATOR:
            _operator_factory(script, stmt, options.udf_dirs)
    return jars


def _check_udf_dir_names(script: Script, dirs: tuple[Path, ...]) -> None:
    # Flink ships each python.files folder as <basename>.zip in one cache directory; two
    # folders with one name fail the submit with FileAlreadyExistsException. (run_script
    # has already dropped repeats of one folder.)
    seen: dict[str, Path] = {}
    for d in dirs:
        name = d.resolve().name
        other = seen.setdefault(name, d)
        if other is not d:
            raise ScriptError(
                f"{script.path}: UDF folders {other} and {d} have the same name "
                f"{name!r}; Flink ships each folder under its name, so rename one"
            )


def _operator_factory(
    script: Script, stmt: Statement, dirs: tuple[Path, ...]
) -> Callable[..., Any]:
    """Import the factory an ``APPLY OPERATOR`` statement names; errors name file:line."""
    try:
        spec = parse_operator(stmt)
    except ScriptError as e:
        raise ScriptError(f"{script.where(stmt)}: {e}") from e
    module_name, _, attr = spec.target.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        searched = ", ".join(str(d) for d in dirs) or "(no UDF folder)"
        raise ScriptError(
            f"{script.where(stmt)}: operator {spec.target!r}: cannot import module "
            f"{module_name!r} (searched {searched} and installed packages): {e}"
        ) from e
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ScriptError(
            f"{script.where(stmt)}: operator {spec.target!r}: module {module_name!r} "
            f"has no callable {attr!r}"
        )
    return factory


def _apply_operator(script: Script, stmt: Statement, t_env: Any, dirs: tuple[Path, ...]) -> None:
    spec = parse_operator(stmt)  # validated by parse_script
    factory = _operator_factory(script, stmt, dirs)
    source = t_env.from_path(spec.source)
    try:
        table = factory(t_env, source, dict(spec.options))
    except (FlinkAIError, ValueError, KeyError, TypeError) as e:
        # Bad options are the usual cause: name the statement, not the factory's frame.
        raise ScriptError(
            f"{script.where(stmt)}: operator {spec.target!r}: {e}\n  in statement: {stmt.summary}"
        ) from e
    t_env.create_temporary_view(spec.view, table)


def _check_udf(
    script: Script, stmt: Statement, name: str, target: str, dirs: tuple[Path, ...]
) -> None:
    module_name, _, attr = target.rpartition(".")
    if not module_name:
        raise ScriptError(
            f"{script.where(stmt)}: function {name}: expected 'module.attribute', got {target!r}"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        searched = ", ".join(str(d) for d in dirs) or "(no UDF folder)"
        raise ScriptError(
            f"{script.where(stmt)}: function {name}: cannot import module {module_name!r} "
            f"(searched {searched}): {e}"
        ) from e
    if not hasattr(module, attr):
        raise ScriptError(
            f"{script.where(stmt)}: function {name}: module {module_name!r} has no {attr!r}"
        )
    # A function that decodes inside its bundle holds every checkpoint behind a burst.
    why = getattr(module, "IN_BUNDLE_DECODE", {}).get(attr)
    if why:
        log.warning("%s: function %s: %s", script.where(stmt), name, why)


def _check_guarantees(
    script: Script, settings: dict[str, str], options: RunOptions, security: KafkaSecurity
) -> None:
    broker_max: int | None = None
    sinks = [
        t
        for t in kafka_tables(script.statements)
        if t.options.get("sink.delivery-guarantee") == "exactly-once"
    ]
    if sinks and options.probe_kafka:
        from flinkai.kafka.admin import broker_config

        bootstrap = sinks[0].options.get("properties.bootstrap.servers", "")
        value = (
            broker_config(bootstrap, "transaction.max.timeout.ms", security=security)
            if bootstrap
            else None
        )
        broker_max = int(value) if value else None
    findings = check_delivery(script.statements, settings, broker_max)
    for f in findings:
        if f.level == "warning":
            log.warning("%s: %s", script.where(f.statement), f.message)
    errors = [f"{script.where(f.statement)}: {f.message}" for f in findings if f.level == "error"]
    if errors:
        raise ScriptError("delivery guarantee check failed:\n  " + "\n  ".join(errors))


def _fail(script: Script, stmt: Statement, exc: BaseException) -> ScriptError:
    return ScriptError(
        redact(f"{script.where(stmt)}: {summarize_java_error(exc)}\n  in statement: {stmt.summary}")
    )


def run_script(
    path: str | Path,
    config: Config,
    options: RunOptions | None = None,
    on_submit: Callable[[str], None] | None = None,
) -> RunResult:
    """Run a SQL script; raises :class:`ScriptError` or :class:`JobFailedError` with file:line."""
    options = options or RunOptions()
    path = Path(path)
    udf_dirs = options.udf_dirs or default_udf_dirs(path)
    # one entry per folder: Flink ships each under its name, and a repeat fails the submit
    firsts: dict[Path, Path] = {}
    for d in udf_dirs:
        firsts.setdefault(d.resolve(), d)
    udf_dirs = tuple(firsts.values())
    options = RunOptions(
        **{
            **options.__dict__,
            "udf_dirs": udf_dirs,
            # planning contacts no broker, so an explain run probes none
            "probe_kafka": options.probe_kafka and not options.explain,
        }
    )
    script = load_script(path, config, options.variables)
    if not script.statements:
        raise ScriptError(f"{path}: no statements")
    # The client instantiates Python UDFs while validating SQL, so it needs the UDF
    # folders on its own path too; ``python.files`` only reaches the workers.
    for d in reversed(udf_dirs):
        if str(d) not in sys.path:
            sys.path.insert(0, str(d))
    jars = _preflight(script, options)
    # resolved once, before the job is built; every step below gets this one value
    security = job_security(config)
    if options.probe_kafka:
        check_kafka_logins(script, security)
    if options.target.is_local and not options.explain:
        check_jvm_environment(security)
    settings = flink_settings(config, jars, list(udf_dirs), options.target)
    _check_guarantees(script, settings, options, security)
    started = time.monotonic()
    t_env = create_table_env(settings)
    if any(scan_bound(t) for t in kafka_tables(script.statements)):
        t_env.get_config().set(BOUNDED_INPUT_KEY, "true")
    statement_set = t_env.create_statement_set()
    inserts: list[Statement] = []
    plans: list[str] = []
    for stmt in script.statements:
        try:
            if stmt.kind is Kind.SET:
                key, value = parse_set(stmt)
                t_env.get_config().set(key, value)
            elif stmt.kind is Kind.RESET:
                continue  # options are per script run; nothing lingers to reset
            elif stmt.kind is Kind.INSERT:
                statement_set.add_insert_sql(stmt.text)
                inserts.append(stmt)
            elif stmt.kind is Kind.QUERY:
                if options.explain:
                    plans.append(t_env.explain_sql(stmt.text))
                else:
                    t_env.execute_sql(stmt.text).print()
            elif stmt.kind is Kind.OPERATOR:
                _apply_operator(script, stmt, t_env, udf_dirs)
            else:
                # security options join each Kafka table only here, never the script
                t_env.execute_sql(secure_statement(stmt.text, security.table_options))
        except FlinkAIError:
            raise
        except Exception as e:  # Py4J surfaces every Java error as some Exception subclass
            raise _fail(script, stmt, e) from e
    if options.explain:
        if inserts:
            try:
                plans.append(statement_set.explain())
            except Exception as e:  # the planner's errors arrive through Py4J
                raise _fail(script, inserts[0], e) from e
        return RunResult(
            None,
            "EXPLAINED",
            time.monotonic() - started,
            len(script.statements),
            plan=redact("\n".join(plans)),
        )
    if not inserts:
        return RunResult(None, "NO_INSERT", time.monotonic() - started, len(script.statements))
    try:
        result = statement_set.execute()
    except Exception as e:
        raise _fail(script, inserts[0], e) from e
    job_id = _job_id(result)
    if on_submit and job_id:
        on_submit(job_id)
    if not options.wait:
        return RunResult(
            job_id,
            "SUBMITTED",
            time.monotonic() - started,
            len(script.statements),
            result.get_job_client(),
        )
    status = _wait(result, script, options.timeout_s)
    return RunResult(job_id, status, time.monotonic() - started, len(script.statements))


def _job_id(result: Any) -> str | None:
    client = result.get_job_client()
    return str(client.get_job_id()) if client is not None else None


def _wait(result: Any, script: Script, timeout_s: float) -> str:
    try:
        if timeout_s > 0:
            result.wait(int(timeout_s * 1000))
        else:
            result.wait()
    except KeyboardInterrupt:
        _cancel(result)
        raise
    except Exception as e:
        text = str(e)
        if "TimeoutException" in text or "timeout" in type(e).__name__.lower():
            _cancel(result)
            raise JobFailedError(
                f"{script.path}: job did not finish within {timeout_s:.0f} s; cancelled"
            ) from e
        raise JobFailedError(
            redact(f"{script.path}: job failed:\n  {summarize_java_error(e)}")
        ) from e
    return "FINISHED"


def _cancel(result: Any) -> None:
    client = result.get_job_client()
    if client is not None:
        log.warning("cancelling job %s", client.get_job_id())
        client.cancel().result()
