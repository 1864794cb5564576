"""``flinkai registry publish|list|rollback``: versions of a model in the model registry.

The registry root is ``--root``, else ``registry.root`` from the config, else
``$FLINKAI_HOME/registry``. Running UDFs that serve from the registry pick up a
publish or rollback between batches (see ``docs/model-registry.md``): at their next
look at ``CURRENT``, or at once when ``--notify`` announces it on the control topic.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from flinkai.config import load_config
from flinkai.kafka.admin import create_topics, produce
from flinkai.kafka.errors import KafkaError
from flinkai.models.control import ControlMessage, ControlTopic
from flinkai.models.registry import (
    CorruptVersionError,
    ModelRegistry,
    PublishedModel,
    VersionInfo,
    default_registry_root,
)

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``registry`` command group to the top-level parser."""
    p = sub.add_parser(
        "registry",
        help="publish, list and roll back model versions",
        description="A versioned model registry with atomic publish; UDFs hot-swap "
        "to the current version between batches.",
    )
    group = p.add_subparsers(dest="registry_command", metavar="ACTION", required=True)

    publish = group.add_parser(
        "publish",
        help="publish a model folder or file as a new version and make it current",
        description="Copy PATH (a model folder, or one file such as LoRA adapter weights) "
        "into the registry with checksums, then switch CURRENT to it atomically.",
    )
    publish.add_argument("name", metavar="NAME", help="model name in the registry")
    publish.add_argument("path", metavar="PATH", help="model folder or single file")
    publish.add_argument(
        "--version",
        help="version name (default: first 12 hex digits of a hash of the content)",
    )
    publish.add_argument(
        "--meta",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="metadata stored in the version's manifest (repeatable)",
    )
    publish.add_argument(
        "--no-check",
        action="store_true",
        help="publish even if the files do not match an exported model's manifest.json",
    )
    publish.add_argument(
        "--lock-timeout",
        type=float,
        metavar="SECONDS",
        help="give up if another publisher holds the lock this long (default: wait)",
    )
    _root_arg(publish)
    _notify_args(publish)
    publish.set_defaults(handler=_publish)

    listing = group.add_parser("list", help="list the versions of a model, oldest first")
    listing.add_argument("name", metavar="NAME", help="model name in the registry")
    listing.add_argument(
        "--verify",
        action="store_true",
        help="hash every file of every version; exit 1 if one is damaged",
    )
    listing.add_argument("--json", action="store_true", help="print JSON lines")
    _root_arg(listing)
    listing.set_defaults(handler=_list)

    rollback = group.add_parser(
        "rollback",
        help="make an earlier version current again",
        description="Check every file of VERSION, then switch CURRENT to it atomically.",
    )
    rollback.add_argument("name", metavar="NAME", help="model name in the registry")
    rollback.add_argument("version", metavar="VERSION", help="the version to serve")
    _root_arg(rollback)
    _notify_args(rollback)
    rollback.set_defaults(handler=_rollback)


def _root_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--root",
        metavar="DIR",
        help="registry root (default: registry.root from the config, else $FLINKAI_HOME/registry)",
    )


def _notify_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--notify",
        action="store_true",
        help="afterwards, send a reload message to the control topic, so running UDFs "
        "swap before their next batch instead of at their next registry.poll_interval_s",
    )
    parser.add_argument(
        "--topic",
        metavar="T",
        help="control topic for --notify (default: registry.control_topic from the config)",
    )
    parser.add_argument(
        "--bootstrap",
        metavar="B",
        help="Kafka for --notify (default: kafka.bootstrap_servers from the config)",
    )
    parser.add_argument(
        "--notify-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="give up notifying after this long (default: 10)",
    )


def _notify_target(args: argparse.Namespace) -> ControlTopic | str | None:
    """Where ``--notify`` sends, ``None`` without it, or an error line."""
    if not args.notify:
        if args.topic or args.bootstrap:
            return "--topic and --bootstrap need --notify"
        return None
    config = load_config(args.config)
    topic = args.topic or config.registry.control_topic
    if not topic:
        return "--notify needs a control topic: pass --topic or set registry.control_topic"
    return ControlTopic(args.bootstrap or config.kafka.bootstrap_servers, topic)


def _notify(target: ControlTopic, published: PublishedModel, timeout_s: float) -> int:
    message = ControlMessage(published.name, published.version, published.sequence)
    # kafka-python logs every failed connection attempt; the one line below says it all.
    kafka_log = logging.getLogger("kafka")
    level = kafka_log.level
    kafka_log.setLevel(logging.CRITICAL)
    try:
        # Idempotent; a listener that started before the topic existed picks it up.
        create_topics(target.bootstrap, [target.topic], timeout_s=timeout_s)
        produce(
            target.bootstrap,
            target.topic,
            [message.to_json()],
            key=published.name.encode(),
            timeout_s=timeout_s,
        )
    except KafkaError as e:
        print(
            f"flinkai: error: {published.model_version} is current, but the reload message "
            f"was not sent ({e}); running UDFs still swap at their next look at CURRENT",
            file=sys.stderr,
        )
        return 1
    finally:
        kafka_log.setLevel(level)
    _say(f"notified {target.topic} on {target.bootstrap}: reload {published.model_version}")
    return 0


def _registry(args: argparse.Namespace, lock_timeout_s: float | None = None) -> ModelRegistry:
    if args.root:
        root = Path(args.root).expanduser()
    else:
        section = getattr(load_config(args.config), "registry", None)
        configured = getattr(section, "root", "")
        root = Path(configured).expanduser() if configured else default_registry_root()
    return ModelRegistry(root, lock_timeout_s=lock_timeout_s)


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _publish(args: argparse.Namespace) -> int:
    metadata: dict[str, str] = {}
    for item in args.meta:
        key, sep, value = item.partition("=")
        if not sep or not key:
            print(f"flinkai: error: --meta {item!r} is not KEY=VALUE", file=sys.stderr)
            return 2
        metadata[key] = value
    target = _notify_target(args)
    if isinstance(target, str):
        print(f"flinkai: error: {target}", file=sys.stderr)
        return 2
    registry = _registry(args, args.lock_timeout)
    path = Path(args.path).expanduser()
    _say(f"publishing {path} as {args.name} into {registry.root}")
    started = time.perf_counter()
    try:
        published = registry.publish(
            args.name,
            path,
            version=args.version,
            metadata=metadata,
            check_artifacts=not args.no_check,
            progress=_say,
        )
    except OSError as e:
        print(f"flinkai: error: publish failed, CURRENT is unchanged: {e}", file=sys.stderr)
        return 1
    _say(f"done in {time.perf_counter() - started:.1f}s: {published.path}")
    print(published.model_version)
    return _notify(target, published, args.notify_timeout) if target else 0


def _list(args: argparse.Namespace) -> int:
    registry = _registry(args)
    try:
        rows = registry.list_versions(args.name, verify=args.verify)
    except OSError as e:
        print(f"flinkai: error: cannot list {args.name}: {e}", file=sys.stderr)
        return 1
    if not rows:
        print(f"flinkai: error: no versions of {args.name!r} in {registry.root}", file=sys.stderr)
        return 1
    if args.json:
        for row in rows:
            print(json.dumps(row.__dict__, sort_keys=True))
    else:
        _print_table(rows, verified=args.verify)
    return 1 if any(r.problem for r in rows) else 0


def _print_table(rows: list[VersionInfo], *, verified: bool) -> None:
    header = ("", "version", "seq", "created_at", "files", "size", "status")
    table = [
        (
            "*" if r.current else "",
            r.version,
            str(r.sequence) if r.sequence >= 0 else "?",
            r.created_at or "?",
            str(r.files),
            f"{r.size_bytes / 2**20:,.1f} MiB",
            r.problem or ("ok" if verified else "-"),
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in [header, *table]) for i in range(len(header) - 1)]
    for row in [header, *table]:
        cells = [
            cell.ljust(w) if i != 2 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=False))
        ]
        print("  ".join([*cells, row[-1]]).rstrip())


def _rollback(args: argparse.Namespace) -> int:
    target = _notify_target(args)
    if isinstance(target, str):
        print(f"flinkai: error: {target}", file=sys.stderr)
        return 2
    registry = _registry(args)
    try:
        published = registry.rollback(args.name, args.version, progress=_say)
    except CorruptVersionError as e:
        print(f"flinkai: error: {e}; not rolling back, CURRENT is unchanged", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"flinkai: error: rollback failed, CURRENT is unchanged: {e}", file=sys.stderr)
        return 1
    print(published.model_version)
    return _notify(target, published, args.notify_timeout) if target else 0
