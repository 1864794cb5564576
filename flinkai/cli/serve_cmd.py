"""``flinkai serve triton|stop|status|venv``: a real local Triton Inference Server.

``triton`` prints the gRPC address (``host:port``, the value for ``triton.url``) on
stdout once the model is ready, so ``URL=$(flinkai serve triton)`` works; progress
goes to stderr. The server keeps running in the background unless ``--foreground``
is given. The first start builds the server virtualenv (about a minute).
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from flinkai.config import Config, load_config
from flinkai.errors import ConfigError
from flinkai.serve.triton_server import (
    SERVER_VENV_REQUIREMENTS,
    TritonServer,
    TritonServerOptions,
    ensure_server_venv,
    is_server_process,
    read_pid_file,
    stop_detached,
)

__all__ = ["EXIT_NOT_RUNNING", "register"]

#: ``status`` exit code when no server runs (the LSB convention for "not running").
EXIT_NOT_RUNNING = 3


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``serve`` command group to the top-level parser."""
    p = sub.add_parser(
        "serve",
        help="run a local Triton Inference Server for the exported model",
        description="Run a real Triton Inference Server (PyTriton, CPU) for the exported model.",
    )
    group = p.add_subparsers(dest="serve_command", metavar="ACTION", required=True)

    triton = group.add_parser("triton", help="start Triton; prints the gRPC address")
    _port_arg(triton)
    triton.add_argument("--http-port", type=int, help="HTTP port (default: gRPC port - 1)")
    triton.add_argument("--metrics-port", type=int, help="metrics port (default: gRPC port + 1)")
    triton.add_argument("--address", default="127.0.0.1", help="interface to listen on")
    triton.add_argument("--max-batch-size", type=int, default=64)
    triton.add_argument(
        "--max-queue-delay-us",
        type=int,
        default=2000,
        help="dynamic batching: how long a request waits for others",
    )
    triton.add_argument(
        "--threads", type=int, default=0, help="onnxruntime threads in the server (0: one per core)"
    )
    triton.add_argument("--start-timeout-s", type=float, default=180.0)
    triton.add_argument("--tls-cert", default="", help="PEM server certificate: gRPC over TLS")
    triton.add_argument("--tls-key", default="", help="PEM private key of --tls-cert")
    triton.add_argument(
        "--tls-client-ca", default="", help="require client certificates from this CA (mTLS)"
    )
    triton.add_argument(
        "--foreground",
        action="store_true",
        help="stay attached and show the server log; Ctrl-C stops it",
    )
    triton.set_defaults(handler=_start)

    stop = group.add_parser("stop", help="stop the server started for a port")
    _port_arg(stop)
    stop.add_argument("--timeout-s", type=float, default=30.0, help="seconds before SIGKILL")
    stop.set_defaults(handler=_stop)

    status = group.add_parser(
        "status",
        help="show whether a server runs",
        description=f"Exit status 0 when the server runs, {EXIT_NOT_RUNNING} when it does not.",
    )
    _port_arg(status)
    status.set_defaults(handler=_status)

    venv = group.add_parser("venv", help="build (or check) the server virtualenv")
    venv.add_argument("--rebuild", action="store_true", help="delete and build again")
    venv.set_defaults(handler=_venv)


def _port_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--port", type=int, help="gRPC port (default: the port of triton.url)")


def _grpc_port(args: argparse.Namespace, config: Config) -> int:
    if args.port is not None:
        return int(args.port)
    _, sep, port = config.triton.url.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"triton.url {config.triton.url!r} has no port; pass --port")
    return int(port)


def _err(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _start(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    port = _grpc_port(args, config)
    options = TritonServerOptions(
        model=config.model,
        grpc_port=port,
        http_port=args.http_port if args.http_port is not None else port - 1,
        metrics_port=args.metrics_port if args.metrics_port is not None else port + 1,
        address=args.address,
        max_batch_size=args.max_batch_size,
        max_queue_delay_us=args.max_queue_delay_us,
        threads=args.threads,
        start_timeout_s=args.start_timeout_s,
        tls_cert_file=args.tls_cert,
        tls_key_file=args.tls_key,
        tls_client_ca_file=args.tls_client_ca,
    )
    server = TritonServer(options, progress=_err)
    if not args.foreground:
        server.start()
        info = server.detach()
        _err(
            f"Triton runs in the background (pid {info.pid}); log: {info.log_path}; "
            f"stop it with: flinkai serve stop --port {port}"
        )
        print(server.grpc_url, flush=True)
        return 0

    def _on_sigterm(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        server.start()
        print(server.grpc_url, flush=True)
        _err("serving; Ctrl-C stops the server")
        code = _follow_log(server)
    except KeyboardInterrupt:
        _err("stopping Triton ...")
        server.stop()
        return 0
    server.stop()
    _err(f"Triton exited with code {code}")
    return 1


def _follow_log(server: TritonServer) -> int:
    """Copy new server log lines to stderr until the server exits; return its exit code."""
    with server.log_path.open("rb") as f:
        f.seek(0, 2)
        while True:
            chunk = f.read()
            if chunk:
                sys.stderr.write(chunk.decode("utf-8", errors="replace"))
                sys.stderr.flush()
            elif not server.is_running():
                return server.wait()
            else:
                time.sleep(0.5)


def _run_dir(args: argparse.Namespace) -> Path:
    config = load_config(args.config)
    return TritonServerOptions(grpc_port=_grpc_port(args, config)).resolved_run_dir()


def _stop(args: argparse.Namespace) -> int:
    info = stop_detached(_run_dir(args), timeout_s=args.timeout_s)
    if info is None:
        _err("no Triton server was running")
    else:
        _err(f"stopped Triton (pid {info.pid}) on {info.grpc_url}")
    return 0


def _status(args: argparse.Namespace) -> int:
    info = read_pid_file(_run_dir(args))
    if info is None or not is_server_process(info.pid):
        print("not running")
        return EXIT_NOT_RUNNING
    uptime = time.time() - info.started_at
    print(
        f"running: pid {info.pid}, model {info.model_name}, grpc {info.grpc_url}, "
        f"http port {info.http_port}, metrics port {info.metrics_port}, "
        f"up {uptime:.0f}s, log {info.log_path}"
    )
    return 0


def _venv(args: argparse.Namespace) -> int:
    venv = ensure_server_venv(rebuild=args.rebuild, progress=_err)
    _err(f"{len(SERVER_VENV_REQUIREMENTS)} pinned packages in {venv}")
    print(venv)
    return 0
