"""The ROW form of text_to_vector picks its field by name, and names a wrong one."""

import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "udfs"))

# udfs/ is a UDF folder, not a package
from vectorizer import _field


def test_field_is_taken_by_name_from_a_literal_or_a_column() -> None:
    rows = pd.DataFrame({"user_id": ["u1", "u2"], "click_text": ["a", None]})
    assert list(_field(rows, "click_text")) == ["a", None]
    assert list(_field(rows, pd.Series(["click_text", "click_text"]))) == ["a", None]


def test_an_unknown_field_names_the_fields_there() -> None:
    rows = pd.DataFrame({"user_id": ["u1"], "click_text": ["a"]})
    with pytest.raises(
        ValueError, match=r"'text' is not in the row; its fields are \['user_id', 'click_text'\]"
    ):
        _field(rows, "text")
    with pytest.raises(ValueError, match="None is not in the row"):
        _field(rows, None)
