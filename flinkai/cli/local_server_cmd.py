"""What ``flinkai kafka`` and ``flinkai chroma`` share: SIGTERM during ``start``, the
``--foreground`` wait, and ``stop``.

Messages name the server by :attr:`LocalServer.what` ("the Kafka broker was stopped").
"""

from __future__ import annotations

import signal
import sys
from types import FrameType

from flinkai.local.server import LocalServer

__all__ = ["Terminated", "on_sigterm", "run_foreground", "stop_server"]


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
