"""One field of a ROW argument, for pandas SQL functions that take ``(row, 'field')``.

Passing a whole row and a field name, as in ``text_to_vector(parse_click(payload),
'click_text')``, lets Flink plan the parse and the model call as one Python operator.
With ``parse_click(payload).click_text`` a Java projection sits between the two
Python calls and Flink plans two operators, each with its own bundle wait.
"""

from __future__ import annotations

import pandas as pd

__all__ = ["row_field"]


def row_field(rows: pd.DataFrame, field: str | pd.Series | None, function: str) -> pd.Series:
    """The column ``field`` of a batch of rows (a ROW argument arrives as a DataFrame).

    Args:
        rows: The ROW argument of one batch.
        field: The field name: a plain value for a SQL literal, or a column that
            names the same field on every row.
        function: The SQL function's name, for the error message.

    Raises:
        ValueError: ``field`` is not one name, or the row has no such field. Both are
            mistakes in the SQL text, the same for every row, so they fail the job.
    """
    name = field
    if isinstance(field, pd.Series):
        names = field.dropna().unique()
        if len(names) != 1:
            raise ValueError(
                f"{function}(row, field): field must name one field for every row, "
                f"got {sorted(map(str, names))}; pass it as a string literal"
            )
        name = names[0]
    if name not in rows.columns:
        raise ValueError(
            f"{function}(row, field): field {name!r} is not in the row; "
            f"its fields are {list(rows.columns)}"
        )
    return rows[name]
