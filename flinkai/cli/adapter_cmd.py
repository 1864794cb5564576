"""``flinkai adapter publish|rollback|list``: LoRA versions on the adapters topic by hand.

The fine-tuning job publishes versions itself; these commands are for an adapter file
trained elsewhere, a rollback, and a look at what the workers serve. The topic and
brokers come from the config (``llm.adapters_topic``, ``kafka.bootstrap_servers``)
unless ``--topic`` / ``--bootstrap`` say otherwise. See docs/llm.md, "Adapters".
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from flinkai.config import Config, load_config
from flinkai.errors import ConfigError

if TYPE_CHECKING:
    from flinkai.llm.adapters import AdapterSet

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``adapter`` command group."""
    group = sub.add_parser(
        "adapter", help="publish, roll back and list LoRA adapter versions (docs/llm.md)"
    ).add_subparsers(dest="adapter_command", metavar="ACTION", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--topic", help="adapters topic (default: llm.adapters_topic)")
        p.add_argument("--bootstrap", help="Kafka brokers (default: kafka.bootstrap_servers)")

    publish = group.add_parser(
        "publish",
        help="check an .onnx_adapter file against the decoder and publish it (one transaction)",
    )
    publish.add_argument("file", help="the .onnx_adapter file (name and version are inside)")
    publish.add_argument("--model-dir", help="the serving export to check it against "
                         "(default: llm.dir / llm.model)")  # fmt: skip
    common(publish)
    publish.set_defaults(handler=_publish)

    rollback = group.add_parser("rollback", help="make workers serve an older held version")
    rollback.add_argument("name", help="adapter name")
    rollback.add_argument("--to", type=int, help="version (default: the one before the current)")
    common(rollback)
    rollback.set_defaults(handler=_rollback)

    listing = group.add_parser("list", help="the versions a worker started now would serve")
    listing.add_argument("--model-dir", help="the serving export (default: llm.dir / llm.model)")
    listing.add_argument("--timeout", type=float, default=30.0, help="seconds to read (30)")
    common(listing)
    listing.set_defaults(handler=_list)


def _where(args: argparse.Namespace) -> tuple[str, str, Config]:
    config = load_config(args.config)
    topic = args.topic or config.llm.adapters_topic
    if not topic:
        raise ConfigError("no adapters topic: pass --topic or set llm.adapters_topic")
    return args.bootstrap or config.kafka.bootstrap_servers, topic, config


def _adapter_set(args: argparse.Namespace, config: Config) -> AdapterSet:
    from flinkai.llm.adapters import AdapterSet
    from flinkai.llm.artifacts import default_llm_dir, load_llm_artifacts

    llm = config.llm
    folder = args.model_dir or llm.dir or default_llm_dir(llm.model)
    manifest = load_llm_artifacts(folder, verify_checksums=False).manifest
    if manifest.lora is None:
        raise ConfigError(f"{folder} takes no adapters: export-llm --lora-rank 8")
    return AdapterSet(manifest.lora, manifest.model_version, keep_versions=llm.adapter_versions)


def _publish(args: argparse.Namespace) -> int:
    from flinkai.kafka.adapter_feed import AdapterPublisher
    from flinkai.llm.lora import Adapter

    bootstrap, topic, config = _where(args)
    adapter = Adapter.decode(Path(args.file).read_bytes())
    # The same checks a worker makes: a file that every worker would refuse is not sent.
    _adapter_set(args, config).publish(adapter)
    publisher = AdapterPublisher(bootstrap, topic, transactional_id=f"flinkai-cli-{topic}")
    try:
        publisher.publish(adapter)
    finally:
        publisher.close()
    print(f"published {adapter.tag} ({adapter.nbytes} bytes of matrices) to {topic}")
    return 0


def _rollback(args: argparse.Namespace) -> int:
    from flinkai.kafka.adapter_feed import AdapterPublisher

    bootstrap, topic, _ = _where(args)
    publisher = AdapterPublisher(bootstrap, topic, transactional_id=f"flinkai-cli-{topic}")
    try:
        publisher.rollback(args.name, args.to)
    finally:
        publisher.close()
    target = f"version {args.to}" if args.to is not None else "the previous version"
    print(f"asked workers to roll {args.name} back to {target} on {topic}")
    return 0


def _list(args: argparse.Namespace) -> int:
    from flinkai.kafka.adapter_feed import AdapterFeed

    bootstrap, topic, config = _where(args)
    adapters = _adapter_set(args, config)
    feed = AdapterFeed(bootstrap, topic, adapters).start()
    try:
        if not feed.wait_ready(args.timeout):
            raise ConfigError(f"could not read {topic} to its end in {args.timeout:.0f} s")
    finally:
        feed.close()
    print(json.dumps({"current": adapters.names(), "refused": dict(adapters.rejected)}, indent=2))
    return 0
