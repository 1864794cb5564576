"""What the anomaly operator's workers import: no pandas, no NAB scorer, no bench code."""

from __future__ import annotations

import json
import subprocess
import sys

_PROBE = """
import json, sys
import flinkai.operators.anomaly
from flinkai.anomaly.keyed import open_model
open_model("zscore"); open_model("cad")
print(json.dumps(sorted(sys.modules)))
"""


def _modules_after(code: str) -> set[str]:
    # A fresh interpreter: this test process has imported half the project already.
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_operator_imports_neither_pandas_nor_the_nab_scorer() -> None:
    loaded = _modules_after(_PROBE)
    assert "flinkai.operators.anomaly" in loaded  # the probe ran what it says
    assert "flinkai.anomaly.keyed" in loaded
    assert "pandas" not in loaded
    assert "flinkai.anomaly.nab" not in loaded
    assert not {m for m in loaded if m.startswith("flinkai_bench")}
    # Nor the heavy or research-only dependencies of the other detectors.
    assert not {"torch", "onnxruntime", "river", "sortedcontainers"} & loaded


def test_the_probe_sees_pandas_when_the_loader_is_imported() -> None:
    # The same probe detects a pandas import, so the test above can fail.
    loaded = _modules_after(_PROBE.replace("print(", "import flinkai.anomaly.nab\nprint("))
    assert {"pandas", "flinkai.anomaly.nab"} <= loaded
