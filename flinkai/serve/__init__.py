"""Model servers flinkai can run locally: a real Triton Inference Server (via PyTriton).

The server runs in its own virtualenv and process; see
:mod:`flinkai.serve.triton_server`. Nothing here is imported by Flink workers.
"""

from flinkai.serve.triton_server import (
    ServerInfo,
    TritonServer,
    TritonServerOptions,
    ensure_server_venv,
    server_venv_dir,
    stop_detached,
)

__all__ = [
    "ServerInfo",
    "TritonServer",
    "TritonServerOptions",
    "ensure_server_venv",
    "server_venv_dir",
    "stop_detached",
]
