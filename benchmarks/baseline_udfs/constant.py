"""A pandas UDF with ``text_to_vector``'s signature that neither tokenises nor runs a model.

``flinkai bench ceiling`` runs it beside the null model to separate tokenising from
the rest of the data path: every row gets the same 384-float vector.
"""

import numpy as np
import pandas as pd
from pyflink.table import DataTypes
from pyflink.table.udf import udf

ROW = DataTypes.ROW(
    [
        DataTypes.FIELD("embedding", DataTypes.ARRAY(DataTypes.FLOAT())),
        DataTypes.FIELD("model_version", DataTypes.STRING()),
        DataTypes.FIELD("error", DataTypes.STRING()),
        DataTypes.FIELD("embedding_f32", DataTypes.BYTES()),
    ]
)

_VECTOR = np.full(384, 1.0 / np.sqrt(384), dtype=np.float32)
_F32 = _VECTOR.tobytes()


@udf(result_type=ROW, func_type="pandas")
def text_to_vector_constant(rows: pd.DataFrame, field: pd.Series) -> pd.DataFrame:
    n = len(rows)
    return pd.DataFrame(
        {
            "embedding": [_VECTOR] * n,
            "model_version": ["constant"] * n,
            "error": [None] * n,
            "embedding_f32": [None] * n,
        }
    )


@udf(result_type=ROW, func_type="pandas")
def text_to_vector_constant_f32(rows: pd.DataFrame, field: pd.Series) -> pd.DataFrame:
    n = len(rows)
    return pd.DataFrame(
        {
            "embedding": [None] * n,
            "model_version": ["constant"] * n,
            "error": [None] * n,
            "embedding_f32": [_F32] * n,
        }
    )
