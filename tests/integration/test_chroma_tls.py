"""The Chroma client over HTTPS: a trusted CA works, an untrusted one fails clearly.

``chroma run`` serves plain HTTP only; deployments put TLS in front of it (an
ingress or a sidecar). The test does the same on loopback: a small TLS-terminating
forwarder, with certificates from ``certs.make_pki``, in front of the real server.
"""

from __future__ import annotations

import contextlib
import socket
import socketserver
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from flinkai.rag.chroma import ChromaIndex
from flinkai.rag.errors import IndexUnavailableError
from flinkai.rag.index import Chunk
from flinkai.rag.server import ChromaServer

from .certs import Pki, make_pki

pytestmark = pytest.mark.integration


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


class _TlsForwarder(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, context: ssl.SSLContext, upstream: tuple[str, int]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.context = context
        self.upstream = upstream
        self.handshakes = 0
        self.failed_handshakes = 0


class _Handler(socketserver.BaseRequestHandler):
    server: _TlsForwarder

    def handle(self) -> None:
        try:
            tls = self.server.context.wrap_socket(self.request, server_side=True)
        except (ssl.SSLError, OSError):
            self.server.failed_handshakes += 1
            return
        self.server.handshakes += 1
        with tls, socket.create_connection(self.server.upstream, timeout=30) as up:
            back = threading.Thread(target=_pipe, args=(up, tls), daemon=True)
            back.start()
            _pipe(tls, up)
            back.join(timeout=30)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("chroma-pki"))


@pytest.fixture(scope="module")
def forwarder(chroma_server: ChromaServer, pki: Pki) -> Iterator[_TlsForwarder]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki.server_cert, pki.server_key)
    server = _TlsForwarder(context, (chroma_server.host, chroma_server.port))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _unit(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(384).astype(np.float32)
    return v / np.linalg.norm(v)


def test_https_with_the_signing_ca(
    chroma_server: ChromaServer, forwarder: _TlsForwarder, pki: Pki, chroma_collection: str
) -> None:
    config = replace(
        chroma_server.config(),
        collection=chroma_collection,
        port=forwarder.server_address[1],
        tls=True,
        ca_file=str(pki.ca),
    )
    assert config.url.startswith("https://")
    before = forwarder.handshakes
    index = ChromaIndex(config)
    try:
        index.upsert_document("d1", 1, [Chunk("d1", "d1#0", "hello", _unit(1))])
        hits = index.query(_unit(1), 1)
    finally:
        index.drop()
        index.close()
    # Evidence the traffic went through TLS, then the outcome.
    assert forwarder.handshakes > before
    assert [h.chunk_id for h in hits] == ["d1#0"]


def test_untrusted_ca_fails_naming_the_url_and_the_ca(
    chroma_server: ChromaServer, forwarder: _TlsForwarder, pki: Pki, chroma_collection: str
) -> None:
    config = replace(
        chroma_server.config(),
        collection=chroma_collection,
        port=forwarder.server_address[1],
        tls=True,
        ca_file=str(pki.other_ca),
    )
    before = forwarder.failed_handshakes
    with pytest.raises(IndexUnavailableError) as info:
        ChromaIndex(config)
    # The forwarder's thread counts the refused handshake after the client gave up.
    deadline = time.monotonic() + 10
    while forwarder.failed_handshakes == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert forwarder.failed_handshakes > before
    message = str(info.value)
    assert config.url in message
    assert str(pki.other_ca) in message


def test_missing_ca_file_is_a_clear_error(chroma_server: ChromaServer, tmp_path: Path) -> None:
    missing = tmp_path / "nope.pem"
    config = replace(chroma_server.config(), tls=True, ca_file=str(missing))
    with pytest.raises(IndexUnavailableError, match=r"rag\.ca_file"):
        ChromaIndex(config)
