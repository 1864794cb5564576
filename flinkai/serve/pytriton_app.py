"""Serve an exported embedding model with PyTriton; runs INSIDE the Triton server venv.

This file is executed as a script by :class:`flinkai.serve.triton_server.TritonServer`
with the interpreter of ``cache_root()/venvs/triton``. That venv holds
``nvidia-pytriton`` (which needs numpy<2) and onnxruntime, but not flinkai, so this
module imports nothing from flinkai and only the standard library at module level.

The bound model speaks exactly the protocol of Triton's ``onnxruntime`` backend
serving ``<artifacts>/triton/<name>`` on a GPU cluster: tokenised ``int64`` inputs
``input_ids``, ``attention_mask``, ``token_type_ids`` of shape ``[batch, seq]``, and a
``float32`` output ``sentence_embedding`` of shape ``[batch, dim]``. Clients tokenise,
so one client works against both servers.

Usage::

    python pytriton_app.py --model-dir ~/.cache/flinkai/models/all-MiniLM-L6-v2 \\
        --workspace /tmp/ws --grpc-port 8001 --http-port 8000 --metrics-port 8002
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["main", "parse_args"]

log = logging.getLogger("flinkai.pytriton_app")

INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT_NAME = "sentence_embedding"
#: Printed once the model is bound and Triton serves; the launcher does not rely on it
#: (it polls the gRPC endpoint) but it makes the log readable.
READY_LINE = "flinkai-pytriton: serving"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", type=Path, required=True, help="exported artifact folder")
    p.add_argument("--model-name", default="", help="Triton model name (default: manifest name)")
    p.add_argument(
        "--workspace",
        type=Path,
        required=True,
        help="PyTriton workspace; must not exist (the launcher clears it)",
    )
    p.add_argument("--grpc-port", type=int, default=8001)
    p.add_argument("--http-port", type=int, default=8000)
    p.add_argument("--metrics-port", type=int, default=8002)
    p.add_argument("--address", default="127.0.0.1", help="interface Triton listens on")
    p.add_argument("--max-batch-size", type=int, default=64)
    p.add_argument(
        "--max-queue-delay-us",
        type=int,
        default=2000,
        help="how long a request may wait for others to join its batch",
    )
    p.add_argument(
        "--max-queue-size",
        type=int,
        default=0,
        help="requests the queue may hold; more are rejected as UNAVAILABLE (0: unbounded)",
    )
    p.add_argument(
        "--preferred-batch-sizes",
        default="16,32,64",
        help="comma-separated batch sizes the dynamic batcher aims for (as config.pbtxt)",
    )
    p.add_argument(
        "--threads", type=int, default=0, help="onnxruntime intra-op threads (0: one per core)"
    )
    p.add_argument("--log-verbose", type=int, default=0, help="Triton log verbosity")
    p.add_argument("--grpc-server-cert", default="", help="PEM certificate: serve gRPC over TLS")
    p.add_argument("--grpc-server-key", default="", help="PEM key of --grpc-server-cert")
    p.add_argument(
        "--grpc-root-cert", default="", help="PEM CA that client certificates must chain to (mTLS)"
    )
    return p.parse_args(argv)


def _grpc_tls(args: argparse.Namespace) -> dict[str, Any]:
    """PyTriton ``TritonConfig`` fields for gRPC over TLS (none without a server cert)."""
    if not args.grpc_server_cert:
        return {}
    tls: dict[str, Any] = {
        "grpc_use_ssl": True,
        "grpc_server_cert": args.grpc_server_cert,
        "grpc_server_key": args.grpc_server_key,
    }
    if args.grpc_root_cert:
        tls.update(grpc_use_ssl_mutual=True, grpc_root_cert=args.grpc_root_cert)
    return tls


def _fix_libpython() -> None:
    # The Python backend stub links libpython3.x.so and would otherwise load the
    # system copy, whose ABI differs from this interpreter's (model load then fails
    # with "'_thread.RLock' object has no attribute '_recursion_count'").
    # tritonserver inherits os.environ when PyTriton starts it, so setting it here suffices.
    libdir = sysconfig.get_config_var("LIBDIR")
    if libdir:
        current = os.environ.get("LD_LIBRARY_PATH", "")
        parts = [p for p in current.split(":") if p]
        if libdir not in parts:
            os.environ["LD_LIBRARY_PATH"] = ":".join([libdir, *parts])


def _read_manifest(model_dir: Path) -> dict[str, Any]:
    path = model_dir / "manifest.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise SystemExit(f"cannot read {path}: {e} (run `flinkai model export`)") from e
    if not isinstance(data, dict) or "name" not in data or "dim" not in data:
        raise SystemExit(f"{path}: not a flinkai model manifest")
    return data


def _make_infer(session: Any, dim: int) -> Callable[..., dict[str, Any]]:
    import numpy as np
    from pytriton.decorators import batch

    input_names = [i.name for i in session.get_inputs()]

    @batch
    def infer(**inputs: Any) -> dict[str, Any]:
        # @batch hands over the requests Triton merged, concatenated on axis 0; Triton
        # only merges requests whose shapes agree, so no re-padding is needed here.
        feed = {name: np.ascontiguousarray(inputs[name], dtype=np.int64) for name in input_names}
        (out,) = session.run([OUTPUT_NAME], feed)
        if out.ndim != 2 or out.shape[1] != dim:
            raise ValueError(f"model returned shape {out.shape}, expected [batch, {dim}]")
        return {OUTPUT_NAME: out.astype(np.float32, copy=False)}

    return infer


def main(argv: list[str] | None = None) -> int:
    """Bind the model and serve until SIGTERM/SIGINT."""
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stdout,
    )
    _fix_libpython()

    import numpy as np
    import onnxruntime as ort
    from pytriton.model_config import DynamicBatcher, ModelConfig, QueuePolicy, Tensor
    from pytriton.triton import Triton, TritonConfig

    manifest = _read_manifest(args.model_dir)
    name = args.model_name or str(manifest["name"])
    dim = int(manifest["dim"])
    model_path = args.model_dir / "model.onnx"
    preferred = [
        b
        for b in (int(x) for x in args.preferred_batch_sizes.split(",") if x.strip())
        if 1 <= b <= args.max_batch_size
    ]

    # A bounded queue sheds load at once instead of letting requests wait out their deadline.
    queue_policy = QueuePolicy(max_queue_size=args.max_queue_size) if args.max_queue_size else None

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = args.threads
    session = ort.InferenceSession(str(model_path), opts, providers=["CPUExecutionProvider"])
    log.info("loaded %s (%s@%s, dim %d)", model_path, name, manifest.get("version"), dim)

    config = TritonConfig(
        grpc_address=args.address,
        grpc_port=args.grpc_port,
        http_address=args.address,
        http_port=args.http_port,
        metrics_address=args.address,
        metrics_port=args.metrics_port,
        log_verbose=args.log_verbose,
        # No GPU metrics on CPU-only hosts: avoids NVML/DCGM noise at start.
        allow_gpu_metrics=False,
        exit_on_error=True,
        **_grpc_tls(args),
    )

    def _terminate(signum: int, _frame: object) -> None:
        # Leaving triton.serve() through an exception runs Triton's own shutdown.
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, _terminate)

    try:
        with Triton(config=config, workspace=args.workspace) as triton:
            triton.bind(
                model_name=name,
                infer_func=_make_infer(session, dim),
                inputs=[Tensor(name=n, dtype=np.int64, shape=(-1,)) for n in INPUT_NAMES],
                outputs=[Tensor(name=OUTPUT_NAME, dtype=np.float32, shape=(dim,))],
                config=ModelConfig(
                    max_batch_size=args.max_batch_size,
                    batcher=DynamicBatcher(
                        max_queue_delay_microseconds=args.max_queue_delay_us,
                        preferred_batch_size=preferred,
                        default_queue_policy=queue_policy,
                    ),
                ),
                strict=True,
            )
            print(f"{READY_LINE} {name} on grpc {args.address}:{args.grpc_port}", flush=True)
            triton.serve()
    except KeyboardInterrupt:
        log.info("stopping")
    return 0


if __name__ == "__main__":
    sys.exit(main())
