"""Throw-away TLS certificates for the SASL_SSL test broker, made with ``cryptography``."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

__all__ = ["Pki", "make_pki"]


@dataclass(frozen=True)
class Pki:
    """Files of one test PKI.

    Attributes:
        ca: PEM certificate of the CA that signed the broker's certificate.
        broker_pem: The broker's PKCS#8 key and certificate, in one PEM file.
        other_ca: PEM certificate of an unrelated CA: trusting only it must fail.
    """

    ca: Path
    broker_pem: Path
    other_ca: Path


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


def make_pki(folder: Path, host: str = "127.0.0.1") -> Pki:
    """A CA, a broker certificate for ``host`` (and ``localhost``) it signed, and a stranger CA."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = _ca("flinkai test CA")
    _, other_cert = _ca("flinkai unrelated CA")
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(host))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address(host)), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    pki = Pki(folder / "ca.pem", folder / "broker.pem", folder / "other-ca.pem")
    pki.ca.write_bytes(ca_cert.public_bytes(pem))
    pki.other_ca.write_bytes(other_cert.public_bytes(pem))
    key_pem = key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    pki.broker_pem.write_bytes(key_pem + cert.public_bytes(pem))
    pki.broker_pem.chmod(0o600)
    return pki
