"""benchmarks/front_end.py drives vLLM's own front end (its msgpack decoder and OutputProcessor) with talker steps:
every request gets an output a step, and with the codes the speech API reads each row back."""

from __future__ import annotations

import json

import pytest

from benchmarks import front_end

pytestmark = pytest.mark.cpu


@pytest.mark.parametrize("way", front_end.WAYS)
def test_every_request_gets_its_row_each_step(way):
    result = front_end.measure(streams=3, steps=4, way=way, repeats=1)  # raises on a missing or unreadable output
    assert result["total_us"] > 0 and len(result["repeats"]["process_us"]) == 1


def test_the_codes_travel_only_in_the_codes_way():
    with_codes, token_only = (front_end.step_messages(["r0"], 1, codes) for codes in (True, False))
    assert sum(map(len, with_codes[0])) > sum(map(len, token_only[0]))


def test_the_command_writes_its_figures(tmp_path):
    assert front_end.main(["--streams", "2", "--steps", "3", "--repeats", "1", "--out-dir", str(tmp_path)]) == 0
    out = json.loads((tmp_path / "front_end.json").read_text())
    assert [(r["streams"], r["way"]) for r in out["results"]] == [(2, "codes"), (2, "token_only")]
