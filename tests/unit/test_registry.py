"""Model registry: layout, publish, verification, rollback, debris, locking. No model needed."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from flinkai.models.artifacts import MANIFEST_FILE, build_manifest, write_manifest
from flinkai.models.registry import (
    CRASH_POINTS,
    POINTER_FILE,
    REGISTRY_MANIFEST,
    CorruptVersionError,
    ModelNotPublishedError,
    ModelRegistry,
    RegistryConfig,
    RegistryError,
    RegistryLockTimeoutError,
    VersionConflictError,
    default_registry_root,
    registry_root,
)
from flinkai.models.registry import store as registry_store

NAME = "tiny"


def _model_dir(root: Path, seed: str, *, big: int = 0) -> Path:
    root.mkdir(parents=True)
    (root / "model.bin").write_bytes(seed.encode() * 64 + os.urandom(big))
    (root / "tokenizer.json").write_text(json.dumps({"seed": seed}))
    (root / "sub").mkdir()
    (root / "sub" / "config.txt").write_text(f"config {seed}\n")
    return root


def _flip_byte(path: Path, offset: int = 0) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def _wait_until(cond: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)


@pytest.fixture
def reg(tmp_path: Path) -> ModelRegistry:
    return ModelRegistry(tmp_path / "registry")


# -- publish and read ---------------------------------------------------------------------


def test_publish_folder_layout_and_pointer(reg: ModelRegistry, tmp_path: Path) -> None:
    src = _model_dir(tmp_path / "src", "a")
    published = reg.publish(NAME, src)

    assert len(published.version) == 12
    assert published.sequence == 1
    assert published.path == reg.root / NAME / "versions" / published.version
    assert published.model_version == f"{NAME}@{published.version}"
    for rel in ("model.bin", "tokenizer.json", "sub/config.txt"):
        assert (published.path / rel).read_bytes() == (src / rel).read_bytes()
    assert [f.path for f in published.manifest.files] == [
        "model.bin",
        "sub/config.txt",
        "tokenizer.json",
    ]
    pointer = json.loads((reg.root / NAME / POINTER_FILE).read_text())
    assert pointer["version"] == published.version
    assert pointer["sequence"] == 1
    assert pointer["generation"] == 1
    assert pointer["published_at"].endswith("Z")
    assert reg.current(NAME) == published
    assert reg.names() == [NAME]
    # Nothing but the final version is left in versions/.
    assert [p.name for p in (reg.root / NAME / "versions").iterdir()] == [published.version]


def test_single_file_artifact_with_metadata(reg: ModelRegistry, tmp_path: Path) -> None:
    adapter = tmp_path / "adapter_model.safetensors"
    adapter.write_bytes(b"lora-weights" * 100)
    published = reg.publish("lora-support", adapter, metadata={"base_model": "llama-3-8b"})

    assert published.single_file.name == "adapter_model.safetensors"
    assert published.single_file.read_bytes() == adapter.read_bytes()
    assert published.manifest.metadata == {"base_model": "llama-3-8b"}
    assert reg.current("lora-support").single_file == published.single_file


def test_mapping_of_bytes_and_files(reg: ModelRegistry, tmp_path: Path) -> None:
    extra = tmp_path / "extra.txt"
    extra.write_text("extra")
    published = reg.publish(NAME, {"w/adapter.bin": b"\x00\x01" * 10, "extra.txt": extra})
    assert published.file("w/adapter.bin").read_bytes() == b"\x00\x01" * 10
    assert published.file("extra.txt").read_text() == "extra"
    with pytest.raises(KeyError):
        published.file("missing")
    with pytest.raises(RegistryError, match="not one"):
        _ = published.single_file


def test_same_content_same_version_new_content_next_sequence(
    reg: ModelRegistry, tmp_path: Path
) -> None:
    a = reg.publish(NAME, _model_dir(tmp_path / "a", "a"))
    again = reg.publish(NAME, _model_dir(tmp_path / "a2", "a"))
    assert again.version == a.version
    assert again.sequence == 1  # no copy, no new sequence
    b = reg.publish(NAME, _model_dir(tmp_path / "b", "b"))
    assert b.version != a.version
    assert b.sequence == 2

    rows = reg.list_versions(NAME)
    assert [(r.version, r.sequence, r.current) for r in rows] == [
        (a.version, 1, False),
        (b.version, 2, True),
    ]
    assert rows[1].files == 3
    assert rows[1].size_bytes == sum(f.size for f in b.manifest.files)
    assert reg.read_pointer(NAME).generation == 3


def test_explicit_version_is_immutable(reg: ModelRegistry, tmp_path: Path) -> None:
    reg.publish(NAME, _model_dir(tmp_path / "a", "a"), version="v1")
    with pytest.raises(VersionConflictError, match="immutable"):
        reg.publish(NAME, _model_dir(tmp_path / "b", "b"), version="v1")
    assert reg.current(NAME).version == "v1"
    assert reg.current(NAME).file("tokenizer.json").read_text() == '{"seed": "a"}'
    assert not list((reg.root / NAME / "versions").glob(".tmp-*"))


def test_same_files_under_two_version_names(reg: ModelRegistry, tmp_path: Path) -> None:
    src = _model_dir(tmp_path / "a", "a")
    v1 = reg.publish(NAME, src, version="v1")
    v2 = reg.publish(NAME, src, version="v2")
    assert (v1.sequence, v2.sequence) == (1, 2)
    assert reg.current(NAME).version == "v2"


@pytest.mark.parametrize("bad", ["../escape", ".hidden", "", "a/b", "x" * 200])
def test_invalid_names_are_refused(reg: ModelRegistry, tmp_path: Path, bad: str) -> None:
    src = _model_dir(tmp_path / "a", "a")
    with pytest.raises(RegistryError, match="invalid"):
        reg.publish(bad, src)
    with pytest.raises(RegistryError, match="invalid"):
        reg.publish(NAME, src, version=bad)


def test_bad_sources_are_refused(reg: ModelRegistry, tmp_path: Path) -> None:
    with pytest.raises(RegistryError, match="no such file"):
        reg.publish(NAME, tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(RegistryError, match="nothing to publish"):
        reg.publish(NAME, tmp_path / "empty")
    with pytest.raises(RegistryError, match="reserved"):
        reg.publish(NAME, {REGISTRY_MANIFEST: b"{}"})
    for bad in ("../x", "/abs", "a//b", ""):
        with pytest.raises(RegistryError, match="invalid file path"):
            reg.publish(NAME, {bad: b"1"})


def test_hard_links_stay_links(reg: ModelRegistry, tmp_path: Path) -> None:
    src = _model_dir(tmp_path / "a", "a")
    (src / "triton").mkdir()
    os.link(src / "model.bin", src / "triton" / "model.bin")
    published = reg.publish(NAME, src)
    assert (published.path / "model.bin").stat().st_ino == (
        published.path / "triton" / "model.bin"
    ).stat().st_ino
    reg.current(NAME, verify="always")


def test_crash_hook_sees_every_step_in_order(reg: ModelRegistry, tmp_path: Path) -> None:
    steps: list[str] = []
    ModelRegistry(reg.root, crash_at=steps.append).publish(NAME, {"a": b"1", "b": b"2"})
    assert steps == [
        "mid_write",
        "after_write",
        "mid_write",
        "after_write",
        "before_fsync",
        "before_rename",
        "before_pointer_swap",
        "before_pointer_rename",
        "after_pointer_swap",
    ]
    assert set(steps) == set(CRASH_POINTS)


# -- verification -------------------------------------------------------------------------


def test_nothing_published(reg: ModelRegistry) -> None:
    with pytest.raises(ModelNotPublishedError, match="flinkai registry publish"):
        reg.current(NAME)
    assert reg.list_versions(NAME) == []
    assert reg.names() == []


def test_flipped_byte_is_detected(reg: ModelRegistry, tmp_path: Path) -> None:
    published = reg.publish(NAME, _model_dir(tmp_path / "a", "a"))
    _flip_byte(published.path / "model.bin", 10)
    with pytest.raises(CorruptVersionError, match=r"model\.bin: sha256"):
        ModelRegistry(reg.root).current(NAME, verify="always")
    with pytest.raises(CorruptVersionError, match=r"model\.bin: sha256"):
        ModelRegistry(reg.root).current(NAME, verify="once")
    # Sizes only: a same-size flip goes unnoticed, by design of that mode.
    assert ModelRegistry(reg.root).current(NAME, verify="size").version == published.version


def test_truncated_or_missing_file_is_detected(reg: ModelRegistry, tmp_path: Path) -> None:
    published = reg.publish(NAME, _model_dir(tmp_path / "a", "a"))
    with (published.path / "model.bin").open("r+b") as f:
        f.truncate(5)
    with pytest.raises(CorruptVersionError, match="partial file"):
        reg.current(NAME, verify="size")
    (published.path / "model.bin").unlink()
    with pytest.raises(CorruptVersionError, match="missing"):
        reg.current(NAME)


def test_missing_or_replaced_manifest_is_detected(reg: ModelRegistry, tmp_path: Path) -> None:
    published = reg.publish(NAME, _model_dir(tmp_path / "a", "a"))
    manifest = published.path / REGISTRY_MANIFEST
    text = manifest.read_text()
    manifest.write_text(text.replace('"sequence": 1', '"sequence": 7'))
    with pytest.raises(CorruptVersionError, match="manifest sha256"):
        reg.current(NAME)
    manifest.unlink()
    with pytest.raises(CorruptVersionError, match="manifest is missing"):
        reg.current(NAME)


def test_garbage_pointer_is_reported(reg: ModelRegistry, tmp_path: Path) -> None:
    reg.publish(NAME, _model_dir(tmp_path / "a", "a"))
    (reg.root / NAME / POINTER_FILE).write_text("{not json")
    with pytest.raises(CorruptVersionError, match="invalid pointer"):
        reg.current(NAME)
    # The next publish replaces it and numbers on from the manifests.
    b = reg.publish(NAME, _model_dir(tmp_path / "b", "b"))
    assert b.sequence == 2
    assert reg.current(NAME).version == b.version


def test_verify_once_hashes_on_first_load_only(
    reg: ModelRegistry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    published = reg.publish(NAME, _model_dir(tmp_path / "a", "a"))
    hashed: list[Path] = []
    real = registry_store._sha256

    def counting(path: Path) -> str:
        hashed.append(path)
        return real(path)

    monkeypatch.setattr(registry_store, "_sha256", counting)
    reader = ModelRegistry(reg.root)
    reader.current(NAME)
    assert len(hashed) == 3
    reader.current(NAME)
    assert len(hashed) == 3  # stat fingerprint unchanged: no hashing
    # A rewrite changes mtime and inode; the next load hashes again and catches it.
    model = published.path / "model.bin"
    data = bytearray(model.read_bytes())
    data[0] ^= 1
    model.unlink()
    model.write_bytes(bytes(data))
    with pytest.raises(CorruptVersionError):
        reader.current(NAME)
    reader.current(NAME, verify="size")


def test_publish_refuses_artifacts_that_fail_their_own_manifest(
    reg: ModelRegistry, tmp_path: Path
) -> None:
    src = tmp_path / "export"
    src.mkdir()
    (src / "model.onnx").write_bytes(b"onnx" * 100)
    (src / "tokenizer.json").write_text("{}")
    manifest = build_manifest(src, name="m", dim=4, max_seq_length=8, source={"package": "t"})
    write_manifest(src, manifest)
    ok = reg.publish(NAME, src)
    assert (ok.path / MANIFEST_FILE).is_file()
    assert ok.version == manifest.version, "an exported model keeps its own version"

    _flip_byte(src / "model.onnx")
    with pytest.raises(RegistryError, match="refusing to publish a corrupt model"):
        reg.publish(NAME, src)
    _flip_byte(src / "model.onnx")  # repaired
    (src / "tokenizer.json").unlink()
    with pytest.raises(RegistryError, match="partial model"):
        reg.publish(NAME, src)
    assert reg.current(NAME, verify="always").version == ok.version
    assert not list((reg.root / NAME / "versions").glob(".tmp-*"))
    # An explicit opt-out publishes whatever is there, under a content hash.
    unchecked = reg.publish(NAME, src, check_artifacts=False)
    assert (unchecked.sequence, len(unchecked.version)) == (2, 12)
    assert unchecked.version != manifest.version


# -- rollback -----------------------------------------------------------------------------


def test_rollback(reg: ModelRegistry, tmp_path: Path) -> None:
    a = reg.publish(NAME, _model_dir(tmp_path / "a", "a"))
    b = reg.publish(NAME, _model_dir(tmp_path / "b", "b"))
    lines: list[str] = []
    back = reg.rollback(NAME, a.version, progress=lines.append)
    assert back.version == a.version
    assert reg.current(NAME).version == a.version
    assert reg.read_pointer(NAME).generation == 3
    assert any("rolled back" in line for line in lines)
    reg.rollback(NAME, a.version, progress=lines.append)
    assert "already current" in lines[-1]

    with pytest.raises(ModelNotPublishedError):
        reg.rollback(NAME, "nope")
    _flip_byte(b.path / "model.bin")
    with pytest.raises(CorruptVersionError):
        reg.rollback(NAME, b.version)
    assert reg.current(NAME).version == a.version
    problems = {r.version: r.problem for r in reg.list_versions(NAME, verify=True)}
    assert problems[a.version] is None
    assert "sha256" in str(problems[b.version])


def test_damaged_version_is_replaced_by_a_republish(reg: ModelRegistry, tmp_path: Path) -> None:
    src = _model_dir(tmp_path / "a", "a")
    a = reg.publish(NAME, src)
    _flip_byte(a.path / "model.bin")
    again = reg.publish(NAME, src)
    assert again.version == a.version
    assert again.sequence == 2
    reg.current(NAME, verify="always")
    assert not [p for p in (reg.root / NAME / "versions").iterdir() if p.name.startswith(".")]


# -- crash debris -------------------------------------------------------------------------


def test_debris_is_ignored_by_readers_and_cleaned_by_the_next_publish(
    reg: ModelRegistry, tmp_path: Path
) -> None:
    a = reg.publish(NAME, _model_dir(tmp_path / "a", "a"))
    versions = reg.root / NAME / "versions"
    (versions / ".tmp-deadbeef" / "sub").mkdir(parents=True)
    (versions / ".tmp-deadbeef" / "model.bin").write_bytes(b"partial")
    (versions / ".trash-cafe").mkdir()
    (reg.root / NAME / f"{POINTER_FILE}.tmp").write_text('{"half": ')

    assert reg.current(NAME).version == a.version
    assert [r.version for r in reg.list_versions(NAME)] == [a.version]

    b = reg.publish(NAME, _model_dir(tmp_path / "b", "b"))
    assert sorted(p.name for p in versions.iterdir()) == sorted([a.version, b.version])
    assert not (reg.root / NAME / f"{POINTER_FILE}.tmp").exists()


def test_failed_copy_leaves_nothing(
    reg: ModelRegistry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = reg.publish(NAME, _model_dir(tmp_path / "a", "a"))

    def boom(step: str) -> None:
        if step == "before_rename":
            raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        ModelRegistry(reg.root, crash_at=boom).publish(NAME, _model_dir(tmp_path / "b", "b"))
    assert [p.name for p in (reg.root / NAME / "versions").iterdir()] == [a.version]
    assert reg.current(NAME).version == a.version


# -- locking ------------------------------------------------------------------------------


def test_lock_serialises_two_publishers(reg: ModelRegistry, tmp_path: Path) -> None:
    src_a = _model_dir(tmp_path / "a", "a")
    src_b = _model_dir(tmp_path / "b", "b")
    holding = threading.Event()
    release = threading.Event()

    def hold(step: str) -> None:
        if step == "before_rename":
            holding.set()
            assert release.wait(10)

    results: dict[str, object] = {}
    b_lines: list[str] = []

    def run(key: str, registry: ModelRegistry, src: Path, lines: list[str]) -> None:
        try:
            results[key] = registry.publish(NAME, src, progress=lines.append)
        except BaseException as e:
            results[key] = e

    ta = threading.Thread(target=run, args=("a", ModelRegistry(reg.root, crash_at=hold), src_a, []))
    ta.start()
    assert holding.wait(10)
    tb = threading.Thread(target=run, args=("b", ModelRegistry(reg.root), src_b, b_lines))
    tb.start()
    _wait_until(lambda: any("waiting for the publish lock" in line for line in b_lines))
    assert f"held by pid {os.getpid()}" in b_lines[0]
    assert "b" not in results
    assert not (reg.root / NAME / POINTER_FILE).exists()

    # A third publisher with a timeout gives up with a clear error.
    with pytest.raises(RegistryLockTimeoutError, match="held by pid"):
        ModelRegistry(reg.root, lock_timeout_s=0.1).publish(NAME, src_b)

    release.set()
    ta.join(10)
    tb.join(10)
    a, b = results["a"], results["b"]
    assert not isinstance(a, BaseException), a
    assert not isinstance(b, BaseException), b
    assert [(r.sequence, r.current) for r in reg.list_versions(NAME)] == [(1, False), (2, True)]
    current = reg.current(NAME, verify="always")
    assert current.file("tokenizer.json").read_text() == '{"seed": "b"}'


def test_registry_config_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLINKAI_HOME", str(tmp_path))
    assert default_registry_root() == tmp_path / "registry"
    assert registry_root(RegistryConfig()) == tmp_path / "registry"
    assert registry_root(RegistryConfig(root="~/x")) == Path("~/x").expanduser()
    with pytest.raises(AttributeError):
        RegistryConfig().root = "y"  # type: ignore[misc]


# -- CLI ----------------------------------------------------------------------------------


def _cli(monkeypatch: pytest.MonkeyPatch, *argv: str) -> int:
    from flinkai.cli import main

    if "flinkai.cli.registry_cmd" not in main.COMMAND_MODULES:
        monkeypatch.setattr(
            main, "COMMAND_MODULES", (*main.COMMAND_MODULES, "flinkai.cli.registry_cmd")
        )
    return main.main(list(argv))


def test_cli_publish_list_rollback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = str(tmp_path / "registry")
    src = _model_dir(tmp_path / "a", "a")
    assert _cli(monkeypatch, "registry", "publish", NAME, str(src), "--root", root) == 0
    out, err = capsys.readouterr()
    first = out.strip()
    assert first.startswith(f"{NAME}@")
    assert "[1/3] model.bin" in err
    assert "published" in err

    adapter = tmp_path / "adapter.bin"
    adapter.write_bytes(b"w" * 10)
    argv = ["registry", "publish", NAME, str(adapter), "--root", root, "--version", "lora-1"]
    assert _cli(monkeypatch, *argv, "--meta", "base=minilm") == 0
    assert capsys.readouterr().out.strip() == f"{NAME}@lora-1"

    assert _cli(monkeypatch, "registry", "list", NAME, "--root", root, "--verify") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["version", "seq", "created_at", "files", "size", "status"]
    assert lines[2].startswith("*") and "lora-1" in lines[2] and lines[2].endswith("ok")

    version = first.split("@", 1)[1]
    assert _cli(monkeypatch, "registry", "rollback", NAME, version, "--root", root) == 0
    assert capsys.readouterr().out.strip() == first
    assert ModelRegistry(root).current(NAME).version == version

    assert _cli(monkeypatch, "registry", "list", NAME, "--root", root, "--json") == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["version"], r["current"]) for r in rows] == [(version, True), ("lora-1", False)]


def test_cli_errors_exit_non_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = str(tmp_path / "registry")
    assert (
        _cli(monkeypatch, "registry", "publish", NAME, str(tmp_path / "nope"), "--root", root) == 1
    )
    assert "no such file" in capsys.readouterr().err
    assert _cli(monkeypatch, "registry", "list", NAME, "--root", root) == 1
    assert "no versions" in capsys.readouterr().err
    src = _model_dir(tmp_path / "a", "a")
    argv = ["registry", "publish", NAME, str(src), "--root", root, "--meta", "novalue"]
    assert _cli(monkeypatch, *argv) == 2
    assert "KEY=VALUE" in capsys.readouterr().err

    a = ModelRegistry(root).publish(NAME, src)
    ModelRegistry(root).publish(NAME, _model_dir(tmp_path / "b", "b"))
    _flip_byte(a.path / "model.bin")
    assert _cli(monkeypatch, "registry", "rollback", NAME, a.version, "--root", root) == 1
    assert "CURRENT is unchanged" in capsys.readouterr().err
    assert _cli(monkeypatch, "registry", "list", NAME, "--root", root, "--verify") == 1
    assert "sha256" in capsys.readouterr().out
    assert _cli(monkeypatch, "registry", "rollback", NAME, "missing", "--root", root) == 1
    assert "does not exist" in capsys.readouterr().err
