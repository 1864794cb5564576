"""LoRA adapters: the ``.onnx_adapter`` codec, its checks, and hot-plug with rollback."""

from __future__ import annotations

import numpy as np
import pytest

from flinkai.llm.adapters import AdapterSet
from flinkai.llm.lora import Adapter, AdapterError, LoraSpec
from flinkai.llm.prefix import block_hashes

SPEC = LoraSpec(rank=2, n_layers=2, dims={"q_proj": (8, 8), "v_proj": (8, 4)})
BASE = "0123456789abcdef"


def adapter(name: str = "topics", version: int = 1, seed: int = 0, **kw: object) -> Adapter:
    rng = np.random.default_rng(seed)
    params = {n: rng.standard_normal(SPEC.shape_of(n)).astype(np.float32) for n in SPEC.names()}
    fields: dict[str, object] = {"base_model": BASE, "rank": SPEC.rank, "params": params}
    fields.update(kw)
    return Adapter(name, version, **fields)  # type: ignore[arg-type]


def test_the_codec_round_trips_and_gives_the_same_bytes_each_time() -> None:
    a = adapter(extra={"step": 7})
    data = a.encode()
    assert data == a.encode()
    b = Adapter.decode(data)
    assert (b.name, b.version, b.base_model, b.rank, dict(b.extra)) == (
        "topics",
        1,
        BASE,
        2,
        {"step": 7},
    )
    assert set(b.params) == set(SPEC.names())
    for n in SPEC.names():
        np.testing.assert_array_equal(b.params[n], a.params[n])
    b.check(SPEC, BASE)
    assert SPEC.nbytes == a.nbytes


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda: Adapter.decode(adapter().encode()[:-100]), "malformed"),
        (lambda: Adapter.decode(b"not an adapter at all"), "malformed"),
        (lambda: adapter(base_model="ffffffffffffffff").check(SPEC, BASE), "base_model_mismatch"),
        (lambda: adapter(rank=4).check(SPEC, BASE), "rank_mismatch"),
        (
            lambda: Adapter(
                "t", 1, BASE, 2, {n: np.zeros((1, 1), np.float32) for n in SPEC.names()}
            ).check(SPEC, BASE),
            "shape_mismatch",
        ),
        (lambda: Adapter("t", 1, BASE, 2, {}).check(SPEC, BASE), "missing_params"),
        (lambda: Adapter.decode(Adapter("bad name!", 1, BASE, 2, {}).encode()), "invalid_name"),
    ],
)
def test_a_bad_adapter_is_refused_with_its_reason(make: object, reason: str) -> None:
    with pytest.raises(AdapterError) as e:
        make()  # type: ignore[operator]
    assert e.value.reason == reason


def test_nan_weights_are_refused() -> None:
    a = adapter()
    params = dict(a.params)
    params["lora.1.v_proj.b"] = params["lora.1.v_proj.b"].copy()
    params["lora.1.v_proj.b"][0, 0] = np.nan
    with pytest.raises(AdapterError, match="not_finite"):
        Adapter(a.name, 2, BASE, 2, params).check(SPEC, BASE)


def test_hot_plug_makes_the_newest_current_and_a_bad_one_keeps_the_previous() -> None:
    clock = iter(range(100, 200))
    adapters = AdapterSet(SPEC, BASE, keep_versions=2, wall=lambda: float(next(clock)))
    assert adapters.current("topics") is None
    with pytest.raises(AdapterError, match="unknown_adapter"):
        adapters.pin("topics")
    adapters.publish(adapter(version=1).encode())
    assert adapters.pin("topics").version == 1
    adapters.publish(adapter(version=2, seed=1))
    assert adapters.pin("topics").version == 2
    truncated = adapter(version=3).encode()[:500]
    with pytest.raises(AdapterError):
        adapters.publish(truncated)
    with pytest.raises(AdapterError):
        adapters.publish(adapter(version=3, rank=4))
    assert adapters.pin("topics").version == 2
    assert adapters.rejected == {"malformed": 1, "rank_mismatch": 1}
    assert [e.action for e in adapters.events] == ["publish", "publish", "rejected", "rejected"]
    assert adapters.events[-1].reason == "rank_mismatch"


def test_rollback_goes_to_the_previous_held_version_and_replays_are_idempotent() -> None:
    adapters = AdapterSet(SPEC, BASE, keep_versions=2)
    for v in (1, 2, 3):
        adapters.publish(adapter(version=v, seed=v))
    # keep_versions=2: version 1 is gone
    with pytest.raises(AdapterError, match="unknown_version"):
        adapters.rollback("topics", 1)
    assert adapters.rollback("topics").version == 2
    assert adapters.pin("topics").version == 2
    with pytest.raises(AdapterError, match="unknown_version"):
        adapters.rollback("topics")  # nothing older than 2 is held
    with pytest.raises(AdapterError, match="unknown_adapter"):
        adapters.rollback("other")
    again = adapters.publish(adapter(version=3, seed=3))
    assert again.version == 3 and adapters.pin("topics") is again
    assert adapters.names() == {"topics": 3}


def test_an_adapter_namespace_changes_every_block_hash() -> None:
    ids = list(range(64))
    base = block_hashes(ids, 16)
    assert base == block_hashes(ids, 16, "")
    one, two = block_hashes(ids, 16, "topics@1"), block_hashes(ids, 16, "topics@2")
    assert len(one) == 4
    assert not set(base) & set(one) and not set(one) & set(two)
