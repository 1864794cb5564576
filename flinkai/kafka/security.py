"""Render ``kafka.security`` for the two kinds of client flinkai runs.

Flink's Kafka SQL connector takes client settings as ``properties.*`` table options;
kafka-python (the admin helpers, the preflight probe) takes keyword arguments. Both
are built from one :class:`~flinkai.config.KafkaSecurityConfig`, with the password
read through :func:`flinkai.security.read_secret` so it is redacted everywhere.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flinkai.config import KafkaSecurityConfig
from flinkai.errors import ConfigError
from flinkai.security import read_secret

__all__ = [
    "SHADED_PREFIX",
    "describe_listener",
    "flink_table_options",
    "key_password",
    "python_client_options",
    "secure_statement",
]

#: flink-sql-connector-kafka relocates the Kafka client under this package, so the
#: JAAS login module must be named with it (the plain class is not in the jar).
SHADED_PREFIX = "org.apache.flink.kafka.shaded."
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
#: Kafka's own config providers, relocated in the connector jar like the client.
_ENV_PROVIDER = "org.apache.kafka.common.config.provider.EnvVarConfigProvider"
_DIR_PROVIDER = "org.apache.kafka.common.config.provider.DirectoryConfigProvider"
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KAFKA_CONNECTOR_RE = re.compile(r"'connector'\s*=\s*'(?:upsert-)?kafka'", re.I)
_WITH_RE = re.compile(r"\bWITH\s*\(", re.I)


def _password(sec: KafkaSecurityConfig) -> str:
    return read_secret("kafka.security.password", sec.password_env, sec.password_file)


def key_password(sec: KafkaSecurityConfig) -> str | None:
    """Password of the encrypted client key, or ``None`` for an unencrypted one."""
    if not (sec.key_password_env or sec.key_password_file):
        return None
    return read_secret("kafka.security.key_password", sec.key_password_env, sec.key_password_file)


def _jaas_quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def describe_listener(sec: KafkaSecurityConfig, bootstrap: str) -> str:
    """``SASL_SSL listener at host:port (SCRAM-SHA-512, user alice)``: for error messages."""
    text = f"{sec.protocol} listener at {bootstrap}"
    if sec.sasl:
        text += f" ({sec.sasl_mechanism}, user {sec.username})"
    return text


class _References:
    """Kafka config-provider placeholders for secrets, and the provider options they need.

    The Kafka client inside the Flink connector resolves ``${env:NAME}`` (environment
    variable) and ``${dir:/folder:file}`` (whole file) when it is created, on the
    JobManager or TaskManager that runs it. Table options, and so the compiled plan
    and the job graph, carry only these placeholders. Each provider is limited to the
    variables and folders named here.
    """

    def __init__(self, shaded_prefix: str) -> None:
        self._prefix = shaded_prefix
        self._env: list[str] = []
        self._dirs: list[str] = []

    def secret(self, what: str, env_name: str, file_path: str) -> str:
        """Placeholder for the secret in ``file_path``, else in ``$env_name``.

        The secret is read here too, so a missing variable or file fails on the
        client, and its value is registered for redaction.

        Raises:
            ConfigError: The reference does not resolve here, or cannot be written
                as a placeholder (a ``:`` or brace in the path, an odd variable name),
                or the file ends with a line break, which the Kafka client would keep.
        """
        read_secret(what, env_name, file_path)
        if file_path:
            path = Path(file_path).expanduser().absolute()
            if path.read_bytes().endswith((b"\n", b"\r")):
                raise ConfigError(
                    f"{what}: secret file {path} ends with a line break; the Kafka client "
                    "reads it verbatim (write it with printf '%s', or "
                    "kubectl create secret --from-literal)"
                )
            return self.file(what, path)
        if not _ENV_NAME_RE.fullmatch(env_name):
            raise ConfigError(f"{what}: {env_name!r} is not an environment variable name")
        if env_name not in self._env:
            self._env.append(env_name)
        return f"${{env:{env_name}}}"

    def file(self, what: str, path: Path) -> str:
        """Placeholder for the whole content of ``path`` (a PEM key, say)."""
        folder, name = str(path.parent), path.name
        if any(c in folder + name for c in ":{}"):
            raise ConfigError(
                f"{what}: {path} holds ':', '{{' or '}}', which a Kafka config "
                "placeholder cannot carry; move the file"
            )
        if folder not in self._dirs:
            self._dirs.append(folder)
        return f"${{dir:{folder}:{name}}}"

    def options(self) -> dict[str, str]:
        """``properties.config.providers*`` options for the placeholders made so far."""
        out: dict[str, str] = {}
        names = []
        if self._env:
            names.append("env")
            out["properties.config.providers.env.class"] = self._prefix + _ENV_PROVIDER
            alternatives = "|".join(self._env)
            out["properties.config.providers.env.param.allowlist.pattern"] = f"^({alternatives})$"
        if self._dirs:
            names.append("dir")
            out["properties.config.providers.dir.class"] = self._prefix + _DIR_PROVIDER
            out["properties.config.providers.dir.param.allowed.paths"] = ",".join(self._dirs)
        if names:
            out["properties.config.providers"] = ",".join(names)
        return out


def flink_table_options(
    sec: KafkaSecurityConfig, shaded_prefix: str = SHADED_PREFIX
) -> dict[str, str]:
    """``properties.*`` options of a Flink Kafka table; empty for ``PLAINTEXT``.

    Secrets (the SASL password, the client key and its password) appear only as
    Kafka config-provider placeholders; see :class:`_References`. File paths and
    public certificates are plain options.

    Raises:
        ConfigError: A secret reference does not resolve on this machine.
    """
    if sec.protocol == "PLAINTEXT":
        return {}
    refs = _References(shaded_prefix)
    out: dict[str, str] = {"properties.security.protocol": sec.protocol}
    if sec.sasl:
        module = shaded_prefix + _LOGIN_MODULES[sec.sasl_mechanism]
        password = refs.secret("kafka.security.password", sec.password_env, sec.password_file)
        if any(c in _password(sec) for c in '"\\'):
            # The client puts the resolved value inside the quotes of the JAAS line
            # unescaped, so these two characters would break (or alter) it.
            raise ConfigError(
                "kafka.security.password holds a double quote or a backslash, which "
                "a Kafka client cannot take by reference in sasl.jaas.config"
            )
        out["properties.sasl.mechanism"] = sec.sasl_mechanism
        out["properties.sasl.jaas.config"] = (
            f'{module} required username="{_jaas_quote(sec.username)}" password="{password}";'
        )
    if sec.tls and sec.ca_file:
        out["properties.ssl.truststore.type"] = "PEM"
        out["properties.ssl.truststore.location"] = str(Path(sec.ca_file).expanduser())
    if sec.tls and sec.cert_file:
        # Kafka's PEM key store takes key and chain inline (or together in one file);
        # inline placeholders keep them in their own files until the client reads them.
        key = _existing(sec.key_file, "kafka.security.key_file")
        if (sec.key_password_env or sec.key_password_file) and _is_pbes2(key):
            raise ConfigError(
                f"kafka.security.key_file {key} is encrypted with PBES2 (openssl's default), "
                "which the Kafka client's PEM loader cannot decrypt on Java 17 (\"PBES2 "
                'SecretKeyFactory not available"); re-encrypt it with PBES1: openssl pkcs8 '
                "-topk8 -v1 PBE-SHA1-3DES -in plain.key -out client.key"
            )
        chain = _existing(sec.cert_file, "kafka.security.cert_file")
        out["properties.ssl.keystore.type"] = "PEM"
        out["properties.ssl.keystore.certificate.chain"] = refs.file(
            "kafka.security.cert_file", chain
        )
        out["properties.ssl.keystore.key"] = refs.file("kafka.security.key_file", key)
        if sec.key_password_env or sec.key_password_file:
            out["properties.ssl.key.password"] = refs.secret(
                "kafka.security.key_password", sec.key_password_env, sec.key_password_file
            )
    out.update(refs.options())
    return out


#: DER of the PBES2 object identifier (1.2.840.113549.1.5.13).
_PBES2_OID = bytes.fromhex("06092a864886f70d01050d")


def _is_pbes2(key_file: Path) -> bool:
    """Whether the PEM key in ``key_file`` is an encrypted PKCS#8 key using PBES2."""
    text = key_file.read_text(encoding="ascii", errors="replace")
    begin, end = "-----BEGIN ENCRYPTED PRIVATE KEY-----", "-----END ENCRYPTED PRIVATE KEY-----"
    if begin not in text or end not in text:
        return False
    body = text.split(begin, 1)[1].split(end, 1)[0]
    try:
        der = base64.b64decode("".join(body.split()))
    except ValueError:
        return False
    # The scheme's identifier opens the AlgorithmIdentifier at the start of the DER.
    return _PBES2_OID in der[:32]


def _existing(path: str, what: str) -> Path:
    """``path`` made absolute, once it is known to be a readable file here."""
    full = Path(path).expanduser().absolute()
    try:
        with full.open("rb"):
            pass
    except OSError as e:
        raise ConfigError(f"{what}: cannot read {full}: {e.strerror}") from None
    return full


def python_client_options(sec: KafkaSecurityConfig) -> dict[str, Any]:
    """kafka-python keyword arguments (``security_protocol``, ``sasl_*``, ``ssl_*``)."""
    if sec.protocol == "PLAINTEXT":
        return {}
    out: dict[str, Any] = {"security_protocol": sec.protocol}
    if sec.sasl:
        out["sasl_mechanism"] = sec.sasl_mechanism
        out["sasl_plain_username"] = sec.username
        out["sasl_plain_password"] = _password(sec)
    if sec.tls:
        if sec.ca_file:
            out["ssl_cafile"] = str(Path(sec.ca_file).expanduser())
        if sec.cert_file:
            out["ssl_certfile"] = str(Path(sec.cert_file).expanduser())
            out["ssl_keyfile"] = str(Path(sec.key_file).expanduser())
            password = key_password(sec)
            if password is not None:
                out["ssl_password"] = password
    return out


def _sql_quote(value: str) -> str:
    return value.replace("'", "''")


def secure_statement(text: str, options: Mapping[str, str]) -> str:
    """``text`` with ``options`` added to its Kafka table's ``WITH (...)``.

    Statements that are not Kafka tables come back unchanged, and so does any option
    the statement sets itself: an explicit table option wins over the config.
    """
    connector = _KAFKA_CONNECTOR_RE.search(text)
    if not options or connector is None:
        return text
    withs = [m for m in _WITH_RE.finditer(text) if m.end() <= connector.start()]
    if not withs:
        return text
    at = withs[-1].end()
    present = {k.lower() for k in re.findall(r"'([^']+)'\s*=", text[at:])}
    added = [
        f"'{_sql_quote(k)}' = '{_sql_quote(v)}'"
        for k, v in options.items()
        if k.lower() not in present
    ]
    if not added:
        return text
    return f"{text[:at]}\n  {', '.join(added)},{text[at:]}"
