"""benchmarks/pyspy_shares.py: each thread's busy samples from a py-spy raw profile, split as a
speech server runs (its event loop, vLLM's engine core process, its other threads)."""

from __future__ import annotations

import gzip

import pytest

from benchmarks import pyspy_shares

pytestmark = pytest.mark.cpu

SERVER = 'process 10:"python3 -m reference.serve"'
RAW = "\n".join([
    f"{SERVER};_run_module_as_main (<frozen runpy>:198);Runner.run (asyncio/runners.py:118);pcm16 (reference/serve/wav.py:24) 6",
    f"{SERVER};_run_module_as_main (<frozen runpy>:198);Runner.run (asyncio/runners.py:118);feed (reference/codec/stage_stream.py:153);"
    "feed (reference/codec/stage_stream.py:150) 2",
    f'{SERVER};process 11:"VLLM::EngineCore";spawn_main (multiprocessing/spawn.py:122);'
    "EngineCoreProc.run_engine_core (vllm/v1/engine/core.py:900) 5",
    f"{SERVER};Thread._bootstrap (threading.py:1030);CodecStage.decode_jobs (reference/codec/stage.py:208) 3",
]) + "\n"


def test_each_thread_gets_its_own_samples_and_a_function_counts_once_a_stack():
    total, loop = pyspy_shares.shares(RAW.splitlines(), "loop")
    assert total == 8 and loop["pcm16 (reference/serve/wav.py)"] == 6
    assert loop["feed (reference/codec/stage_stream.py)"] == 2, "two lines of one function in one stack count once"
    total, engine = pyspy_shares.shares(RAW.splitlines(), "engine")
    assert total == 5 and 'process 11:"VLLM::EngineCore"' not in engine
    assert pyspy_shares.shares(RAW.splitlines(), "other")[0] == 3


def test_the_command_reads_gzip_and_says_when_a_thread_has_no_samples(tmp_path, capsys):
    profile = tmp_path / "pyspy.txt.gz"
    profile.write_bytes(gzip.compress(RAW.encode()))
    assert pyspy_shares.main([str(profile), "--match", "pcm16"]) == 0
    out = capsys.readouterr().out
    assert "8 samples of the loop thread" in out and " 75.0%  pcm16" in out and "feed" not in out
    empty = tmp_path / "empty.txt"
    empty.write_text(RAW.splitlines()[0] + "\n")
    with pytest.raises(SystemExit, match="no samples of the engine thread"):
        pyspy_shares.main([str(empty), "--thread", "engine"])
