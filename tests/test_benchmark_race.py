"""The race of two implementations (benchmarks/race.py) on made-up served.json files: the arguments
each side gets, the ratios per level, and a race cut short that the same command finishes."""

from __future__ import annotations

import json

import pytest

from benchmarks import race

pytestmark = pytest.mark.cpu

UPSTREAM = "vllm-omni serve {checkpoint} --omni --port {port}"


def level(load: int, ttfa_p50: float, audio_s_per_s: float, failed: int = 0) -> dict:
    return {"kind": "closed", "load": load, "ok": 3 * load - failed, "failed": failed,
            "ttfa_ms": {"p50": ttfa_p50, "p90": ttfa_p50 * 1.5, "p99": ttfa_p50 * 2}, "rtf_p50": 0.1,
            "audio_s_per_s": audio_s_per_s}


def write(folder, status: str, levels: list[dict]) -> None:
    folder.mkdir(parents=True)
    (folder / "served.json").write_text(json.dumps({"status": status, "levels": levels}))


def test_each_side_gets_its_own_length_field_and_the_same_load():
    args = race.parse_args(["--pair", "default", UPSTREAM, "--out-dir", "x", "--rows", "100", "--concurrency", "1", "16"])
    ours = race.side_argv(args, "default", None)
    theirs = race.side_argv(args, "default", UPSTREAM)
    assert ours[ours.index("--profile") + 1] == "default" and ours[ours.index("--max-tokens") + 1] == "100"
    assert theirs[theirs.index("--serve-command") + 1] == UPSTREAM and theirs[theirs.index("--max-tokens") + 1] == "0"
    assert json.loads(theirs[theirs.index("--extra-body") + 1]) == {"max_new_tokens": 100}
    for argv in (ours, theirs):
        assert argv[argv.index("--concurrency") + 1:argv.index("--concurrency") + 3] == ["1", "16"]


def test_finished_sides_are_compared_not_run_again(tmp_path, monkeypatch):
    write(tmp_path / "default-ours", "ok", [level(1, 100, 5), level(16, 200, 60, failed=1)])
    write(tmp_path / "default-upstream", "ok", [level(1, 150, 4), level(16, 400, 80)])
    monkeypatch.setattr(race.served, "main", lambda argv: pytest.fail(f"ran again: {argv}"))
    assert race.main(["--pair", "default", UPSTREAM, "--out-dir", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "race.json").read_text())
    one, sixteen = result["pairs"][0]["levels"]
    assert one["TTFA p50 ms"] == {"ours": 100, "upstream": 150, "ratio": pytest.approx(2 / 3)}
    assert sixteen["TTFA p99 ms"]["ratio"] == pytest.approx(0.5) and sixteen["audio s/s"]["ratio"] == pytest.approx(0.75)
    assert sixteen["failed"] == [1, 0]
    table = (tmp_path / "race.md").read_text().splitlines()
    assert table[2] == "| default | 1 | 100 / 150 (0.67) | 200 / 300 (0.67) | 0.1 / 0.1 (1.00) | 5 / 4 (1.25) | 0 / 0 |"


def test_a_side_cut_short_is_run_again_and_the_pair_says_so(tmp_path, monkeypatch):
    write(tmp_path / "default-ours", "ok", [level(1, 100, 5)])
    write(tmp_path / "default-upstream", "a level ran past --level-timeout", [])
    ran = []
    monkeypatch.setattr(race.served, "main", lambda argv: ran.append(argv) or 1)
    assert race.main(["--pair", "default", UPSTREAM, "--out-dir", str(tmp_path)]) == 1
    assert len(ran) == 1 and "--serve-command" in ran[0] and ran[0][-1] == str(tmp_path / "default-upstream")
    pair, = json.loads((tmp_path / "race.json").read_text())["pairs"]
    assert pair["status"] == "not finished: upstream (see its served.json)" and "levels" not in pair


def test_compare_judges_finished_folders_of_earlier_sittings_and_draws_them(tmp_path, monkeypatch):
    write(tmp_path / "a" / "ours", "ok", [level(1, 100, 5), level(16, 300, 90)])
    write(tmp_path / "b" / "theirs", "ok", [level(1, 400, 1), level(16, 600, 9)])
    write(tmp_path / "c" / "ours", "ok", [level(1, 100, 5)])
    write(tmp_path / "c" / "theirs", "killed", [])
    monkeypatch.setattr(race.served, "main", lambda argv: pytest.fail(f"ran: {argv}"))
    out = tmp_path / "race"
    argv = ["--out-dir", str(out), "--compare", "default", str(tmp_path / "a" / "ours"), str(tmp_path / "b" / "theirs"),
            "--compare", "low_latency_v2", str(tmp_path / "c" / "ours"), str(tmp_path / "c" / "theirs")]
    assert race.main(argv) == 1  # one side of the second pair never finished
    done, cut = json.loads((out / "race.json").read_text())["pairs"]
    assert done["ours"] == str(tmp_path / "a" / "ours") and done["levels"][1]["audio s/s"]["ratio"] == pytest.approx(10)
    assert cut["status"] == "not finished: upstream (see its served.json)"
    assert (out / "race.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_race_names_what_to_compare():
    with pytest.raises(SystemExit):
        race.parse_args(["--out-dir", "x"])
