"""NAB-layout folders (flinkai.anomaly.nab): the loader, windows as rows, probation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from flinkai.anomaly import nab
from flinkai.anomaly.errors import NabDataError
from flinkai.anomaly.nab import LabelledSeries, Window


def test_require_nab_folder(tmp_path: Path) -> None:
    with pytest.raises(NabDataError, match=r"NAB data not found at .*shared subset"):
        nab.require_nab_folder(tmp_path)
    (tmp_path / "data").mkdir()
    with pytest.raises(NabDataError):  # data/ without a windows file
        nab.require_nab_folder(tmp_path)
    (tmp_path / "labels").mkdir()
    (tmp_path / "labels" / "combined_windows.json").write_text("{}")
    assert nab.require_nab_folder(tmp_path) == tmp_path  # a clone of NAB's layout


def test_probationary_length() -> None:
    assert nab.probationary_length(4032) == 604
    assert nab.probationary_length(15902) == 750
    assert nab.probationary_length(10) == 1
    assert nab.probationary_length(100, 0.0) == 0


def test_windows_to_rows_exact_and_between_timestamps() -> None:
    ts = pd.date_range("2020-01-01", periods=10, freq="5min").to_numpy()
    exact = [(pd.Timestamp("2020-01-01 00:10"), pd.Timestamp("2020-01-01 00:20"))]
    between = [(pd.Timestamp("2020-01-01 00:11"), pd.Timestamp("2020-01-01 00:24"))]
    assert nab.windows_to_rows("x", ts, exact) == (Window(2, 4),)
    assert nab.windows_to_rows("x", ts, between) == (Window(3, 4),)
    with pytest.raises(NabDataError, match="holds no row"):
        nab.windows_to_rows("x", ts, [(pd.Timestamp("2020-01-01 00:11"),) * 2])


def test_windows_to_rows_keeps_file_order_when_an_hour_repeats() -> None:
    # As NAB's machine_temperature_system_failure.csv: 02:00-02:55 recorded twice.
    first = pd.date_range("2014-01-07 01:00", "2014-01-07 02:55", freq="5min")
    again = pd.date_range("2014-01-07 02:00", "2014-01-07 04:00", freq="5min")
    ts = np.concatenate([first.to_numpy(), again.to_numpy()])
    later = [(pd.Timestamp("2014-01-07 03:00"), pd.Timestamp("2014-01-07 03:30"))]
    assert nab.windows_to_rows("x", ts, later) == (Window(36, 42),)
    # A window over the repeated hour spans both copies, first row to last.
    repeated = [(pd.Timestamp("2014-01-07 02:50"), pd.Timestamp("2014-01-07 02:55"))]
    assert nab.windows_to_rows("x", ts, repeated) == (Window(22, 35),)


def _write_folder(root: Path, windows: dict[str, list[list[str]]]) -> None:
    group = root / "data" / "myGroup"
    group.mkdir(parents=True)
    ts = pd.date_range("2021-06-01", periods=20, freq="h")
    pd.DataFrame({"timestamp": ts.strftime("%Y-%m-%d %H:%M:%S"), "value": range(20)}).to_csv(
        group / "s.csv", index=False
    )
    (root / "combined_windows.json").write_text(json.dumps(windows))


def test_load_nab_folder_reads_any_group(tmp_path: Path) -> None:
    windows = {"myGroup/s.csv": [["2021-06-01 05:00:00.000000", "2021-06-01 08:00:00.000000"]]}
    _write_folder(tmp_path, windows)
    loaded = nab.load_nab_folder(tmp_path)
    assert list(loaded) == ["myGroup/s.csv"]
    series = loaded["myGroup/s.csv"]
    assert series.labels == LabelledSeries("myGroup/s.csv", 20, (Window(5, 8),))
    assert series.values[-1] == 19.0
    assert nab.load_nab_folder(tmp_path, groups=["otherGroup"]) == {}


def test_load_nab_folder_reads_a_nab_clone_with_labels_folder(tmp_path: Path) -> None:
    windows = {"myGroup/s.csv": [["2021-06-01 05:00:00.000000", "2021-06-01 08:00:00.000000"]]}
    _write_folder(tmp_path, windows)
    (tmp_path / "labels").mkdir()
    (tmp_path / "combined_windows.json").rename(tmp_path / "labels" / "combined_windows.json")
    assert nab.load_nab_folder(tmp_path)["myGroup/s.csv"].labels.windows == (Window(5, 8),)


def test_load_nab_folder_requires_windows_for_every_file(tmp_path: Path) -> None:
    _write_folder(tmp_path, {"otherGroup/s.csv": []})
    with pytest.raises(NabDataError, match="no entry"):
        nab.load_nab_folder(tmp_path)
