"""``flinkai run``: execute a Flink SQL script (MiniCluster by default)."""

from __future__ import annotations

import argparse
from pathlib import Path

from flinkai.config import load_config
from flinkai.errors import ConfigError
from flinkai.runtime.environment import Target
from flinkai.runtime.plan import python_operators
from flinkai.runtime.runner import RunOptions, run_script

__all__ = ["parse_vars", "register"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run a Flink SQL script, e.g. jobs/embed_clicks.sql")
    p.add_argument("script", type=Path)
    p.add_argument("--jobmanager", metavar="HOST:PORT", help="remote cluster REST endpoint")
    p.add_argument(
        "--var",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="fill ${NAME} in the script (repeatable)",
    )
    p.add_argument(
        "--udfs",
        action="append",
        type=Path,
        default=[],
        help="folder with UDF modules (default: udfs/ beside jobs/, else the bundled ones)",
    )
    p.add_argument("--detach", action="store_true", help="submit and return without waiting")
    p.add_argument(
        "--explain",
        action="store_true",
        help="print Flink's plan and the Python operators it runs; submit nothing",
    )
    p.add_argument("--timeout-s", type=float, default=0.0, help="cancel the job after this long")
    p.set_defaults(handler=_run)


def parse_vars(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ConfigError(f"--var expects NAME=VALUE, got {pair!r}")
        out[name] = value
    return out


def _run(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    options = RunOptions(
        target=Target(args.jobmanager),
        variables=parse_vars(args.var),
        udf_dirs=tuple(args.udfs),
        wait=not args.detach,
        timeout_s=args.timeout_s,
        explain=args.explain,
    )
    if args.explain:
        result = run_script(args.script, config, options)
        print(result.plan or "(no INSERT or SELECT to plan)")
        operators = python_operators(result.plan or "")
        print(f"\nPython operators: {len(operators)}")
        for node in operators:
            print(f"  {node}")
        return 0
    where = args.jobmanager or "the embedded MiniCluster"
    print(f"running {args.script} on {where} ...", flush=True)
    result = run_script(
        args.script,
        config,
        options,
        on_submit=lambda job_id: print(f"submitted job {job_id}", flush=True),
    )
    print(f"job {result.job_id}: {result.status} after {result.duration_s:.1f} s")
    return 0
