"""``flinkai chroma start|stop|status``: the local Chroma server of ``flinkai.rag``.

``start`` prints the server URL on stdout once it answers its heartbeat
(``URL=$(flinkai chroma start)`` works); everything else goes to stderr. The server
keeps running in the background unless ``--foreground`` is given.
"""

from __future__ import annotations

import argparse
import signal
import sys

from flinkai.cli.local_server_cmd import Terminated, on_sigterm, run_foreground, stop_server
from flinkai.config import RagConfig, load_config
from flinkai.rag.server import ChromaServer

__all__ = ["EXIT_NOT_RUNNING", "register"]

#: ``status`` exit code when no server runs (the LSB convention for "not running").
EXIT_NOT_RUNNING = 3


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``chroma`` command group to the top-level parser."""
    p = sub.add_parser(
        "chroma",
        help="run a local Chroma vector store server",
        description="Run a real Chroma server on 127.0.0.1 with its own data dir.",
    )
    group = p.add_subparsers(dest="chroma_command", metavar="ACTION", required=True)

    start = group.add_parser("start", help="start the server; prints its URL")
    start.add_argument("--port", type=int, help="HTTP port; 0 picks a free one (default: rag.port)")
    _data_dir_arg(start)
    start.add_argument(
        "--foreground", action="store_true", help="stay attached; Ctrl-C or SIGTERM stops it"
    )
    start.set_defaults(handler=_start)

    stop = group.add_parser("stop", help="stop the server of the data dir")
    _data_dir_arg(stop)
    stop.add_argument(
        "--timeout", type=float, default=15.0, help="seconds before SIGKILL (default: 15)"
    )
    stop.set_defaults(handler=_stop)

    status = group.add_parser(
        "status",
        help="show whether the server runs",
        description=f"Exit status 0 when the server runs, {EXIT_NOT_RUNNING} when it does not.",
    )
    _data_dir_arg(status)
    status.set_defaults(handler=_status)


def _data_dir_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--data-dir",
        help="server data dir (default: rag.local_data_dir, else $FLINKAI_HOME/chroma)",
    )


def _server(args: argparse.Namespace, config: RagConfig) -> ChromaServer:
    return ChromaServer.from_config(
        config, port=getattr(args, "port", None), data_dir=args.data_dir or None
    )


def _start(args: argparse.Namespace) -> int:
    # From the first moment: a SIGTERM while starting must still stop the server we
    # launched (ChromaServer.start cleans up on any exception), never orphan it.
    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        config = load_config(args.config).rag
        server = _server(args, config)
        url = server.start()
        print(url, flush=True)
        st = server.status()
        print(f"pid {st.pid}, data dir {server.data_dir}, log {server.log_file}", file=sys.stderr)
        if server.port != config.port or server.host != config.host:
            print(
                f"note: rag.port is {config.port}; export FLINKAI_RAG_PORT={server.port} "
                "to use this server",
                file=sys.stderr,
            )
        if not args.foreground:
            print("running in the background; stop it with `flinkai chroma stop`", file=sys.stderr)
            return 0
        return run_foreground(server)
    except Terminated:
        print("flinkai: terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stop(args: argparse.Namespace) -> int:
    return stop_server(_server(args, load_config(args.config).rag), args.timeout)


def _status(args: argparse.Namespace) -> int:
    server = _server(args, load_config(args.config).rag)
    st = server.status()
    if not st.running:
        print(f"not running (data dir {st.data_dir})")
        return EXIT_NOT_RUNNING
    state = "healthy" if st.healthy else "not answering its heartbeat"
    print(f"running: {st.url} (pid {st.pid}, {state}, data dir {st.data_dir})")
    return 0
