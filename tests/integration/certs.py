"""Throw-away TLS certificates for the test broker and Triton, made with ``cryptography``."""

from __future__ import annotations

import datetime as dt
import ipaddress
import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["Pki", "make_pki"]


@dataclass(frozen=True)
class Pki:
    """Files of one test PKI.

    Attributes:
        ca: PEM certificate of the CA that signed the server and client certificates.
        broker_pem: The server's PKCS#8 key and certificate, in one PEM file.
        other_ca: PEM certificate of an unrelated CA: trusting only it must fail.
        server_cert / server_key: The same server certificate and key, apart.
        client_cert / client_key: A client certificate (CN ``flinkai-client``) the CA
            signed, and its key encrypted with :attr:`client_key_password`.
        client_key_password: Password of ``client_key``.
    """

    ca: Path
    broker_pem: Path
    other_ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    client_key_password: str


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _ca(cn: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _leaf(
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    cn: str,
    usage: x509.ObjectIdentifier,
    names: list[x509.GeneralName],
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return key, builder.sign(ca_key, hashes.SHA256())


def _pbes1(plain_pem: bytes, password: str) -> bytes:
    """``plain_pem`` encrypted with PBES1 (SHA1 + 3DES), by the ``openssl`` command.

    The Kafka client's PEM loader on Java 17 decrypts PBES1 keys only, and
    ``cryptography`` writes PBES2 only; the password goes through a pipe, not argv.
    """
    try:
        done = subprocess.run(
            ["openssl", "pkcs8", "-topk8", "-v1", "PBE-SHA1-3DES", "-passout", "stdin"],
            input=password.encode() + b"\n" + plain_pem,
            capture_output=True,
            check=True,
            timeout=30,
        )
    except (OSError, subprocess.CalledProcessError) as e:
        raise RuntimeError(f"openssl could not encrypt the test client key: {e}") from e
    return done.stdout


def make_pki(folder: Path, host: str = "127.0.0.1") -> Pki:
    """A CA, a server certificate for ``host`` (and ``localhost``) and a client
    certificate it signed, and a stranger CA."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = _ca("flinkai test CA")
    _, other_cert = _ca("flinkai unrelated CA")
    names: list[x509.GeneralName] = [
        x509.IPAddress(ipaddress.ip_address(host)),
        x509.DNSName("localhost"),
    ]
    key, cert = _leaf(ca_key, ca_cert, host, ExtendedKeyUsageOID.SERVER_AUTH, names)
    client_key, client_cert = _leaf(
        ca_key, ca_cert, "flinkai-client", ExtendedKeyUsageOID.CLIENT_AUTH, []
    )
    pem = serialization.Encoding.PEM
    pkcs8 = serialization.PrivateFormat.PKCS8
    password = "client-key-" + secrets.token_hex(8)
    pki = Pki(
        ca=folder / "ca.pem",
        broker_pem=folder / "broker.pem",
        other_ca=folder / "other-ca.pem",
        server_cert=folder / "server.crt",
        server_key=folder / "server.key",
        client_cert=folder / "client.crt",
        client_key=folder / "client.key",
        client_key_password=password,
    )
    pki.ca.write_bytes(ca_cert.public_bytes(pem))
    pki.other_ca.write_bytes(other_cert.public_bytes(pem))
    key_pem = key.private_bytes(pem, pkcs8, serialization.NoEncryption())
    pki.broker_pem.write_bytes(key_pem + cert.public_bytes(pem))
    pki.server_key.write_bytes(key_pem)
    pki.server_cert.write_bytes(cert.public_bytes(pem))
    plain = client_key.private_bytes(pem, pkcs8, serialization.NoEncryption())
    pki.client_key.write_bytes(_pbes1(plain, password))
    pki.client_cert.write_bytes(client_cert.public_bytes(pem))
    for private in (pki.broker_pem, pki.server_key, pki.client_key):
        private.chmod(0o600)
    return pki
