"""Check, before a job is submitted, that its Kafka clients can connect and log in.

A Flink job with a wrong password or an untrusted certificate does not fail: its
Kafka clients retry and log, and the job sits in a restart loop. This check runs
the same steps one at a time (TCP, TLS handshake, SASL login), so the error says
which one failed, on which listener and with which mechanism, never the secret.
"""

from __future__ import annotations

import socket
import ssl
from pathlib import Path

from flinkai.config import KafkaSecurityConfig
from flinkai.kafka.errors import BrokerUnavailableError, KafkaAuthError
from flinkai.kafka.security import (
    ClientSecurity,
    describe_listener,
    key_password,
    security_section,
)

__all__ = ["check_access"]


#: How long the handshake check listens for the broker refusing the client certificate.
_ALERT_WAIT_S = 0.5


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.strip().rpartition(":")
    return host or "127.0.0.1", int(port)


def _tls_handshake(host: str, port: int, security: ClientSecurity, timeout_s: float) -> None:
    sec = security_section(security)
    context = ssl.create_default_context(cafile=sec.ca_file or None)
    if sec.cert_file:
        context.load_cert_chain(
            str(Path(sec.cert_file).expanduser()),
            str(Path(sec.key_file).expanduser()),
            password=key_password(security),
        )
    with (
        socket.create_connection((host, port), timeout=timeout_s) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        # Under TLS 1.3 the client's handshake ends before the server has checked the
        # client certificate; a refusal (none sent, or not trusted) arrives as an
        # alert on the first read. A broker sends nothing unasked, so silence is fine.
        tls.settimeout(_ALERT_WAIT_S)
        try:
            closed = tls.recv(1) == b""
        except TimeoutError:
            closed = False
        if closed:
            raise ConnectionResetError("the broker closed the connection after the handshake")


def check_access(bootstrap: str, security: ClientSecurity, timeout_s: float = 10.0) -> None:
    """Connect to the first reachable address of ``bootstrap`` as ``security`` says.

    ``security`` is the config section, or the value the runner resolved once (then
    no secret is read again here).

    Raises:
        BrokerUnavailableError: No address accepts TCP connections.
        KafkaAuthError: The certificate is not trusted (or does not match the host),
            or the broker rejected the SASL login.
    """
    from flinkai.kafka.admin import describe_cluster

    sec = security_section(security)
    listener = describe_listener(sec, bootstrap)
    reachable = []
    for address in bootstrap.split(","):
        try:
            host, port = _split(address)
            with socket.create_connection((host, port), timeout=timeout_s):
                reachable.append((host, port))
        except (OSError, ValueError):
            continue
    if not reachable:
        raise BrokerUnavailableError(f"Kafka is unreachable at {bootstrap}")
    host, port = reachable[0]
    if sec.tls:
        trust = f"ca_file {sec.ca_file}" if sec.ca_file else "the system trust store"
        try:
            _tls_handshake(host, port, security, timeout_s)
        except ssl.SSLCertVerificationError as e:
            raise KafkaAuthError(
                f"TLS handshake with the {listener} failed: its certificate is not trusted "
                f"by {trust} ({e.verify_message})"
            ) from None
        except ssl.SSLError as e:
            if "CERTIFICATE_REQUIRED" in str(e) or "ALERT" in str(e):
                mine = f"cert_file {sec.cert_file}" if sec.cert_file else "no cert_file"
                raise KafkaAuthError(
                    f"TLS handshake with the {listener} failed: the broker refused the "
                    f"client certificate ({mine}; it asks for mutual TLS): {e.reason}"
                ) from None
            raise KafkaAuthError(f"TLS handshake with the {listener} failed: {e}") from None
        except OSError as e:
            raise KafkaAuthError(f"TLS handshake with the {listener} failed: {e}") from None
    if not sec.sasl:
        return
    try:
        describe_cluster(f"{host}:{port}", timeout_s, security=security)
    except (BrokerUnavailableError, KafkaAuthError):
        # TCP and TLS worked, so the login is what failed (kafka-python reports it
        # only as a dropped connection): wrong user or password, or mechanism.
        raise KafkaAuthError(
            f"SASL login to the {listener} failed: the broker rejected user "
            f"{sec.username!r} with {sec.sasl_mechanism} (check the password in "
            f"{_secret_source(sec)} and the mechanism)"
        ) from None


def _secret_source(sec: KafkaSecurityConfig) -> str:
    if sec.password_file:
        return f"file {sec.password_file}"
    return f"${sec.password_env}"
