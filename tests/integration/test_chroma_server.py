"""The local Chroma server: CLI lifecycle, a crash and restart on the same data dir,
and a server that fails to start."""

from __future__ import annotations

import os
import zlib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from flinkai.cli.main import main
from flinkai.errors import SetupError
from flinkai.local.process import pid_alive
from flinkai.rag.chroma import ChromaIndex
from flinkai.rag.index import Chunk, DeleteDocument, Outcome, UpsertDocument, chunk_id
from flinkai.rag.server import ChromaServer, heartbeat

pytestmark = pytest.mark.integration


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``flinkai chroma ARGS`` in this process: exit code, stdout, stderr."""
    capsys.readouterr()
    code = main(["chroma", *args])
    out, err = capsys.readouterr()
    return code, out, err


def _doc(doc_id: str, n: int, version: int) -> UpsertDocument:
    rng = np.random.default_rng(zlib.crc32(doc_id.encode()) + version)
    chunks = [
        Chunk(doc_id, chunk_id(doc_id, i), f"{doc_id} v{version} {i}", rng.standard_normal(32))
        for i in range(n)
    ]
    return UpsertDocument(doc_id, version, chunks)


def test_killed_server_restarts_with_its_data_and_versions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _cli(capsys, "start", "--data-dir", str(tmp_path), "--port", "0")
    assert code == 0, err
    url = out.strip()
    assert url.startswith("http://127.0.0.1:")
    port = int(url.rpartition(":")[2])
    server = ChromaServer(tmp_path, port=port)
    try:
        code, out, _ = _cli(capsys, "status", "--data-dir", str(tmp_path))
        assert code == 0 and url in out and "healthy" in out

        config = replace(server.config(), collection="restart-test")
        stream = [_doc("a", 3, 1), _doc("b", 2, 1), _doc("a", 1, 2), DeleteDocument("b", 5)]
        with ChromaIndex(config) as index:
            assert index.apply(stream) == [Outcome.APPLIED] * 4
            before = (index.chunk_ids(), index.documents(), index.versions())
            probe = np.ones(32, np.float32)
            hits_before = index.query(probe, 5)
        assert before == ({"a#0": 2}, {"a": 2}, {"a": 2, "b": 5})

        # A crash: SIGKILL, no shutdown. Evidence first: the pid is gone, no heartbeat.
        pid = server.kill()
        assert not pid_alive(pid)
        assert not heartbeat("127.0.0.1", port, timeout_s=1.0)

        restarted = ChromaServer(tmp_path, port=port)
        assert restarted.start() == url
        assert restarted.status().pid != pid
        with ChromaIndex(config) as index:  # a fresh client, as a restarted job has
            assert (index.chunk_ids(), index.documents(), index.versions()) == before
            assert index.query(probe, 5) == hits_before
            # The tombstone survived: the replayed stream changes nothing.
            assert index.apply(stream) == [Outcome.STALE] * 4
            assert index.documents() == {"a": 2}
    finally:
        code, _, err = _cli(capsys, "stop", "--data-dir", str(tmp_path))
        server.stop()
    assert code == 0 and "stopped the Chroma server" in err
    assert _cli(capsys, "status", "--data-dir", str(tmp_path))[0] == 3


def test_a_server_that_dies_while_starting_is_reported_with_its_log(tmp_path: Path) -> None:
    # A stand-in executable that fails as a broken install would, in colour.
    fake = tmp_path / "chroma"
    fake.write_text(
        "#!/bin/sh\nprintf '\\033[31mERROR\\033[0m cannot open persistence path %s\\n' \"$3\"\n"
        "exit 3\n"
    )
    fake.chmod(0o755)
    server = ChromaServer(tmp_path / "data", executable=str(fake), start_timeout_s=20)
    with pytest.raises(SetupError) as e:
        server.start()
    message = str(e.value)
    assert "exited with code 3" in message
    assert "ERROR cannot open persistence path" in message
    assert "\x1b" not in message
    assert not server.status().running
    assert not (tmp_path / "data" / "chroma.pid").exists()


def test_missing_executable_is_a_setup_error(tmp_path: Path) -> None:
    server = ChromaServer(tmp_path, executable=os.fspath(tmp_path / "no-such-chroma"))
    with pytest.raises(SetupError, match="not found"):
        server.start()
