"""``flinkai chroma start|stop|status``: the local Chroma server of ``flinkai.rag``.

``start`` prints the server URL on stdout once it answers its heartbeat
(``URL=$(flinkai chroma start)`` works); everything else goes to stderr. The server
keeps running in the background unless ``--foreground`` is given.
"""

from __future__ import annotations

import argparse
import signal
import sys

from flinkai.cli import local_server_cmd as lifecycle
from flinkai.cli.local_server_cmd import EXIT_NOT_RUNNING
from flinkai.config import RagConfig, load_config
from flinkai.rag.server import ChromaServer

__all__ = ["EXIT_NOT_RUNNING", "register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``chroma`` command group to the top-level parser."""
    lifecycle.add_lifecycle_group(
        sub,
        "chroma",
        group_help="run a local Chroma vector store server",
        description="Run a real Chroma server on 127.0.0.1 with its own data dir.",
        noun="server",
        start_help="start the server; prints its URL",
        port_help="HTTP port; 0 picks a free one (default: rag.port)",
        data_dir_help="server data dir (default: rag.local_data_dir, else $FLINKAI_HOME/chroma)",
        stop_timeout_s=15.0,
        handlers=(_start, _stop, _status),
    )


def _server(args: argparse.Namespace, config: RagConfig) -> ChromaServer:
    return ChromaServer.from_config(
        config, port=getattr(args, "port", None), data_dir=args.data_dir or None
    )


def _start(args: argparse.Namespace) -> int:
    # From the first moment: a SIGTERM while starting must still stop the server we
    # launched (ChromaServer.start cleans up on any exception), never orphan it.
    previous = signal.signal(signal.SIGTERM, lifecycle.on_sigterm)
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
        return lifecycle.run_foreground(server)
    except lifecycle.Terminated:
        print("flinkai: terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stop(args: argparse.Namespace) -> int:
    return lifecycle.stop_server(_server(args, load_config(args.config).rag), args.timeout)


def _status(args: argparse.Namespace) -> int:
    server = _server(args, load_config(args.config).rag)
    st = server.status()
    if not st.running:
        print(f"not running (data dir {st.data_dir})")
        return EXIT_NOT_RUNNING
    state = "healthy" if st.healthy else "not answering its heartbeat"
    print(f"running: {st.url} (pid {st.pid}, {state}, data dir {st.data_dir})")
    return 0
