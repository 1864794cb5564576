"""Render ``kafka.security`` for the two kinds of client flinkai runs.

Flink's Kafka SQL connector takes client settings as ``properties.*`` table options;
kafka-python (the admin helpers, the preflight probe) takes keyword arguments. Both
are built from one :class:`~flinkai.config.KafkaSecurityConfig`, with the password
read through :func:`flinkai.security.read_secret` so it is redacted everywhere.

:func:`resolve_security` makes both renderings at once and reads each secret once;
the runner resolves a job's security this way before it builds the job and hands the
one :class:`KafkaSecurity` to every step, as Flink resolves its ``Configuration``
once. The admin helpers and the probe take either that value or the plain section.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeAlias

from flinkai.config import KafkaSecurityConfig
from flinkai.errors import ConfigError
from flinkai.security import read_secret

__all__ = [
    "SHADED_PREFIX",
    "ClientSecurity",
    "KafkaSecurity",
    "client_options",
    "describe_listener",
    "flink_table_options",
    "key_password",
    "python_client_options",
    "resolve_security",
    "secure_statement",
    "security_section",
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
_PASSWORD = "kafka.security.password"
_KEY_PASSWORD = "kafka.security.key_password"


@dataclass(frozen=True)
class KafkaSecurity:
    """``kafka.security`` resolved: every secret read once, both renderings made.

    Attributes:
        config: The section it was resolved from (listener, user and mechanism for
            messages; file paths for the TLS handshake).
        table_options: ``properties.*`` for every Flink Kafka table; secrets appear
            only as config-provider placeholders.
        client_options: kafka-python keyword arguments; they hold secret values.
        key_password: The client key's password, or ``None`` for an unencrypted key.
        env_names: The variables the job's Kafka clients read secrets from.
    """

    config: KafkaSecurityConfig
    table_options: Mapping[str, str] = field(default_factory=dict)
    client_options: Mapping[str, Any] = field(default_factory=dict, repr=False)
    key_password: str | None = field(default=None, repr=False)
    env_names: tuple[str, ...] = ()


#: What the kafka-python helpers take: the section (read on each call) or it resolved.
ClientSecurity: TypeAlias = KafkaSecurityConfig | KafkaSecurity


def security_section(security: ClientSecurity) -> KafkaSecurityConfig:
    """The config section behind ``security``."""
    return security.config if isinstance(security, KafkaSecurity) else security


def client_options(security: ClientSecurity | None) -> dict[str, Any]:
    """kafka-python keyword arguments; a resolved value reads no secret again."""
    if security is None:
        return {}
    if isinstance(security, KafkaSecurity):
        return dict(security.client_options)
    return python_client_options(security)


def _password(sec: KafkaSecurityConfig) -> str:
    return read_secret(_PASSWORD, sec.password_env, sec.password_file)


def key_password(sec: ClientSecurity) -> str | None:
    """Password of the encrypted client key, or ``None`` for an unencrypted one."""
    if isinstance(sec, KafkaSecurity):
        return sec.key_password
    if not (sec.key_password_env or sec.key_password_file):
        return None
    return read_secret(_KEY_PASSWORD, sec.key_password_env, sec.key_password_file)


def _jaas_quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def describe_listener(security: ClientSecurity, bootstrap: str) -> str:
    """``SASL_SSL listener at host:port (SCRAM-SHA-512, user alice)``: for error messages."""
    sec = security_section(security)
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
        self.prefix = shaded_prefix
        self.env: list[str] = []
        self._dirs: list[str] = []
        #: config field -> the secret read for it, for the kafka-python rendering
        self.values: dict[str, str] = {}

    def secret(self, what: str, env_name: str, file_path: str) -> str:
        """Placeholder for the secret in ``file_path``, else in ``$env_name``.

        The secret is read here too, so a missing variable or file fails on the
        client, and its value is registered for redaction.

        Raises:
            ConfigError: The reference does not resolve here, or cannot be written
                as a placeholder (a ``:`` or brace in the path, an odd variable name),
                or the file ends with a line break, which the Kafka client would keep.
        """
        self.values[what] = read_secret(what, env_name, file_path)
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
        if env_name not in self.env:
            self.env.append(env_name)
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
        if self.env:
            names.append("env")
            out["properties.config.providers.env.class"] = self.prefix + _ENV_PROVIDER
            alternatives = "|".join(self.env)
            out["properties.config.providers.env.param.allowlist.pattern"] = f"^({alternatives})$"
        if self._dirs:
            names.append("dir")
            out["properties.config.providers.dir.class"] = self.prefix + _DIR_PROVIDER
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
    return _table_options(sec, _References(shaded_prefix))


def resolve_security(sec: KafkaSecurityConfig, shaded_prefix: str = SHADED_PREFIX) -> KafkaSecurity:
    """Both renderings of ``sec``, each secret read (and checked) once.

    Raises:
        ConfigError: As :func:`flink_table_options`: a secret reference does not
            resolve here, or cannot be passed by reference.
    """
    if sec.protocol == "PLAINTEXT":
        return KafkaSecurity(sec)
    refs = _References(shaded_prefix)
    table = _table_options(sec, refs)
    password, key_pw = refs.values.get(_PASSWORD), refs.values.get(_KEY_PASSWORD)
    return KafkaSecurity(
        config=sec,
        table_options=MappingProxyType(table),
        client_options=MappingProxyType(_client_options(sec, password, key_pw)),
        key_password=key_pw,
        env_names=tuple(refs.env),
    )


def _table_options(sec: KafkaSecurityConfig, refs: _References) -> dict[str, str]:
    """The options of a secured ``sec``; the secrets read land in ``refs.values``."""
    shaded_prefix = refs.prefix
    out: dict[str, str] = {"properties.security.protocol": sec.protocol}
    if sec.sasl:
        module = shaded_prefix + _LOGIN_MODULES[sec.sasl_mechanism]
        password = refs.secret(_PASSWORD, sec.password_env, sec.password_file)
        if any(c in refs.values[_PASSWORD] for c in '"\\'):
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
                _KEY_PASSWORD, sec.key_password_env, sec.key_password_file
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
    password = _password(sec) if sec.sasl else None
    key_pw = key_password(sec) if sec.tls and sec.cert_file else None
    return _client_options(sec, password, key_pw)


def _client_options(
    sec: KafkaSecurityConfig, password: str | None, key_pw: str | None
) -> dict[str, Any]:
    """kafka-python keyword arguments of a secured ``sec``, from secrets already read."""
    out: dict[str, Any] = {"security_protocol": sec.protocol}
    if sec.sasl:
        out["sasl_mechanism"] = sec.sasl_mechanism
        out["sasl_plain_username"] = sec.username
        out["sasl_plain_password"] = password
    if sec.tls:
        if sec.ca_file:
            out["ssl_cafile"] = str(Path(sec.ca_file).expanduser())
        if sec.cert_file:
            out["ssl_certfile"] = str(Path(sec.cert_file).expanduser())
            out["ssl_keyfile"] = str(Path(sec.key_file).expanduser())
            if key_pw is not None:
                out["ssl_password"] = key_pw
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
