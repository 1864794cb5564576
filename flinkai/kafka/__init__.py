"""Kafka for flinkai: a local single-node broker and small admin helpers.

The broker (:class:`LocalKafka`) is real Apache Kafka in KRaft mode, so
transactions and ``read_committed`` behave as in production.
"""

from __future__ import annotations

from flinkai.kafka.admin import (
    Record,
    consume_all,
    create_topics,
    describe_cluster,
    list_topics,
    produce,
    wait_for_broker,
)
from flinkai.kafka.broker import BrokerStatus, LocalKafka
from flinkai.kafka.errors import (
    BrokerUnavailableError,
    KafkaAuthError,
    KafkaError,
    TopicNotFoundError,
)

__all__ = [
    "BrokerStatus",
    "BrokerUnavailableError",
    "KafkaAuthError",
    "KafkaError",
    "LocalKafka",
    "Record",
    "TopicNotFoundError",
    "consume_all",
    "create_topics",
    "describe_cluster",
    "list_topics",
    "produce",
    "wait_for_broker",
]
