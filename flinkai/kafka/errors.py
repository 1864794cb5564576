"""Errors raised while talking to Kafka; each maps to a decision the caller makes.

A broker that cannot be started (jars missing, port taken, crash at start-up) is a
:class:`~flinkai.errors.SetupError`; the types here are about a broker that should
be there and is not behaving.
"""

from __future__ import annotations

from flinkai.errors import FlinkAIError

__all__ = ["BrokerUnavailableError", "KafkaAuthError", "KafkaError", "TopicNotFoundError"]


class KafkaError(FlinkAIError):
    """Base class for Kafka failures; the message names the bootstrap address."""


class BrokerUnavailableError(KafkaError):
    """No broker answered at the bootstrap address in time; start one or fix the address."""


class KafkaAuthError(KafkaError):
    """The broker rejected the credentials, or its certificate is not trusted.

    The message names the listener and the SASL mechanism, never the secret.
    """


class TopicNotFoundError(KafkaError):
    """The topic does not exist and the broker does not create topics on demand."""
