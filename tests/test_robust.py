"""conformance/tools/robust.py without running the suite: its configurations, the busy load's lifecycle,
the counts it reads, its summary and exit status; and the decode threads the tests honour."""

import os
import subprocess
import time
from collections import Counter

import pytest
import torch

from conformance.tools import robust
from higgs_dummy.codec_instances import decode_threads, one_torch_thread

pytestmark = pytest.mark.cpu

ISA = {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "ONEDNN_MAX_CPU_ISA": "SSE41"}


def test_each_configuration_limits_the_isa_sets_its_threads_and_its_own_compile_caches():
    base = {"PATH": "/bin", "VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "16", "ATEN_CPU_CAPABILITY": "avx512"}
    one, busy = robust.CONFIGS["baseline-isa-1-thread"], robust.CONFIGS["baseline-isa-2-threads-busy"]
    caches = robust.COMPILE_CACHES
    assert one.env(base) == {"PATH": "/bin", "VLLM_CPU_KVCACHE_SPACE": "1", **ISA,
                             "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HIGGS_TORCH_THREADS": "1",
                             "TORCHINDUCTOR_CACHE_DIR": str(caches / "baseline-isa-1-thread" / "inductor"),
                             "VLLM_CACHE_ROOT": str(caches / "baseline-isa-1-thread" / "vllm")}
    assert busy.env(base) == {**one.env(base), "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2", "HIGGS_TORCH_THREADS": "2",
                              "TORCHINDUCTOR_CACHE_DIR": str(caches / "baseline-isa-2-threads-busy" / "inductor"),
                              "VLLM_CACHE_ROOT": str(caches / "baseline-isa-2-threads-busy" / "vllm")}
    assert (one.busy_processes, busy.busy_processes) == (0, 2)
    assert base["OMP_NUM_THREADS"] == "16"  # the caller's environment is left alone


def test_the_command_line_names_configurations_and_passes_the_rest_to_pytest(capsys):
    args = robust.parse(["--config", "baseline-isa-1-thread", "--", "tests/test_gate_diff.py", "-x"])
    assert args.config == ["baseline-isa-1-thread"]
    assert (args.pytest_args, args.load_seconds) == (["tests/test_gate_diff.py", "-x"], 5400)
    with pytest.raises(SystemExit) as exit_:
        robust.parse(["--config", "avx512"])
    assert exit_.value.code == 2 and "invalid choice: 'avx512'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        robust.parse(["--load-seconds", "0"])
    assert "--load-seconds must be 1 or more, got 0" in capsys.readouterr().err


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _busy_children(pid: int) -> list[int]:
    """The busy loops `timeout` runs (its children)."""
    return [int(c) for c in open(f"/proc/{pid}/task/{pid}/children").read().split()]


def test_the_busy_load_runs_its_processes_and_ends_them_all_when_the_block_ends():
    with robust.BusyLoad(2, seconds=120) as load:
        assert len(load.processes) == 2 and all(p.poll() is None for p in load.processes)
        deadline = time.monotonic() + 20
        while not all(_busy_children(p.pid) for p in load.processes) and time.monotonic() < deadline:
            time.sleep(0.1)
        loops = [c for p in load.processes for c in _busy_children(p.pid)]
        assert len(loops) == 2
        assert all(robust.BUSY_LOOP in open(f"/proc/{c}/cmdline").read().replace("\0", " ") for c in loops)
        assert not load.expired()
    assert all(p.returncode is not None for p in load.processes)
    deadline = time.monotonic() + 10
    while any(_group_alive(p.pid) for p in load.processes) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_group_alive(p.pid) for p in load.processes)  # `timeout` and its busy loop


def test_the_busy_load_stops_by_itself_when_its_time_runs_out():
    with robust.BusyLoad(1, seconds=1) as load:
        load.processes[0].wait(15)
        assert load.expired() and load.processes[0].returncode == 124  # `timeout`'s status when time ran out


def test_no_load_is_no_process():
    with robust.BusyLoad(0, seconds=1) as load:
        assert load.processes == [] and not load.expired()


def test_the_counts_come_from_the_junit_xml(tmp_path):
    xml = tmp_path / "junit.xml"
    xml.write_text("""<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="t" name="a"/><testcase classname="t" name="b"/>
<testcase classname="t" name="c"><failure message="x">x</failure></testcase>
<testcase classname="t" name="d"><error message="fixture">x</error></testcase>
<testcase classname="t" name="e"><skipped type="pytest.skip" message="needs a GPU"/></testcase>
<testcase classname="t" name="f"><skipped type="pytest.xfail" message="negative control"/></testcase>
</testsuite></testsuites>""")
    assert robust.junit_counts(xml) == Counter(passed=2, failed=1, errors=1, skipped=1, xfailed=1)


def test_the_summary_names_each_configuration_and_the_total_and_any_failure_exits_1(monkeypatch, capsys):
    results = {"baseline-isa-1-thread": robust.Result("baseline-isa-1-thread", 0, Counter(passed=3, skipped=1), 12.4),
               "baseline-isa-2-threads-busy": robust.Result("baseline-isa-2-threads-busy", 1,
                                                            Counter(passed=2, failed=1, skipped=1), 20.0)}
    calls = []
    def fake_run(config, args, seconds):
        calls.append((config.name, args))
        return results[config.name]

    monkeypatch.setattr(robust, "run_config", fake_run)
    assert robust.main(["--", "tests/test_gate_diff.py"]) == 1
    assert calls == [("baseline-isa-1-thread", ["tests/test_gate_diff.py"]),
                     ("baseline-isa-2-threads-busy", ["tests/test_gate_diff.py"])]
    out = capsys.readouterr().out.splitlines()
    assert out[-3:] == [
        "[baseline-isa-1-thread] passed 3, failed 0, errors 0, skipped 1, xfailed 0 in 12 s: PASS",
        "[baseline-isa-2-threads-busy] passed 2, failed 1, errors 0, skipped 1, xfailed 0 in 20 s: FAIL (pytest exit 1)",
        "total: passed 5, failed 1, errors 0, skipped 2, xfailed 0; 1 of 2 configurations passed"]
    assert robust.main(["--config", "baseline-isa-1-thread"]) == 0


def test_a_configuration_whose_limits_did_not_take_effect_fails_without_running(monkeypatch):
    monkeypatch.setattr(robust, "probe", lambda env: ("AVX512", 1, False))
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("the suite ran"))
    result = robust.run_config(robust.CONFIGS["baseline-isa-1-thread"], [], 60)
    assert not result.ok
    assert result.problem == "the limits did not take effect: torch sees AVX512 with 1 thread(s), expected DEFAULT with 1"


def test_a_configuration_runs_pytest_with_its_environment_beside_its_load_and_reads_the_counts(monkeypatch):
    monkeypatch.setattr(robust, "probe", lambda env: ("DEFAULT", 2, False))
    loads, seen = [], {}

    class RecordedLoad(robust.BusyLoad):
        def __enter__(self):
            loads.append(super().__enter__())
            return self

    def fake_pytest(cmd, cwd, env):
        xml = next(a.removeprefix("--junitxml=") for a in cmd if a.startswith("--junitxml="))
        with open(xml, "w") as f:
            f.write('<testsuites><testsuite><testcase classname="t" name="a"/>'
                    '<testcase classname="t" name="b"><skipped type="pytest.xfail"/></testcase></testsuite></testsuites>')
        seen.update(cmd=cmd, cwd=cwd, threads=env["OMP_NUM_THREADS"], load=[p.poll() is None for p in loads[0].processes])
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(robust, "BusyLoad", RecordedLoad)
    monkeypatch.setattr(subprocess, "run", fake_pytest)
    result = robust.run_config(robust.CONFIGS["baseline-isa-2-threads-busy"], ["tests/test_gate_diff.py"], 60)
    assert result.ok and result.counts == Counter(passed=1, failed=0, errors=0, skipped=0, xfailed=1)
    assert seen["cmd"][1:5] == ["-m", "pytest", "-m", "not gpu"] and seen["cmd"][-1] == "tests/test_gate_diff.py"
    assert (seen["cwd"], seen["threads"], seen["load"]) == (robust.ROOT, "2", [True, True])  # busy during the run
    assert all(p.returncode is not None for p in loads[0].processes)  # and ended after it


def test_the_probe_sees_the_limits_of_a_configuration():
    env = robust.CONFIGS["baseline-isa-2-threads-busy"].env(os.environ)
    assert robust.probe(env) == ("DEFAULT", 2, torch.cpu._is_amx_tile_supported())


def test_on_a_cpu_with_amx_the_bfloat16_engines_are_left_out_and_the_summary_says_so(monkeypatch, capsys):
    monkeypatch.setattr(robust, "probe", lambda env: ("DEFAULT", 1, True))
    seen = {}

    def fake_pytest(cmd, cwd, env):
        seen["cmd"] = cmd
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(subprocess, "run", fake_pytest)
    result = robust.run_config(robust.CONFIGS["baseline-isa-1-thread"], ["-x"], 60)
    assert seen["cmd"][-2:] == ["--deselect=tests/test_benchmark_smoke.py", "-x"]
    assert result.left_out == robust.AMX_LEFT_OUT and "test_benchmark_smoke.py" in result.line()
    assert "left out: bfloat16 engines under ONEDNN_MAX_CPU_ISA=SSE41" in capsys.readouterr().out


def test_the_decode_threads_follow_higgs_torch_threads(monkeypatch):
    monkeypatch.delenv("HIGGS_TORCH_THREADS", raising=False)
    assert decode_threads() == 1
    monkeypatch.setenv("HIGGS_TORCH_THREADS", "2")
    before = torch.get_num_threads()
    with one_torch_thread():
        assert torch.get_num_threads() == 2
    assert torch.get_num_threads() == before
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("HIGGS_TORCH_THREADS", bad)
        with pytest.raises(ValueError, match=f"HIGGS_TORCH_THREADS='{bad}': expected a whole number of threads"):
            decode_threads()
