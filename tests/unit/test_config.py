from pathlib import Path

import pytest

from flinkai.config import Config, load_config
from flinkai.errors import ConfigError


def test_defaults_load_from_the_repo_yaml() -> None:
    config = load_config(env={})
    assert config.model.dim == 384
    assert config.vars["CLICKS_TOPIC"] == "clicks"


def test_env_overrides_are_typed() -> None:
    config = load_config(
        env={"FLINKAI_EMBEDDING_BATCH_SIZE": "8", "FLINKAI_EMBEDDING_SORT_BY_LENGTH": "no"}
    )
    assert config.embedding.batch_size == 8
    assert config.embedding.sort_by_length is False


def test_optional_values_take_null_from_yaml_and_env(tmp_path: Path) -> None:
    assert load_config(env={}).embedding.max_padding == 0.2
    assert load_config(env={"FLINKAI_EMBEDDING_MAX_PADDING": "0.5"}).embedding.max_padding == 0.5
    assert load_config(env={"FLINKAI_EMBEDDING_MAX_PADDING": "null"}).embedding.max_padding is None
    path = tmp_path / "c.yaml"
    path.write_text("embedding: {max_padding: null}")
    assert load_config(path, env={}).embedding.max_padding is None


def test_config_is_frozen_and_round_trips_through_json() -> None:
    config = load_config(env={})
    assert Config.from_json(config.to_json()) == config
    with pytest.raises(AttributeError):
        config.model.name = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.vars["X"] = "1"  # type: ignore[index]


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        ("kafka: {bootstrap_servrs: x}", "unknown key"),
        ("onnx: {provider: gpu}", "not one of"),
        ("llm: {store_dtype: bfloat16}", "not one of"),
        ("embedding: {batch_size: many}", "expected int"),
        ("embedding: {batch_size: 0}", "batch_size must be >= 1"),
        ("embedding: {max_padding: -0.5}", "max_padding must be >= 0"),
        ("embedding: {max_padding: lots}", "expected float"),
        ("- a list", "top level must be a mapping"),
        ("kafka: [1", "invalid YAML"),
    ],
)
def test_bad_config_files_fail_clearly(tmp_path: Path, yaml_text: str, message: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError, match=message):
        load_config(path, env={})


def test_missing_config_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml", env={})
