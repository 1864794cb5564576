"""``flinkai kafka start|stop|status``: the local single-node broker.

``start`` prints the bootstrap address on stdout once the broker serves requests
(``BOOTSTRAP=$(flinkai kafka start)`` works); everything else goes to stderr. The
broker keeps running in the background unless ``--foreground`` is given.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys

from flinkai.cli import local_server_cmd as lifecycle
from flinkai.cli.local_server_cmd import EXIT_NOT_RUNNING
from flinkai.config import KafkaConfig, load_config
from flinkai.kafka.broker import LocalKafka

__all__ = ["EXIT_NOT_RUNNING", "register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``kafka`` command group to the top-level parser."""
    lifecycle.add_lifecycle_group(
        sub,
        "kafka",
        group_help="run a local single-node Kafka broker (KRaft)",
        description="Run a real single-node Kafka broker on 127.0.0.1 (KRaft mode).",
        noun="broker",
        start_help="start the broker; prints its bootstrap address",
        port_help="client port; 0 picks a free one (default: kafka.local_port)",
        data_dir_help="broker data dir (default: kafka.local_data_dir, else $FLINKAI_HOME/kafka)",
        stop_timeout_s=30.0,
        handlers=(_start, _stop, _status),
    )


def _broker(args: argparse.Namespace, config: KafkaConfig) -> LocalKafka:
    return LocalKafka.from_config(
        config, port=getattr(args, "port", None), data_dir=args.data_dir or None
    )


def _quiet_client_logs(args: argparse.Namespace) -> None:
    # kafka-python logs every connection at INFO; our own messages say what matters.
    if not args.verbose:
        logging.getLogger("kafka").setLevel(logging.WARNING)


def _start(args: argparse.Namespace) -> int:
    # From the first moment: a SIGTERM during start-up must still stop the JVM we
    # launched (LocalKafka.start cleans up on any exception), never orphan it.
    previous = signal.signal(signal.SIGTERM, lifecycle.on_sigterm)
    try:
        return _start_broker(args)
    except lifecycle.Terminated:
        print("flinkai: terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, previous)


def _start_broker(args: argparse.Namespace) -> int:
    _quiet_client_logs(args)
    config = load_config(args.config).kafka
    kafka = _broker(args, config)
    bootstrap = kafka.start()
    pid = kafka.status().pid
    print(bootstrap, flush=True)
    print(f"pid {pid}, data dir {kafka.data_dir}, log {kafka.log_file}", file=sys.stderr)
    if config.bootstrap_servers != bootstrap:
        print(
            f"note: kafka.bootstrap_servers is {config.bootstrap_servers}; "
            f"export FLINKAI_KAFKA_BOOTSTRAP_SERVERS={bootstrap} to use this broker",
            file=sys.stderr,
        )
    if not args.foreground:
        print("running in the background; stop it with `flinkai kafka stop`", file=sys.stderr)
        return 0
    return lifecycle.run_foreground(kafka)


def _stop(args: argparse.Namespace) -> int:
    return lifecycle.stop_server(_broker(args, load_config(args.config).kafka), args.timeout)


def _status(args: argparse.Namespace) -> int:
    kafka = _broker(args, load_config(args.config).kafka)
    st = kafka.status()
    if not st.running:
        print(f"not running (data dir {st.data_dir})")
        return EXIT_NOT_RUNNING
    state = "listening" if st.listening else "not accepting connections yet"
    print(f"running: {st.bootstrap} (pid {st.pid}, {state}, data dir {st.data_dir})")
    return 0
