"""The Kafka store's librdkafka pieces that need no broker: checksums, security keys."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from flinkai.config import KafkaSecurityConfig
from flinkai.state import CodecConfig, Version
from flinkai.state.codec import decode, encode
from flinkai.state.errors import SnapshotCorruptError
from flinkai.state.kafka import (
    _parse_index_value,
    batch_value,
    index_value,
    parse_batch_value,
    split_version_line,
)
from flinkai.state.rdkafka import rdkafka_security

TENSOR = np.random.default_rng(4).standard_normal((2, 3, 64, 64)).astype("float32")


def test_xxh3_checksum_round_trips_and_names_itself() -> None:
    codec = CodecConfig(codec="none", byte_shuffle=False, checksum="xxh3_128")
    meta, payload = encode(TENSOR, codec, version=Version(1), model_version="r")
    assert meta.sha256.startswith("xxh3_128:") and len(meta.sha256) == len("xxh3_128:") + 32
    np.testing.assert_array_equal(decode(payload, meta), TENSOR)


def test_xxh3_checksum_refuses_a_flipped_byte() -> None:
    codec = CodecConfig(codec="none", byte_shuffle=False, checksum="xxh3_128")
    meta, payload = encode(TENSOR, codec, version=Version(1), model_version="r")
    broken = bytearray(payload)
    broken[len(broken) // 2] ^= 0x10
    with pytest.raises(SnapshotCorruptError, match="xxh3_128") as e:
        decode(bytes(broken), meta)
    assert e.value.reason == "checksum"


def test_a_plain_hex_digest_is_still_read_as_sha256() -> None:
    meta, payload = encode(TENSOR, CodecConfig(), version=Version(1), model_version="r")
    assert meta.sha256 == hashlib.sha256(TENSOR.tobytes()).hexdigest()
    np.testing.assert_array_equal(decode(payload, meta), TENSOR)


def test_an_unknown_checksum_is_refused_in_the_config() -> None:
    with pytest.raises(ValueError, match="checksum"):
        CodecConfig(checksum="md5")  # type: ignore[arg-type]


def test_index_value_round_trips_and_a_bad_one_is_corrupt() -> None:
    meta, _ = encode(TENSOR, CodecConfig(), version=Version(5, 1), model_version="r")
    raw = index_value(meta, 2, [10, 11, 12], (8, 14))
    assert len(raw) < 400  # key-only: a few hundred bytes against ~100 KB per chunk
    assert _parse_index_value(Version(5, 1), raw) == (meta, 2, [10, 11, 12], (8, 14))
    with pytest.raises(SnapshotCorruptError):
        _parse_index_value(Version(5, 1), raw.replace(b'"span":[8,14]', b'"span":[11,14]'))
    with pytest.raises(SnapshotCorruptError):
        _parse_index_value(Version(5, 1), b"{not json")


def test_plain_text_has_no_security_properties() -> None:
    assert rdkafka_security(KafkaSecurityConfig()) == {}


def test_sasl_ssl_maps_to_librdkafka_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    monkeypatch.setenv("KV_TEST_PASSWORD", "s3cret")
    sec = KafkaSecurityConfig(
        protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        username="alice",
        password_env="KV_TEST_PASSWORD",
        ca_file=str(ca),
    )
    assert rdkafka_security(sec) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": "s3cret",
        "ssl.ca.location": str(ca),
    }


def test_a_transaction_index_record_round_trips_its_spans_and_lines() -> None:
    meta, _ = encode(
        np.zeros(4, np.float32), CodecConfig(), version=Version(5, 0), model_version="m"
    )
    entry = index_value(meta, 0, [7, 8], (7, 9))
    raw = batch_value({0: (7, 9)}, [(b"a_0_ff", b"5.0", entry)], [b"a_0_ff@3.1"])
    spans, pruned, keys, lines = parse_batch_value(raw)
    assert spans == {0: (7, 9)} and pruned == [("a_0_ff", "3.1")]
    assert keys == [b"a_0_ff"]
    assert [split_version_line(line) for line in lines] == [("5.0", entry)]
    # The entry is an ordinary per-version index value, parsed only when asked for.
    assert _parse_index_value(Version(5, 0), entry)[2] == [7, 8]


@pytest.mark.parametrize(
    "raw",
    [
        b'{"format":3,"spans":{},"pruned":[]}\na\n1.0\t{}',  # a format this code does not know
        b'{"format":2,"spans":{"0":[9,3]},"pruned":[]}',  # a span that ends before it starts
        b'{"format":2,"pruned":[]}\na\n1.0\t{}',  # no spans
        b'{"format":2,"spans":{},"pruned":["no-version"]}',  # a pruned name without @
        b'{"format":2,"spans":{},"pruned":[]}\na',  # a key without its version line
        b"not json",
        b"[2]",
    ],
)
def test_a_bad_transaction_index_record_is_corrupt(raw: bytes) -> None:
    with pytest.raises(SnapshotCorruptError) as e:
        parse_batch_value(raw)
    assert e.value.reason == "header"


@pytest.mark.parametrize("line", [b"1.0", b"1.0\t", b"x.y\t{}", b"\xff\t{}"])
def test_a_bad_version_line_is_corrupt_when_its_key_is_filed(line: bytes) -> None:
    with pytest.raises(SnapshotCorruptError) as e:
        split_version_line(line)
    assert e.value.reason == "header"


def test_a_key_holding_a_newline_cannot_be_written_into_a_transaction_record() -> None:
    with pytest.raises(ValueError, match="newline"):
        batch_value({}, [(b"a\nb", b"1.0", b"{}")])


def test_codec_none_stores_the_raw_bytes_unshuffled() -> None:
    meta, payload = encode(TENSOR, CodecConfig(codec="none"), version=Version(1), model_version="m")
    assert meta.compression == "none"
    assert payload == TENSOR.tobytes()
    np.testing.assert_array_equal(decode(payload, meta), TENSOR)


def test_a_none_shuffle_payload_of_older_writers_still_decodes() -> None:
    # Written before codec none stopped shuffling: header "none+shuffle".
    meta, _ = encode(TENSOR, CodecConfig(codec="zstd"), version=Version(1), model_version="m")
    shuffled = TENSOR.reshape(-1).view(np.uint8).reshape(-1, 4).T.tobytes()
    old = replace(meta, compression="none+shuffle", payload_bytes=len(shuffled))
    np.testing.assert_array_equal(decode(shuffled, old), TENSOR)
    assert shuffled != TENSOR.tobytes()  # the case is a real shuffle, not the raw bytes
