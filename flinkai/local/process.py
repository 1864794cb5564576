"""Process supervision for every local service flinkai starts on this machine.

Kafka, the Flink cluster, Triton and the next ones all need the same few things:
a free loopback port, a child in its own session (so a Ctrl-C for the client does
not hit it and a kill can take its children along), a readiness wait that fails
fast when the child dies, the end of its log for error messages, and a stop that
signals only what this process started, by PID. They live here once.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

__all__ = [
    "LOOPBACK",
    "free_port",
    "group_members",
    "kill_stragglers",
    "pid_alive",
    "port_in_use",
    "read_int_file",
    "signal_group",
    "spawn",
    "stop_group",
    "tail",
    "tcp_open",
    "wait_until",
]

LOOPBACK = "127.0.0.1"
#: Colour codes some servers write to their logs; stripped from error messages.
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
#: Enough bytes for a few hundred log lines; a tail never needs the whole file.
_TAIL_BYTES = 64 * 1024


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port on ``host`` that nothing listens on right now.

    The OS picks it; another process may still take it before it is used, so bind
    soon after asking.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def port_in_use(port: int, host: str = LOOPBACK) -> bool:
    """Whether binding ``host:port`` would fail because something holds it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # The option JVMs and gRPC servers set, so sockets of a server that just
        # stopped (TIME_WAIT) do not count as "in use".
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def tcp_open(host: str, port: int, timeout_s: float = 0.5) -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def tail(path: Path, lines: int = 40) -> list[str]:
    """The last ``lines`` lines of a log file, colour codes removed; ``[]`` if absent."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - _TAIL_BYTES))
            text = f.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return []
    return [_ANSI.sub("", line) for line in text.splitlines()[-lines:]]


def read_int_file(path: Path) -> int | None:
    """An integer kept in a file (a pid or port file), or ``None`` if absent or garbled."""
    try:
        return int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie counts as gone; ours is reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        reaped, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        reaped = 0
    if reaped == pid:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    # Field 3 is the state; the command name before it is in parentheses and may hold spaces.
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def group_members(pgid: int) -> list[int]:
    """PIDs whose process group is ``pgid`` (Linux /proc).

    While any member lives, the kernel does not hand ``pgid`` out as a new PID, so a
    match is always a process of that group.
    """
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getpgid(int(entry)) == pgid:
                    out.append(int(entry))
            except (ProcessLookupError, PermissionError):
                continue  # exited while we looked
    return out


def signal_group(pid: int, sig: signal.Signals) -> None:
    """Signal the process group led by ``pid``, a child :func:`spawn` started.

    The group holds the service and the processes it spawned (a JVM's Python
    workers, Triton's backend stubs); a crashed host takes all of them down.
    """
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return
    except PermissionError:
        # Not our group after all (should not happen); fall back to the pid we own.
        os.kill(pid, sig)


def kill_stragglers(pgid: int) -> None:
    """SIGKILL what is left of a group whose leader already exited and was reaped.

    Children can outlive their leader; they stay members of its group. Signalled by
    PID, never by group id: the leader's PID may already be reused.
    """
    for pid in group_members(pgid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def spawn(
    argv: Sequence[str],
    out_file: Path,
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    append: bool = True,
) -> subprocess.Popen[bytes]:
    """Start a service in its own session, its stdout and stderr appended to ``out_file``
    (or written over it, with ``append=False``)."""
    out_file.parent.mkdir(parents=True, exist_ok=True)
    with out_file.open("ab" if append else "wb") as out:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            # Own session and process group: a Ctrl-C for the client does not hit the
            # service, and a stop can take the service's own children along.
            start_new_session=True,
        )


def stop_group(proc: subprocess.Popen[bytes], grace_s: float = 15.0) -> int | None:
    """SIGTERM a spawned service's group, SIGKILL it after ``grace_s``, reap, sweep.

    Returns:
        The leader's exit code, or ``None`` if it would not die even after SIGKILL.
    """
    if proc.poll() is None:
        signal_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            signal_group(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
    kill_stragglers(proc.pid)
    return proc.poll()


def wait_until(
    ready: Callable[[], bool],
    timeout_s: float,
    *,
    alive: Callable[[], bool] | None = None,
    poll_s: float = 0.2,
) -> bool:
    """Poll ``ready`` until it holds; ``False`` on timeout or as soon as ``alive`` fails.

    A service that dies while starting is reported at once, not after the timeout.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if alive is not None and not alive():
            return False
        if ready():
            return True
        time.sleep(poll_s)
    return False
