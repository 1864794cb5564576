"""Where the local Triton server keeps PyTriton's workspace (its Unix sockets live there)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from flinkai.errors import ConfigError
from flinkai.serve.triton_server import TritonServerOptions, workspace_dir

MODEL = "all-MiniLM-L6-v2"


def test_short_run_dir_keeps_its_own_workspace() -> None:
    run_dir = Path("/tmp/triton-8001")
    assert workspace_dir(run_dir, MODEL, 8001) == run_dir / "workspace"


def test_deep_run_dir_gets_a_short_workspace() -> None:
    # A pytest tmp_path this deep made PyTriton fail to bind its socket: the server
    # reported the model ready and then never answered an inference.
    run_dir = Path("/tmp/pytest-of-root/pytest-1/test_triton_killed_mid_job_the0/triton")
    workspace = workspace_dir(run_dir, MODEL, 8001)
    assert workspace == Path(tempfile.gettempdir()) / "flinkai-triton-8001"
    socket = workspace / f"{MODEL}_0_0-server.sock"
    assert len(os.fsencode(socket)) <= 107


def test_queue_size_must_not_be_negative() -> None:
    assert TritonServerOptions(max_queue_size=1).max_queue_size == 1
    with pytest.raises(ConfigError, match="max_queue_size"):
        TritonServerOptions(max_queue_size=-1)
