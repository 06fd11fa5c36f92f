"""The row-path benchmark (benchmarks/row_path.py) drives the server's own streaming path over its
stepping engine: every request's audio comes out whole, however many rows an output carries."""

from __future__ import annotations

import json

import pytest

from benchmarks import row_path
from higgs_dummy.cache import cached_checkpoint

pytestmark = pytest.mark.cpu


@pytest.mark.parametrize("rows_per_output", [1, 4])
def test_every_stream_delivers_all_its_frames(rows_per_output):
    result = row_path.measure(cached_checkpoint("tiny", 0, "no_eoc"), "many_streams_v2", streams=3, rows=60,
                              rows_per_output=rows_per_output, repeats=1)
    assert result["us_per_row"] > 0 and len(result["wall_s"]) == 1  # measure() raises on any sample missing


def test_the_command_writes_its_figures(tmp_path):
    assert row_path.main(["--streams", "2", "--rows", "40", "--rows-per-output", "3", "--repeats", "1",
                          "--out-dir", str(tmp_path)]) == 0
    out = json.loads((tmp_path / "row_path.json").read_text())
    assert [(r["streams"], r["rows_per_output"]) for r in out["results"]] == [(2, 3)]
