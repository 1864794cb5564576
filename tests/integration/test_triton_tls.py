"""The Triton backend over gRPC with TLS, against a real Triton server (PyTriton) on loopback.

The server is started with a certificate from a test CA (made with ``cryptography``)
and requires a client certificate (mutual TLS). A client that trusts the CA and
presents its certificate embeds texts; one that trusts another CA, presents no
certificate or speaks plain text fails at load with an error naming the endpoint.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from cryptography.hazmat.primitives import serialization

from flinkai.backends.errors import BackendUnavailableError
from flinkai.backends.triton import TritonEmbeddingBackend
from flinkai.config import Config, EmbeddingConfig, TritonConfig
from flinkai.errors import SetupError
from flinkai.local.process import free_port
from flinkai.models.artifacts import ModelArtifacts
from flinkai.serve.triton_server import TritonServer, TritonServerOptions, ensure_server_venv
from tests.integration.canary import leaks
from tests.integration.certs import Pki, make_pki

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

TEXTS = ["a secure embedding request", "over gRPC with TLS", "to a real Triton server"]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("triton-pki"))


@pytest.fixture(scope="module")
def client_key(pki: Pki) -> Path:
    """The client key without its password: gRPC takes only unencrypted PEM keys."""
    key = serialization.load_pem_private_key(
        pki.client_key.read_bytes(), pki.client_key_password.encode()
    )
    path = pki.client_key.with_name("client-plain.key")
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def tls_server(
    model_artifacts: ModelArtifacts, pki: Pki, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TritonServer]:
    try:
        venv = ensure_server_venv(progress=print)
    except SetupError as e:
        pytest.fail(f"cannot build the Triton server venv: {e}", pytrace=False)
    options = TritonServerOptions(
        grpc_port=free_port(),
        http_port=free_port(),
        metrics_port=free_port(),
        threads=1,
        start_timeout_s=120.0,
        stop_timeout_s=15.0,
        run_dir=tmp_path_factory.mktemp("triton-tls"),
        venv=venv,
        tls_cert_file=str(pki.server_cert),
        tls_key_file=str(pki.server_key),
        tls_client_ca_file=str(pki.ca),
    )
    server = TritonServer(options, progress=print)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _config(server: TritonServer, **tls: object) -> Config:
    triton = TritonConfig(
        url=server.grpc_url,
        model_name=server.model_name,
        timeout_s=5.0,
        max_retries=0,
        circuit_failure_threshold=100,
        **tls,  # type: ignore[arg-type]
    )
    return Config(triton=triton, embedding=EmbeddingConfig(backend="triton", batch_size=8))


def _load_error(config: Config) -> str:
    backend = TritonEmbeddingBackend(config)
    try:
        with pytest.raises(BackendUnavailableError) as e:
            backend.load()
    finally:
        backend.close()
    return str(e.value)


def test_trusted_server_and_client_certificate_embed(
    tls_server: TritonServer, pki: Pki, client_key: Path
) -> None:
    config = _config(
        tls_server,
        tls=True,
        ca_file=str(pki.ca),
        cert_file=str(pki.client_cert),
        key_file=str(client_key),
    )
    backend = TritonEmbeddingBackend(config)
    try:
        backend.load()
        vectors = backend.infer_batch(TEXTS).outputs
    except BackendUnavailableError as e:
        # with the server's side of the story: a refused handshake is logged there
        pytest.fail(f"{e}\nserver log:\n{tls_server.log_tail()}", pytrace=False)
    finally:
        backend.close()
    assert vectors.shape == (len(TEXTS), 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-3)


def test_untrusted_ca_missing_client_certificate_and_plain_text_fail(
    tls_server: TritonServer, pki: Pki, client_key: Path
) -> None:
    url = tls_server.grpc_url
    untrusted = _load_error(
        _config(
            tls_server,
            tls=True,
            ca_file=str(pki.other_ca),
            cert_file=str(pki.client_cert),
            key_file=str(client_key),
        )
    )
    assert f"Triton at {url}" in untrusted and str(pki.other_ca) in untrusted
    no_cert = _load_error(_config(tls_server, tls=True, ca_file=str(pki.ca)))
    assert f"Triton at {url}" in no_cert and "mutual TLS" in no_cert
    plain = _load_error(_config(tls_server))
    assert f"Triton at {url}" in plain and "TLS only" in plain
    key_text = client_key.read_text().splitlines()[1]
    errors = {"untrusted": untrusted, "no cert": no_cert, "plain": plain}
    assert leaks(key_text, errors) == [] and leaks(pki.client_key_password, errors) == []
