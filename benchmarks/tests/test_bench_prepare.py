"""The suite builds the artefacts its entries need, and says an unavailable row's reason once."""

from __future__ import annotations

from pathlib import Path

import pytest

from flinkai.errors import SetupError
from flinkai_bench.prepare import ARTEFACTS, Artefact, prepare
from flinkai_bench.shared.suite import EntryResult, render_matrix, short_reason

MACHINE = {
    "cpu_model": "Test CPU",
    "cpu_cores": 2,
    "memory_gib": 8.0,
    "devices": {"gpus": []},
    "versions": {"flinkai": "0.1.0"},
}
INT8_WHY = "n/a (/m/all-MiniLM-L6-v2: variant 'int8' (model.int8.onnx) has not been exported)"


class FakeArtefact:
    """A file that exists once built; ``fail`` makes the build leave nothing."""

    def __init__(self, name: str, blocked: str | None = None, fail: bool = False) -> None:
        self.present = False
        self.builds = 0
        self.artefact = Artefact(
            name,
            f"make {name}",
            lambda: None if self.present else f"{name} absent",
            lambda: blocked,
            self._build,
        )
        self.fail = fail

    def _build(self, progress: object) -> None:
        self.builds += 1
        assert callable(progress)
        progress("step 1/1")
        self.present = not self.fail


def test_prepare_builds_only_what_is_missing_for_the_entries_run() -> None:
    int8, hybrid, other = FakeArtefact("int8"), FakeArtefact("hybrid"), FakeArtefact("x")
    hybrid.present = True
    lines: list[str] = []
    table = {"embed": (int8.artefact,), "anomaly": (hybrid.artefact,), "other": (other.artefact,)}
    report = prepare(["embed", "anomaly", "drift"], lines.append, table)
    assert report.built == ("int8",) and report.skipped == ()
    assert (int8.builds, hybrid.builds, other.builds) == (1, 0, 0)
    assert lines == ["prepare: building the int8 (make int8) ...", "  [int8] step 1/1"]
    # a second run finds everything present and builds nothing
    assert prepare(["embed"], lines.append, table).built == ()
    assert int8.builds == 1


def test_an_artefact_this_machine_cannot_build_is_skipped_with_its_reason() -> None:
    lstm = FakeArtefact("lstm", blocked="training needs the torch extra")
    lines: list[str] = []
    report = prepare(["anomaly"], lines.append, {"anomaly": (lstm.artefact,)})
    assert report.skipped == (("lstm", "training needs the torch extra"),)
    assert lstm.builds == 0
    assert lines == ["prepare: cannot build the lstm here: training needs the torch extra"]


def test_a_build_that_leaves_nothing_stops_the_suite() -> None:
    broken = FakeArtefact("int8", fail=True)
    with pytest.raises(SetupError, match="still missing: int8 absent"):
        prepare(["embed"], lambda _: None, {"embed": (broken.artefact,)})


def test_the_suite_knows_what_make_demo_leaves_out() -> None:
    names = {e: [a.command for a in arts] for e, arts in ARTEFACTS.items()}
    assert names == {
        "embed": ["flinkai model quantize"],
        "anomaly": [
            "flinkai model train-anomaly --kind hybrid",
            "flinkai model train-anomaly --kind lstm",
        ],
        "agents": ["flinkai model train-risk"],
    }


def test_missing_risk_models_are_seen_and_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (risk,) = ARTEFACTS["agents"]
    monkeypatch.setenv("FLINKAI_HOME", str(tmp_path))
    why = risk.missing()
    assert why is not None and str(tmp_path) in why and "flinkai model train-risk" in why, why


def test_an_unavailable_row_says_its_reason_once_in_the_note() -> None:
    row = {"backend": "ORT CPU", "precision": "int8", "note": INT8_WHY}
    row |= {f"figure {i}": INT8_WHY for i in range(20)}
    ok = {"backend": "ORT CPU", "precision": "fp32", "figure 0": 12.5, "note": "batch 32"}
    result = EntryResult("embed", "rows", 10, rows=[ok, row])
    matrix = render_matrix([result], MACHINE)
    assert matrix.count("has not been exported") == 1
    lines = matrix.splitlines()

    def cells(marker: str) -> dict[str, str]:
        header = next(line for line in lines if line.startswith("| backend |"))
        row_line = next(line for line in lines if marker in line)
        split = [[c.strip() for c in x.strip("|").split("|")] for x in (header, row_line)]
        return dict(zip(*split, strict=True))

    int8_cells = cells("| int8 |")
    assert int8_cells.pop("note") == INT8_WHY
    assert int8_cells == {"backend": "ORT CPU", "precision": "int8"} | {
        f"figure {i}": "n/a" for i in range(20)
    }
    # a row with figures is left as it is
    assert cells("| fp32 |")["figure 0"] == "12.5" and cells("| fp32 |")["note"] == "batch 32"


def test_short_reason_keeps_what_the_note_does_not_say() -> None:
    assert short_reason(INT8_WHY, INT8_WHY) == "n/a"
    assert short_reason("failed: KeyError: 'x' in the second repeat", "failed: KeyError: 'x' "
                        "in the second repeat; see log") == "failed"  # fmt: skip
    # a reason the note lacks stays whole, and short reasons stay as they are
    why = "n/a (bulk run; per-event latency is measured on the job)"
    assert short_reason(why, "batch 32") == why
    assert short_reason("n/a (no GPU)", "n/a (no GPU: nvidia-smi not found)") == "n/a (no GPU)"
    assert short_reason(12.5, INT8_WHY) == 12.5
