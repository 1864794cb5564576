"""Manifest, artifact validation, Triton config, registry and data set loader: no model needed."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

import pytest

from flinkai.backends import factory
from flinkai.backends.errors import BackendError
from flinkai.backends.onnx import OnnxEmbeddingBackend
from flinkai.config import Config, EmbeddingConfig, ModelConfig, OnnxConfig
from flinkai.datasets import DatasetNotFoundError, load_ag_news
from flinkai.errors import ConfigError, SetupError
from flinkai.models.artifacts import (
    MANIFEST_FILE,
    MODEL_FILE,
    TOKENIZER_FILE,
    ArtifactError,
    ChecksumMismatchError,
    Manifest,
    artifacts_dir,
    build_manifest,
    load_artifacts,
    read_manifest,
    sha256_file,
    write_manifest,
)
from flinkai.models.export import render_triton_config

NAME = "tiny-model"
DIM = 8


def _fake_artifacts(root: Path, *, link: bool = True) -> Manifest:
    """A folder shaped like an export, with made-up bytes instead of a model."""
    root.mkdir(parents=True)
    (root / MODEL_FILE).write_bytes(os.urandom(4096))
    (root / TOKENIZER_FILE).write_text('{"version": "1.0"}')
    triton = root / "triton" / NAME
    (triton / "1").mkdir(parents=True)
    (triton / "config.pbtxt").write_text(render_triton_config(NAME, DIM))
    if link:
        os.link(root / MODEL_FILE, triton / "1" / MODEL_FILE)
    manifest = build_manifest(
        root,
        name=NAME,
        dim=DIM,
        max_seq_length=16,
        source={"package": "test"},
        created_at=datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC),
        extra={"pooling": "mean"},
    )
    write_manifest(root, manifest)
    return manifest


def _config(root: Path) -> ModelConfig:
    return ModelConfig(name=NAME, dir=str(root), dim=DIM, max_seq_length=16)


def test_manifest_describes_every_file(tmp_path: Path) -> None:
    root = tmp_path / "m"
    manifest = _fake_artifacts(root)
    model_sha = sha256_file(root / MODEL_FILE)
    assert manifest.version == model_sha[:12]
    assert [f.path for f in manifest.files] == [
        MODEL_FILE,
        TOKENIZER_FILE,
        f"triton/{NAME}/1/{MODEL_FILE}",
        f"triton/{NAME}/config.pbtxt",
    ]
    assert manifest.file(f"triton/{NAME}/1/{MODEL_FILE}").sha256 == model_sha  # type: ignore[union-attr]
    assert manifest.file(MODEL_FILE).size == 4096  # type: ignore[union-attr]
    assert manifest.input_names == ("input_ids", "attention_mask", "token_type_ids")
    assert manifest.output_names == ("sentence_embedding",)
    assert manifest.outputs[0].shape == ("batch", DIM)
    assert manifest.created_at == "2024-01-02T03:04:05Z"


def test_manifest_json_round_trip(tmp_path: Path) -> None:
    manifest = _fake_artifacts(tmp_path / "m")
    data = json.loads((tmp_path / "m" / MANIFEST_FILE).read_text())
    assert data["pooling"] == "mean"
    assert data["files"][MODEL_FILE]["size"] == 4096
    assert Manifest.from_dict(data) == manifest
    assert read_manifest(tmp_path / "m") == manifest


def test_load_artifacts_paths_and_version(tmp_path: Path) -> None:
    root = tmp_path / "m"
    manifest = _fake_artifacts(root)
    art = load_artifacts(_config(root))
    assert art.model_version == f"{NAME}@{manifest.version}"
    assert art.model_path == root / MODEL_FILE == art.model_file("fp32")
    assert art.tokenizer_path == root / TOKENIZER_FILE
    assert art.triton_repository == root / "triton"
    assert (art.triton_model_dir / "config.pbtxt").is_file()
    assert art.output_name == "sentence_embedding"


def test_variant_not_exported(tmp_path: Path) -> None:
    art = load_artifacts(_config(_root_with_artifacts(tmp_path)))
    with pytest.raises(ArtifactError, match="int8"):
        art.model_file("int8")
    with pytest.raises(ArtifactError, match="unknown model variant"):
        art.model_file("bf16")


def _root_with_artifacts(tmp_path: Path) -> Path:
    root = tmp_path / "m"
    _fake_artifacts(root)
    return root


def test_missing_artifacts_say_how_to_fix(tmp_path: Path) -> None:
    with pytest.raises(SetupError, match="flinkai model export"):
        load_artifacts(_config(tmp_path / "nowhere"))


def test_default_dir_is_under_flinkai_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLINKAI_HOME", str(tmp_path))
    assert artifacts_dir(ModelConfig()) == tmp_path / "models" / "all-MiniLM-L6-v2"
    assert artifacts_dir(ModelConfig(dir=str(tmp_path / "x"))) == tmp_path / "x"


def test_flipped_byte_is_a_checksum_error_naming_the_file(tmp_path: Path) -> None:
    root = _root_with_artifacts(tmp_path)
    path = root / TOKENIZER_FILE
    data = bytearray(path.read_bytes())
    data[3] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ChecksumMismatchError, match="sha256") as info:
        load_artifacts(_config(root))
    assert info.value.path == path
    assert str(path) in str(info.value)
    # Sizes alone do not notice a same-size change.
    load_artifacts(_config(root), verify_checksums=False)


def test_size_change_is_detected_without_hashing(tmp_path: Path) -> None:
    root = _root_with_artifacts(tmp_path)
    with (root / MODEL_FILE).open("ab") as f:
        f.write(b"x")
    with pytest.raises(ChecksumMismatchError, match="size"):
        load_artifacts(_config(root), verify_checksums=False)


def test_copied_triton_model_is_checked_too(tmp_path: Path) -> None:
    root = tmp_path / "m"
    _fake_artifacts(root, link=False)
    art = load_artifacts(_config(root))  # the manifest was built before the copy existed
    assert art.manifest.file(f"triton/{NAME}/1/{MODEL_FILE}") is None
    copy = root / "triton" / NAME / "1" / MODEL_FILE
    copy.write_bytes((root / MODEL_FILE).read_bytes())
    write_manifest(root, build_manifest(root, name=NAME, dim=DIM, max_seq_length=16, source={}))
    copy.write_bytes(b"\0" * 4096)
    with pytest.raises(ChecksumMismatchError) as info:
        load_artifacts(_config(root))
    assert info.value.path == copy


def test_missing_file(tmp_path: Path) -> None:
    root = _root_with_artifacts(tmp_path)
    (root / TOKENIZER_FILE).unlink()
    with pytest.raises(ArtifactError, match=r"tokenizer\.json is missing"):
        load_artifacts(_config(root))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"name": "other"}, "holds model"),
        ({"dim": 16}, "dim"),
    ],
)
def test_config_must_match_manifest(
    tmp_path: Path, change: dict[str, object], message: str
) -> None:
    root = _root_with_artifacts(tmp_path)
    cfg = replace(_config(root), **change)  # type: ignore[arg-type]
    with pytest.raises(ArtifactError, match=message):
        load_artifacts(cfg)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.pop("version"), "invalid manifest"),
        (lambda d: d.update(format_version=99), "format 99"),
        (
            lambda d: d["files"].update({"../escape": {"sha256": "0", "size": 1}}),
            "invalid file path",
        ),
        (lambda d: d["files"].pop(MODEL_FILE), "does not list model.onnx"),
        (lambda d: d.update(dim="wide"), "invalid manifest"),
    ],
)
def test_bad_manifests_are_rejected(tmp_path: Path, edit: object, message: str) -> None:
    root = _root_with_artifacts(tmp_path)
    data = json.loads((root / MANIFEST_FILE).read_text())
    edit(data)  # type: ignore[operator]
    (root / MANIFEST_FILE).write_text(json.dumps(data))
    with pytest.raises(ArtifactError, match=message):
        load_artifacts(_config(root))


def test_unreadable_manifest(tmp_path: Path) -> None:
    root = _root_with_artifacts(tmp_path)
    (root / MANIFEST_FILE).write_text("{not json")
    with pytest.raises(ArtifactError, match="cannot read manifest"):
        read_manifest(root)
    (root / MANIFEST_FILE).write_text("[]")
    with pytest.raises(ArtifactError, match="JSON object"):
        read_manifest(root)


# -- Triton config -------------------------------------------------------------------


def _model_config_pb2() -> ModuleType | None:
    """Triton's ModelConfig proto, loaded from tritonclient without its gRPC stubs."""
    spec = importlib.util.find_spec("tritonclient")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "grpc" / "model_config_pb2.py"
    if not path.is_file():
        return None
    mod_spec = importlib.util.spec_from_file_location("_triton_model_config_pb2", path)
    assert mod_spec is not None and mod_spec.loader is not None
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("kind", ["gpu", "cpu"])
def test_triton_config_parses_as_model_config(kind: str) -> None:
    text = render_triton_config("all-MiniLM-L6-v2", 384, instance_kind=kind)  # type: ignore[arg-type]
    pb2 = _model_config_pb2()
    if pb2 is None:
        pytest.skip("tritonclient is not installed: cannot parse config.pbtxt")
    from google.protobuf import text_format

    cfg = text_format.Parse(text, pb2.ModelConfig())
    assert cfg.name == "all-MiniLM-L6-v2"
    assert cfg.backend == "onnxruntime"
    assert cfg.max_batch_size == 64
    assert [(i.name, list(i.dims), i.data_type) for i in cfg.input] == [
        (n, [-1], pb2.TYPE_INT64) for n in ("input_ids", "attention_mask", "token_type_ids")
    ]
    assert [(o.name, list(o.dims), o.data_type) for o in cfg.output] == [
        ("sentence_embedding", [384], pb2.TYPE_FP32)
    ]
    assert list(cfg.dynamic_batching.preferred_batch_size) == [16, 32, 64]
    assert cfg.dynamic_batching.max_queue_delay_microseconds > 0
    want = pb2.ModelInstanceGroup.KIND_GPU if kind == "gpu" else pb2.ModelInstanceGroup.KIND_CPU
    assert [g.kind for g in cfg.instance_group] == [want]


def test_triton_config_rejects_oversized_preferred_batch() -> None:
    with pytest.raises(ConfigError):
        render_triton_config("m", 4, max_batch_size=8, preferred_batch_sizes=(16,))


# -- registry and backend without artifacts ------------------------------------------


def test_registry_builds_the_configured_backend(tmp_path: Path) -> None:
    cfg = Config(model=_config(tmp_path / "absent"))
    backend = factory.create_embedding_backend(cfg)
    assert isinstance(backend, OnnxEmbeddingBackend)
    assert backend.dim == DIM and not backend.loaded


def test_registry_names_a_missing_backend_module(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(factory.BACKENDS, "triton", ("flinkai.backends._absent_module", "X"))
    cfg = Config().with_overrides(embedding={"backend": "triton"})
    with pytest.raises(ConfigError, match="_absent_module"):
        factory.create_embedding_backend(cfg)


def test_onnx_backend_needs_load_and_artifacts(tmp_path: Path) -> None:
    backend = OnnxEmbeddingBackend(model=_config(tmp_path / "absent"))
    with pytest.raises(BackendError, match="before load"):
        backend.infer_batch(["x"])
    with pytest.raises(SetupError, match="flinkai model export"):
        backend.load()
    assert backend.model_version == "unknown"


def test_onnx_backend_rejects_bad_batch_size() -> None:
    with pytest.raises(ConfigError, match="batch_size"):
        OnnxEmbeddingBackend(embedding=EmbeddingConfig(batch_size=0))


@pytest.mark.parametrize(
    ("provider", "available", "chosen", "warns"),
    [
        ("cpu", ["CPUExecutionProvider"], ("CPUExecutionProvider",), False),
        ("cuda", ["CPUExecutionProvider"], ("CPUExecutionProvider",), True),
        (
            "cuda",
            ["CUDAExecutionProvider", "CPUExecutionProvider"],
            ("CUDAExecutionProvider", "CPUExecutionProvider"),
            False,
        ),
        (
            "tensorrt",
            ["CUDAExecutionProvider", "CPUExecutionProvider"],
            ("CUDAExecutionProvider", "CPUExecutionProvider"),
            True,
        ),
    ],
)
def test_provider_fallback_is_logged(
    caplog: pytest.LogCaptureFixture,
    provider: str,
    available: list[str],
    chosen: tuple[str, ...],
    warns: bool,
) -> None:
    backend = OnnxEmbeddingBackend(onnx=OnnxConfig(provider=provider))  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="flinkai.backends.onnx"):
        assert backend._providers(available) == chosen
    assert bool(caplog.records) == warns
    if warns:
        assert "using " + ", ".join(chosen) in caplog.text


# -- data set loader -----------------------------------------------------------------


def test_load_ag_news(tmp_path: Path) -> None:
    path = tmp_path / "news.csv"
    path.write_text(
        '"3","Title one","Body with a\\continuation."\n"1"," Spaced ","  padded  "\n"2","T","D"\n'
    )
    assert load_ag_news(path) == [
        (3, "Title one. Body with a\\continuation."),
        (1, "Spaced. padded"),
        (2, "T. D"),
    ]
    assert load_ag_news(path, limit=1) == [(3, "Title one. Body with a\\continuation.")]


def test_load_ag_news_errors(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError, match="FLINKAI_DATASETS_DIR"):
        load_ag_news(tmp_path / "absent.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text('"x","t","d"\n')
    with pytest.raises(SetupError, match=r"bad.csv:1"):
        load_ag_news(bad)
