"""``flinkai demo``: the Quick start's main path on the embedded default."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from flinkai.config import load_config
from flinkai.errors import SetupError

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="start local Kafka, produce sample clicks, run jobs/embed_clicks.sql, show results",
    )
    p.add_argument("--script", type=Path, help="job to run (default: jobs/embed_clicks.sql)")
    p.add_argument("--bootstrap", help="use this Kafka instead of starting a local broker")
    p.set_defaults(handler=_demo)


def _script(path: Path | None) -> Path:
    from flinkai.paths import repo_root

    if path is not None:
        return path
    root = repo_root()
    if root is None:
        raise SetupError("no jobs/ folder found; pass --script PATH")
    return root / "jobs" / "embed_clicks.sql"


def _demo(args: argparse.Namespace) -> int:
    from flinkai.demo import print_report, run_demo
    from flinkai.kafka.broker import LocalKafka
    from flinkai.local.process import free_port
    from flinkai.models.artifacts import load_artifacts

    config = load_config(args.config)
    load_artifacts(config.model)  # fail before starting anything when the model is missing
    script = _script(args.script)
    if args.bootstrap:
        report = run_demo(config, args.bootstrap, script)
    else:
        with tempfile.TemporaryDirectory(prefix="flinkai-demo-kafka-") as data_dir:
            print("starting a local Kafka broker ...", flush=True)
            with LocalKafka(port=free_port(), data_dir=Path(data_dir)) as kafka:
                print(f"Kafka is up at {kafka.bootstrap}; running {script} ...", flush=True)
                report = run_demo(config, kafka.bootstrap, script)
    print_report(report)
    return 0
