"""README.md's quickstart as a newcomer runs it: its commands and its client snippet as written,
outside tox's environment (no VLLM_CPU_KVCACHE_SPACE: the KV cache is the profile's), and
`higgs-serve --help` without torch, vLLM or the web stack imported.

The commands run in a scratch folder with the interpreter of this environment for `.tox/cpu/bin/`
(tox's, in CI), without the variables tox.ini sets; the thread settings of conftest.py stay (they
share the cores with the suite's other workers and size no memory). The server gets a free port
(appended to the README's command line), and the snippet that port for its 8000, the server's default."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import av
import httpx
import psutil
import pytest

from conformance.serving.serving_client import BOOT_TIMEOUT_S, die_with_parent, free_port
from reference.serve.__main__ import SERVED_MODEL_NAME, parse_args

ROOT = Path(__file__).resolve().parents[1]
BIN = ".tox/cpu/bin/"
TOX_SET_ENV = ("VLLM_CPU_KVCACHE_SPACE", "TOKENIZERS_PARALLELISM", "HIGGS_WEIGHTS")  # tox.ini [testenv] set_env
HEAVY = ("torch", "vllm", "fastapi", "uvicorn", "transformers", "numpy")
MAX_TREE_BYTES = 4 << 30  # issue 54's goal: the tiny checkpoint's server, all its processes, <= 4 GiB
STOP_TIMEOUT_S = 60


def readme_block(marker: str) -> str:
    """The indented code block after `<!-- quickstart: MARKER -->` in README.md, dedented."""
    text, mark = (ROOT / "README.md").read_text(), f"<!-- quickstart: {marker} -->\n"
    assert mark in text, f"README.md has no {mark.strip()} before its quickstart's block"
    lines = text.split(mark, 1)[1].splitlines()
    while not lines[0].strip():
        lines.pop(0)
    block = []
    for line in lines:
        if line.strip() and not line.startswith("    "):
            break
        block.append(line[4:])
    return "\n".join(block).strip() + "\n"


def env_command(line: str) -> list[str]:
    """A quickstart line's argv, `.tox/cpu/bin/X` being this environment's X."""
    argv = shlex.split(line, comments=True)
    assert argv[0].startswith(BIN), f"README quickstart: {line!r} does not run from {BIN}"
    program = Path(sys.executable).parent / argv[0].removeprefix(BIN)
    assert program.exists(), f"{program}: not installed; `pip install -e .` installs pyproject.toml's [project.scripts]"
    return [str(program), *argv[1:]]


def newcomer_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in TOX_SET_ENV}


def tree_peak_bytes(pid: int) -> int:
    """The sum of the peak resident sizes (VmHWM) of a process and its descendants: at least their
    resident size together at any moment so far (shared pages are counted once per process)."""
    total = 0
    for proc in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]:
        try:
            status = Path(f"/proc/{proc.pid}/status").read_text()
        except OSError:  # ended meanwhile
            continue
        total += int(re.search(r"^VmHWM:\s+(\d+) kB", status, re.M).group(1)) * 1024
    return total


def test_help_answers_before_any_heavy_import():
    """--help needs only argparse: neither torch, vLLM nor the web stack is imported (they took 11 s),
    by `python -m reference.serve` or by the console script."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "reference.serve", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("usage: higgs-serve"), done.stdout + done.stderr[-2000:]
    imported = {line.split("|")[-1].strip().split(".")[0] for line in done.stderr.splitlines() if "|" in line}
    assert not imported & set(HEAVY), f"--help imported {sorted(imported & set(HEAVY))}"
    began = time.monotonic()
    script = subprocess.run(env_command(f"{BIN}higgs-serve --help"), capture_output=True, text=True, timeout=60)
    print(f"higgs-serve --help: {time.monotonic() - began:.2f} s")
    assert script.returncode == 0 and "--served-model-name" in script.stdout, script.stderr


@pytest.mark.cpu
@pytest.mark.slow
@pytest.mark.dummy_weights
def test_readme_quickstart_speaks_and_stops(tmp_path):
    """The quickstart's checkpoint and server commands, then its snippet, as written: the snippet's mp3
    decodes to 24 kHz audio; the boot log states the KV cache the profile sized (vLLM's worker took
    it, no share of the machine's memory), the server's processes stay within 4 GiB, and Ctrl-C (SIGINT to
    the terminal's process group) stops it with status 0."""
    tox, write, serve = readme_block("commands").splitlines()
    assert "tox -e dev" in tox and "[testenv:dev]" in (ROOT / "tox.ini").read_text(), tox
    snippet = readme_block("client")
    default_url = f"http://127.0.0.1:{parse_args(['--model', 'm']).port}/v1"
    assert snippet.count(default_url) == 1 and f'model="{SERVED_MODEL_NAME}"' in snippet, snippet

    written = subprocess.run(env_command(write), cwd=tmp_path, env=newcomer_env(), capture_output=True, text=True,
                             timeout=300)
    assert written.returncode == 0, written.stderr
    port = free_port()
    log_path = tmp_path / "server.log"
    with open(log_path, "w") as log:
        server = subprocess.Popen([*env_command(serve), "--port", str(port)], cwd=tmp_path, env=newcomer_env(),
                                  stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                  preexec_fn=die_with_parent)
    try:
        wait_healthy(server, port, log_path)
        spoken = subprocess.run([sys.executable, "-c", snippet.replace(default_url, f"http://127.0.0.1:{port}/v1")],
                                cwd=tmp_path, env=newcomer_env(), capture_output=True, text=True, timeout=300)
        assert spoken.returncode == 0, spoken.stderr[-3000:]
        peak = tree_peak_bytes(server.pid)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGINT)  # what Ctrl-C in its terminal does
        stopping = time.monotonic()
        try:
            status = server.wait(timeout=STOP_TIMEOUT_S)
            print(f"Ctrl-C: stopped in {time.monotonic() - stopping:.1f} s")
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=30)
            status = None
    log = log_path.read_text(errors="replace")
    print(f"server and engine processes: peak {peak / (1 << 30):.2f} GiB together")
    with av.open(str(tmp_path / "hello.mp3")) as mp3:
        frames = list(mp3.decode(audio=0))
    assert frames and frames[0].sample_rate == 24000 and sum(f.samples for f in frames) > 0
    reserved = [line for line in log.splitlines() if "KV cache on the CPU: " in line]
    assert len(reserved) == 1 and "max_num_seqs 16 requests x max_model_len 4096 tokens" in reserved[0], log[-3000:]
    print(reserved[0])
    assert "Explicitly set" in log and "Auto set" not in log, "vLLM's worker did not take the reserved size"
    assert peak <= MAX_TREE_BYTES, f"the server's processes peaked at {peak / (1 << 30):.2f} GiB"
    assert status == 0, f"Ctrl-C: exit status {status}:\n{log[-3000:]}"


def wait_healthy(server: subprocess.Popen, port: int, log_path: Path) -> None:
    deadline = time.monotonic() + BOOT_TIMEOUT_S
    while time.monotonic() < deadline:
        assert server.poll() is None, f"the server exited ({server.returncode}):\n{log_path.read_text()[-3000:]}"
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"not healthy within {BOOT_TIMEOUT_S:.0f} s:\n{log_path.read_text()[-3000:]}")
