"""The local broker is real Kafka: topics, round trips, transactions, lifecycle."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer

from flinkai.cli.main import main
from flinkai.errors import SetupError
from flinkai.kafka.admin import (
    consume_all,
    create_topics,
    end_offsets,
    list_topics,
    produce,
    read_to_end_offsets,
    wait_for_broker,
)
from flinkai.kafka.broker import LocalKafka
from flinkai.kafka.errors import KafkaError, TopicNotFoundError
from flinkai.local.process import free_port, port_in_use, wait_until
from flinkai.testing import compare_ids, unique_topic

pytestmark = pytest.mark.integration


def _properties(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {k.strip(): v.strip() for k, v in pairs}


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rpartition(")")[2].split()[0] == "Z"


def test_broker_serves_requests(kafka_broker: LocalKafka) -> None:
    status = kafka_broker.status()
    assert status.running and status.listening
    assert status.bootstrap == kafka_broker.bootstrap
    assert kafka_broker.bootstrap.startswith("127.0.0.1:")

    cluster = wait_for_broker(kafka_broker.bootstrap, timeout_s=10)
    assert [b["broker_id"] for b in cluster["brokers"]] == [1]


def test_generated_config_is_single_node_kraft(kafka_broker: LocalKafka) -> None:
    props = _properties(kafka_broker.properties_file)
    assert props["process.roles"] == "broker,controller"
    assert props["auto.create.topics.enable"] == "false"
    assert props["offsets.topic.replication.factor"] == "1"
    assert props["transaction.state.log.replication.factor"] == "1"
    assert props["transaction.state.log.min.isr"] == "1"
    assert props["group.initial.rebalance.delay.ms"] == "0"
    assert props["listeners"].startswith(f"PLAINTEXT://{kafka_broker.bootstrap},CONTROLLER://")


def test_create_topics_is_idempotent(kafka_broker: LocalKafka, topic: str) -> None:
    other = unique_topic("other")
    assert create_topics(kafka_broker.bootstrap, [topic, other], partitions=3) == [topic, other]
    assert create_topics(kafka_broker.bootstrap, [topic], partitions=3) == []
    assert {topic, other} <= list_topics(kafka_broker.bootstrap)

    with pytest.raises(KafkaError, match="fewer than the 5"):
        create_topics(kafka_broker.bootstrap, [topic], partitions=5)


def test_produce_consume_round_trip(kafka_broker: LocalKafka, topic: str) -> None:
    create_topics(kafka_broker.bootstrap, [topic])
    values = [f"v{i}".encode() for i in range(20)]
    written = produce(
        kafka_broker.bootstrap,
        topic,
        values,
        key=lambda v: b"k-" + (v or b""),
        headers=[("source", b"test")],
    )
    assert written == 20

    records = consume_all(kafka_broker.bootstrap, topic, timeout_s=15, expect=20)
    assert [r.value for r in records] == values
    assert [r.offset for r in records] == list(range(20))
    assert records[3].key == b"k-v3"
    assert records[0].headers == (("source", b"test"),)
    assert {r.partition for r in records} == {0}


def test_consume_all_without_expect_stops_at_the_end(kafka_broker: LocalKafka, topic: str) -> None:
    create_topics(kafka_broker.bootstrap, [topic], partitions=2)
    produce(kafka_broker.bootstrap, topic, [b"a", b"b", b"c"], key=b"same")

    started = time.monotonic()
    records = consume_all(kafka_broker.bootstrap, topic, timeout_s=20, idle_s=0.5)
    assert sorted(r.value for r in records if r.value) == [b"a", b"b", b"c"]
    # It ends because every partition was read to its end, not because of the timeout.
    assert time.monotonic() - started < 10


def test_consume_missing_topic_fails_clearly(kafka_broker: LocalKafka) -> None:
    missing = unique_topic("missing")
    with pytest.raises(TopicNotFoundError, match=missing):
        consume_all(kafka_broker.bootstrap, missing, timeout_s=1)
    # auto.create.topics.enable=false: asking did not create it.
    assert missing not in list_topics(kafka_broker.bootstrap)


def test_read_committed_group_consumer(kafka_broker: LocalKafka, topic: str) -> None:
    create_topics(kafka_broker.bootstrap, [topic])
    produce(kafka_broker.bootstrap, topic, [b"one", b"two"])

    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=kafka_broker.bootstrap,
        group_id=f"g-{uuid.uuid4().hex[:8]}",
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(got) < 2 and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                got.extend(r.value for r in batch)
        consumer.commit()
    finally:
        consumer.close()
    assert got == [b"one", b"two"]


def test_transactions_commit_and_abort(kafka_broker: LocalKafka, topic: str) -> None:
    bootstrap = kafka_broker.bootstrap
    create_topics(bootstrap, [topic])
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=f"tx-{uuid.uuid4().hex[:8]}"
    )
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"committed-1")
        producer.send(topic, b"committed-2")
        producer.commit_transaction()

        producer.begin_transaction()
        producer.send(topic, b"aborted")
        producer.flush()
        producer.abort_transaction()

        producer.begin_transaction()
        producer.send(topic, b"pending")
        producer.flush()

        # An open transaction: read_committed stops at the last stable offset ...
        committed = consume_all(bootstrap, topic, timeout_s=15, idle_s=0.5)
        assert [r.value for r in committed] == [b"committed-1", b"committed-2"]
        # ... while read_uncommitted sees everything written, aborted records included.
        everything = consume_all(
            bootstrap, topic, timeout_s=15, isolation_level="read_uncommitted", expect=4
        )
        assert [r.value for r in everything] == [
            b"committed-1",
            b"committed-2",
            b"aborted",
            b"pending",
        ]

        producer.commit_transaction()
    finally:
        producer.close(timeout=10)

    final = consume_all(bootstrap, topic, timeout_s=15, expect=3)
    assert [r.value for r in final] == [b"committed-1", b"committed-2", b"pending"]
    # Transaction markers take offsets too, so committed records are not contiguous.
    assert [r.offset for r in final][:2] == [0, 1] and final[2].offset > 3


def test_read_to_end_offsets_sees_a_duplicate_after_the_nth_record(
    kafka_broker: LocalKafka, topic: str
) -> None:
    bootstrap = kafka_broker.bootstrap
    create_topics(bootstrap, [topic], partitions=3)
    ids = [f"e-{i}".encode() for i in range(50)]
    produce(bootstrap, topic, ids, key=lambda v: v)
    produce(bootstrap, topic, [b"e-7"], key=b"e-7")  # a replay after all 50

    snapshot = read_to_end_offsets(bootstrap, topic, timeout_s=30)
    assert sum(snapshot.end_offsets.values()) == 51
    assert len(snapshot.records) == 51
    report = compare_ids(
        [i.decode() for i in ids], (r.value.decode() for r in snapshot.records if r.value)
    )
    assert report.duplicated == {"e-7": 1}, str(report)


def test_read_to_end_offsets_stops_at_the_last_stable_offset(
    kafka_broker: LocalKafka, topic: str
) -> None:
    bootstrap = kafka_broker.bootstrap
    create_topics(bootstrap, [topic])
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=f"tx-{uuid.uuid4().hex[:8]}"
    )
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"committed")
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send(topic, b"aborted")
        producer.flush()
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic, b"open")
        producer.flush()

        # An open transaction: its records lie between the two ends.
        stable = end_offsets(bootstrap, topic)[0]
        high = end_offsets(bootstrap, topic, "read_uncommitted")[0]
        assert stable < high
        committed = read_to_end_offsets(bootstrap, topic, timeout_s=30)
        assert committed.end_offsets == {0: stable}
        assert [r.value for r in committed.records] == [b"committed"]
        raw = read_to_end_offsets(bootstrap, topic, "read_uncommitted", timeout_s=30)
        assert [r.value for r in raw.records] == [b"committed", b"aborted", b"open"]

        producer.commit_transaction()
    finally:
        producer.close(timeout=10)

    # Every transaction resolved: both ends meet past the last commit marker.
    final = read_to_end_offsets(bootstrap, topic, timeout_s=30)
    assert [r.value for r in final.records] == [b"committed", b"open"]
    assert final.end_offsets == end_offsets(bootstrap, topic, "read_uncommitted")


def test_port_taken_by_another_process(tmp_path: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        with pytest.raises(SetupError, match=f"127.0.0.1:{port} is already in use"):
            LocalKafka(tmp_path, port).start()
    assert not (tmp_path / "broker.pid").exists()


def test_port_taken_by_the_session_broker(kafka_broker: LocalKafka, tmp_path: Path) -> None:
    with pytest.raises(SetupError, match="already in use"):
        LocalKafka(tmp_path, kafka_broker.port).start()


def test_second_start_on_a_running_data_dir(kafka_broker: LocalKafka) -> None:
    twin = LocalKafka(kafka_broker.data_dir, free_port())
    with pytest.raises(SetupError, match="already running"):
        twin.start()
    assert kafka_broker.status().running  # the refused start touched nothing


def test_broker_that_dies_at_start_reports_its_log(tmp_path: Path) -> None:
    # A log dir that looks formatted but is not: Kafka exits with a fatal error.
    (tmp_path / "kraft-logs").mkdir()
    (tmp_path / "kraft-logs" / "meta.properties").write_text("not a kafka meta file\n")
    broker = LocalKafka(tmp_path, free_port(), start_timeout_s=60)
    with pytest.raises(SetupError, match="exited with code") as info:
        broker.start()
    assert str(broker.log_file) in str(info.value)
    assert not broker.status().running
    assert not (tmp_path / "broker.pid").exists()


def test_cli_start_status_stop_across_processes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    port = free_port()
    data_dir = str(tmp_path / "kafka")
    # `start` in its own process, which exits and leaves the broker running.
    started = subprocess.run(
        [
            sys.executable,
            "-m",
            "flinkai.cli.main",
            "kafka",
            "start",
            "--port",
            str(port),
            "--data-dir",
            data_dir,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert started.returncode == 0, started.stderr
    assert started.stdout.strip() == f"127.0.0.1:{port}"

    broker = LocalKafka(data_dir)
    pid = broker.status().pid
    assert pid is not None
    try:
        assert main(["kafka", "status", "--data-dir", data_dir]) == 0
        assert f"running: 127.0.0.1:{port} (pid {pid}, listening" in capsys.readouterr().out
        create_topics(f"127.0.0.1:{port}", ["t"])

        caplog.set_level(logging.INFO, logger="flinkai.kafka.broker")
        began = time.monotonic()
        assert main(["kafka", "stop", "--data-dir", data_dir]) == 0
        assert time.monotonic() - began < 30
    finally:
        if not _gone(pid):
            broker.stop(timeout_s=5)

    # Stopped by SIGTERM alone: no SIGKILL warning, process gone, port and files released.
    assert not [
        r for r in caplog.records if r.name.startswith("flinkai") and r.levelno >= logging.WARNING
    ]
    assert _gone(pid)
    assert not port_in_use(port)
    assert not (Path(data_dir) / "broker.pid").exists()
    assert main(["kafka", "status", "--data-dir", data_dir]) == 3
    assert main(["kafka", "stop", "--data-dir", data_dir]) == 0
    assert "no Kafka broker running" in capsys.readouterr().err


def test_metrics_endpoint_serves_log_end_offsets(kafka_broker: LocalKafka, topic: str) -> None:
    """The session broker serves its per-partition log end offsets for Prometheus."""
    from flinkai.metrics import scrape

    create_topics(kafka_broker.bootstrap, [topic], partitions=2)
    assert kafka_broker.metrics_address is not None

    def ends() -> dict[str, float]:
        got = scrape(f"http://{kafka_broker.metrics_address}/metrics")
        series = got.get("kafka_log_log_logendoffset", [])
        return {labels["partition"]: v for labels, v in series if labels.get("topic") == topic}

    assert wait_until(lambda: ends() == {"0": 0.0, "1": 0.0}, 30, poll_s=0.5), ends()
    produce(kafka_broker.bootstrap, topic, [b"a", b"b", b"c"])
    assert wait_until(lambda: sum(ends().values()) == 3.0, 30, poll_s=0.5), ends()


def test_metrics_agent_missing_fails_clearly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("flinkai.kafka.broker.jars_dir", lambda kind: tmp_path / kind)
    broker = LocalKafka(tmp_path / "data", port=free_port(), metrics_port=free_port())
    with pytest.raises(SetupError, match=r"JMX exporter agent is missing .* run `flinkai setup`"):
        broker._metrics_agent()
    assert LocalKafka(tmp_path / "d2", port=free_port())._metrics_agent() == []
