"""The ROW form of the model functions picks its field by name, and names a wrong one."""

import pandas as pd
import pytest

from flinkai.functions.rows import row_field


def test_field_is_taken_by_name_from_a_literal_or_a_column() -> None:
    rows = pd.DataFrame({"user_id": ["u1", "u2"], "click_text": ["a", None]})
    assert list(row_field(rows, "click_text", "f")) == ["a", None]
    assert list(row_field(rows, pd.Series(["click_text", "click_text"]), "f")) == ["a", None]


def test_an_unknown_field_names_the_function_and_the_fields_there() -> None:
    rows = pd.DataFrame({"user_id": ["u1"], "click_text": ["a"]})
    with pytest.raises(
        ValueError,
        match=r"text_to_vector\(row, field\): field 'text' is not in the row; "
        r"its fields are \['user_id', 'click_text'\]",
    ):
        row_field(rows, "text", "text_to_vector")
    with pytest.raises(ValueError, match="None is not in the row"):
        row_field(rows, None, "predict")


def test_a_column_naming_different_fields_per_row_is_refused() -> None:
    rows = pd.DataFrame({"a": ["x", "y"], "b": ["p", "q"]})
    with pytest.raises(ValueError, match=r"must name one field for every row, got \['a', 'b'\]"):
        row_field(rows, pd.Series(["a", "b"]), "predict")
