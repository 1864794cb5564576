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

from flinkai.cli.local_server_cmd import Terminated, on_sigterm, run_foreground, stop_server
from flinkai.config import KafkaConfig, load_config
from flinkai.kafka.broker import LocalKafka

__all__ = ["EXIT_NOT_RUNNING", "register"]

#: ``status`` exit code when no broker runs (the LSB convention for "not running").
EXIT_NOT_RUNNING = 3


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``kafka`` command group to the top-level parser."""
    p = sub.add_parser(
        "kafka",
        help="run a local single-node Kafka broker (KRaft)",
        description="Run a real single-node Kafka broker on 127.0.0.1 (KRaft mode).",
    )
    group = p.add_subparsers(dest="kafka_command", metavar="ACTION", required=True)

    start = group.add_parser("start", help="start the broker; prints its bootstrap address")
    start.add_argument(
        "--port", type=int, help="client port; 0 picks a free one (default: kafka.local_port)"
    )
    _data_dir_arg(start)
    start.add_argument(
        "--foreground",
        action="store_true",
        help="stay attached; Ctrl-C or SIGTERM stops the broker",
    )
    start.set_defaults(handler=_start)

    stop = group.add_parser("stop", help="stop the broker of the data dir")
    _data_dir_arg(stop)
    stop.add_argument(
        "--timeout", type=float, default=30.0, help="seconds before SIGKILL (default: 30)"
    )
    stop.set_defaults(handler=_stop)

    status = group.add_parser(
        "status",
        help="show whether the broker runs",
        description=f"Exit status 0 when the broker runs, {EXIT_NOT_RUNNING} when it does not.",
    )
    _data_dir_arg(status)
    status.set_defaults(handler=_status)


def _data_dir_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--data-dir",
        help="broker data dir (default: kafka.local_data_dir, else $FLINKAI_HOME/kafka)",
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
    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        return _start_broker(args)
    except Terminated:
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
    return run_foreground(kafka)


def _stop(args: argparse.Namespace) -> int:
    return stop_server(_broker(args, load_config(args.config).kafka), args.timeout)


def _status(args: argparse.Namespace) -> int:
    kafka = _broker(args, load_config(args.config).kafka)
    st = kafka.status()
    if not st.running:
        print(f"not running (data dir {st.data_dir})")
        return EXIT_NOT_RUNNING
    state = "listening" if st.listening else "not accepting connections yet"
    print(f"running: {st.bootstrap} (pid {st.pid}, {state}, data dir {st.data_dir})")
    return 0
