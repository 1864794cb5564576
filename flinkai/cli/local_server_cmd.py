"""What ``flinkai kafka`` and ``flinkai chroma`` share: the ``start|stop|status``
actions, SIGTERM during ``start``, the ``--foreground`` wait, and ``stop``.

Messages name the server by :attr:`LocalServer.what` ("the Kafka broker was stopped").
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable
from types import FrameType

from flinkai.local.server import LocalServer

__all__ = [
    "EXIT_NOT_RUNNING",
    "Terminated",
    "add_lifecycle_group",
    "on_sigterm",
    "run_foreground",
    "stop_server",
]

#: ``status`` exit code when no server runs (the LSB convention for "not running").
EXIT_NOT_RUNNING = 3

Handler = Callable[[argparse.Namespace], int]


class Terminated(BaseException):
    """SIGTERM arrived during ``flinkai <service> start``.

    A BaseException, like KeyboardInterrupt, so that no ``except Exception`` in a
    client library on the way swallows it.
    """


def on_sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM handler for ``start``: raise :class:`Terminated`, so the server is stopped."""
    raise Terminated


def run_foreground(server: LocalServer) -> int:
    """Wait for the server this process started; stop it on Ctrl-C or SIGTERM.

    Returns:
        0 when it was stopped (here or from elsewhere), 1 when it crashed.
    """
    try:
        code = server.wait()
    except (KeyboardInterrupt, Terminated):
        print(f"stopping the {server.what} ...", file=sys.stderr)
        server.stop()
        return 0
    # It exited on its own: stopped from elsewhere (code 0 or SIGTERM's 143) or crashed.
    server.stop()  # clears the pid and port files
    if code in (0, 128 + signal.SIGTERM, -signal.SIGTERM):
        print(f"the {server.what} was stopped", file=sys.stderr)
        return 0
    print(f"flinkai: error: the {server.what} exited with code {code}", file=sys.stderr)
    print(server.log_tail(), file=sys.stderr)
    return 1


def stop_server(server: LocalServer, timeout_s: float) -> int:
    """``flinkai <service> stop``: stop the data dir's server if one runs; always 0."""
    pid = server.running_pid()
    if server.stop(timeout_s=timeout_s):
        print(f"stopped the {server.what} (pid {pid}) of {server.data_dir}", file=sys.stderr)
    else:
        print(f"no {server.what} running for {server.data_dir}", file=sys.stderr)
    return 0


def add_lifecycle_group(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    *,
    group_help: str,
    description: str,
    noun: str,
    start_help: str,
    port_help: str,
    data_dir_help: str,
    stop_timeout_s: float,
    handlers: tuple[Handler, Handler, Handler],
) -> None:
    """A local server's command group ``flinkai NAME start|stop|status``.

    Args:
        sub: The top-level parser's subparsers.
        name: The group's name (``kafka``); its action lands in ``<name>_command``.
        group_help: The group's help line.
        description: The group's description.
        noun: What the server is called in help texts ("broker", "server").
        start_help: Help of ``start`` (what it prints).
        port_help: Help of ``start --port``.
        data_dir_help: Help of ``--data-dir`` (its default).
        stop_timeout_s: Default of ``stop --timeout``.
        handlers: The ``start``, ``stop`` and ``status`` handlers.
    """
    on_start, on_stop, on_status = handlers
    p = sub.add_parser(name, help=group_help, description=description)
    group = p.add_subparsers(dest=f"{name}_command", metavar="ACTION", required=True)
    start = group.add_parser("start", help=start_help)
    start.add_argument("--port", type=int, help=port_help)
    start.add_argument("--data-dir", help=data_dir_help)
    start.add_argument(
        "--foreground",
        action="store_true",
        help=f"stay attached; Ctrl-C or SIGTERM stops the {noun}",
    )
    start.set_defaults(handler=on_start)

    stop = group.add_parser("stop", help=f"stop the {noun} of the data dir")
    stop.add_argument("--data-dir", help=data_dir_help)
    stop.add_argument(
        "--timeout",
        type=float,
        default=stop_timeout_s,
        help=f"seconds before SIGKILL (default: {stop_timeout_s:g})",
    )
    stop.set_defaults(handler=on_stop)

    status = group.add_parser(
        "status",
        help=f"show whether the {noun} runs",
        description=f"Exit status 0 when the {noun} runs, {EXIT_NOT_RUNNING} when it does not.",
    )
    status.add_argument("--data-dir", help=data_dir_help)
    status.set_defaults(handler=on_status)
