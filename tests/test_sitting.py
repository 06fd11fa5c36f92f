"""The sitting tool (conformance/sitting/, docs/sitting.md) on a CPU: plans whose server is a stand-in
(tests/sitting_fake_server.py) and whose work items are short Python lines. Booting, health, work against the
server's URL and teardown, with the server's process group gone afterwards (read from /proc here); a server that
never gets healthy, one that exits at once; failing and overrunning work items; the budget; bundles of a tiny
wheel in each layout, installed and imported, and refused when a byte differs; the dry run; an interrupted
sitting; plans refused whole. Limits are short (1-5 s) and each test takes a few seconds."""

from __future__ import annotations

import base64
import hashlib
import json
import random
import signal
import socket
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest
import yaml

from conformance.sitting.groups import KILL_WAIT_S
from conformance.sitting.plan import PlanError, load
from conformance.sitting.run import Sitting
from conformance.tools.bundle import write_parts

pytestmark = pytest.mark.cpu

ROOT = Path(__file__).resolve().parent.parent
FAKE = ROOT / "tests" / "sitting_fake_server.py"


# --- helpers ------------------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def live(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def group(pgid: int) -> list[int]:
    """The live processes of process group `pgid`, read from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                found.append(int(entry.name))
    return found


def server(name: str, port: int, *flags: str, boot: float = 10, grace: float = 2, steps=()) -> dict:
    return {"server": name, "command": [sys.executable, str(FAKE), "--port", str(port), *flags],
            "health": f"http://127.0.0.1:{port}/health", "boot_timeout_s": boot, "stop_grace_s": grace,
            "steps": list(steps)}


def item(name: str, code: str, timeout: float = 10, **more) -> dict:
    return {"run": name, "command": [sys.executable, "-c", code], "timeout_s": timeout, "grace_s": 1, **more}


def write_plan(tmp_path: Path, steps: list[dict], **top) -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump({"budget_s": 120, "reserve_s": 1, **top, "steps": steps}, sort_keys=False))
    return path


def sit(tmp_path: Path, steps: list[dict], **top) -> dict:
    """The sitting of that plan, run here; its results.json."""
    plan = load(write_plan(tmp_path, steps, **top), ROOT)
    Sitting(plan, tmp_path / "results", ROOT, say=lambda line: None).run()
    return json.loads((tmp_path / "results" / "results.json").read_text())


def steps_of(results: dict) -> dict[str, dict]:
    return {s["id"]: s for s in results["steps"]}


# --- servers ------------------------------------------------------------------------------------------------

def test_a_server_boots_its_work_runs_against_its_url_and_its_group_is_gone_after(tmp_path):
    port, child = free_port(), tmp_path / "child.pid"
    probe = "import sys, urllib.request as u; print(u.urlopen(sys.argv[1]).read().decode())"
    results = sit(tmp_path, [
        item("token", "print('warming'); print('value-42')", yields="token"),
        server("fake", port, "--healthy-after", "0.5", "--child-pid-file", str(child), steps=[
            {"run": "probe", "command": [sys.executable, "-c", probe, "{url}/health"], "timeout_s": 10},
            {"run": "write", "shell": "echo {token} {port} > {dir}/out.txt", "timeout_s": 10}])])
    steps = steps_of(results)
    assert results["state"] == "complete" and results["counts"]["ok"] == 4
    assert steps["token"]["reason"] == "{token} = value-42"
    assert steps["fake"]["status"] == "ok" and 0.4 < steps["fake"]["duration_s"] < 8  # healthy after its 0.5 s
    assert steps["fake"]["stop"].startswith("SIGTERM to it: ended in")
    assert (tmp_path / "results" / "fake.probe.log").read_text().strip() == "ok"  # its URL, answered
    assert (tmp_path / "results" / "fake.write" / "out.txt").read_text().split() == ["value-42", str(port)]
    assert "fake server: SIGTERM, stopping" in (tmp_path / "results" / "fake.log").read_text()
    assert group(steps["fake"]["pid"]) == [] and not live(int(child.read_text()))
    assert "| fake.probe | ok |" in (tmp_path / "results" / "RESULTS.md").read_text()


def test_a_server_deaf_to_sigterm_is_killed_with_its_group_after_the_grace(tmp_path):
    child = tmp_path / "child.pid"
    results = sit(tmp_path, [server("deaf", free_port(), "--ignore-term", "--child-pid-file", str(child), grace=1,
                                    steps=[item("nothing", "pass")])])
    deaf = steps_of(results)["deaf"]
    assert deaf["status"] == "ok"
    assert deaf["stop"] == "SIGTERM to it, then SIGKILL to its group after 1 s (2 processes left)"
    assert group(deaf["pid"]) == [] and not live(int(child.read_text()))


def test_a_server_never_healthy_fails_at_its_deadline_with_its_log_tail_and_its_work_is_skipped(tmp_path):
    started = time.monotonic()
    results = sit(tmp_path, [server("deaf", free_port(), "--never-healthy", boot=1.5, steps=[item("work", "pass")]),
                             item("after", "pass")])
    steps = steps_of(results)
    assert steps["deaf"]["status"] == "failed" and 1.4 < steps["deaf"]["duration_s"] < 4
    assert "not healthy after 1.5 s" in steps["deaf"]["reason"]
    assert "fake server: listening" in steps["deaf"]["reason"]  # the log's tail
    assert "503" in steps["deaf"]["reason"]  # the health requests it answered, logged
    assert steps["deaf.work"] == {**steps["deaf.work"], "status": "skipped",
                                  "reason": "its server deaf did not become healthy"}
    assert steps["after"]["status"] == "ok"  # a server's failure stops only its own work
    assert group(steps["deaf"]["pid"]) == [] and time.monotonic() - started < 10


def test_a_server_that_exits_at_once_fails_without_waiting_for_its_deadline(tmp_path):
    results = sit(tmp_path, [server("quitter", free_port(), "--exit-now", "3", boot=60, steps=[item("work", "pass")])])
    quitter = steps_of(results)["quitter"]
    assert quitter["status"] == "failed" and quitter["duration_s"] < 10
    assert quitter["reason"].startswith("exited (exit 3) after")
    assert "fake server: giving up at once with exit 3" in quitter["reason"]
    assert steps_of(results)["quitter.work"]["status"] == "skipped" and results["state"] == "incomplete"


# --- work items ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("on_failure", ["continue", "stop"])
def test_a_failing_work_item_is_recorded_the_rest_runs_or_is_skipped_as_planned_and_the_server_stops(tmp_path, on_failure):
    port = free_port()
    results = sit(tmp_path, [
        server("fake", port, steps=[item("fails", "import sys; print('bad'); sys.exit(4)", on_failure=on_failure),
                                    item("next", "print('next ran')")]),
        item("after", "pass")])
    steps = steps_of(results)
    assert steps["fake.fails"]["status"] == "failed" and steps["fake.fails"]["exit_code"] == 4
    assert steps["fake.fails"]["reason"] == "exit 4"
    if on_failure == "continue":
        assert steps["fake.next"]["status"] == steps["after"]["status"] == "ok"
    else:
        for later in ("fake.next", "after"):
            assert steps[later]["status"] == "skipped"
            assert steps[later]["reason"] == "fake.fails failed (on_failure: stop)"
    assert steps["fake"]["stop"].startswith("SIGTERM to it: ended") and group(steps["fake"]["pid"]) == []


def test_a_work_item_past_its_limit_is_stopped_with_its_group(tmp_path):
    child = tmp_path / "child.pid"
    code = (f"import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
            f"open({str(child)!r}, 'w').write(str(c.pid)); time.sleep(600)")
    results = sit(tmp_path, [item("slow", code, timeout=1.5), item("after", "pass")])
    slow = steps_of(results)["slow"]
    assert slow["status"] == "failed" and slow["reason"] == "stopped at its limit of 1.5 s"
    # Stopped at its limit, not at its 600 s: 1.5 s, then at most its grace (1 s) and SIGKILL's wait (5 s); a loaded
    # CI machine once took 6 s of them.
    assert slow["duration_s"] < 1.5 + 1 + KILL_WAIT_S + 2 and slow["stop"].startswith("SIGINT to its group")
    assert not live(int(child.read_text())) and steps_of(results)["after"]["status"] == "ok"


def test_a_yield_that_never_came_skips_the_steps_that_need_it(tmp_path):
    results = sit(tmp_path, [item("token", "import sys; sys.exit(1)", yields="token"),
                             item("user", "pass", env={"TOKEN": "{token}"}), item("other", "pass")])
    steps = steps_of(results)
    assert steps["user"]["status"] == "skipped"
    assert steps["user"]["reason"] == "{token} has no value: the step that yields it did not run ok"
    assert steps["other"]["status"] == "ok"


def test_steps_the_remaining_budget_cannot_fit_are_not_run_and_say_so(tmp_path):
    port = free_port()
    # Limits of 5 s for items that take a fraction of one: under CI's load the first one once failed at a 2 s limit.
    results = sit(tmp_path, [item("first", "import time; time.sleep(0.2)", timeout=5),
                             item("long", "pass", timeout=30),
                             item("short", "pass", timeout=5),
                             server("late", port, boot=20, steps=[item("work", "pass", timeout=2)])],
                  budget_s=16, reserve_s=2)
    steps = steps_of(results)
    assert steps["first"]["status"] == steps["short"]["status"] == "ok", results  # a later step that fits still runs
    assert steps["long"]["status"] == "not-run-out-of-budget"
    assert steps["long"]["reason"].startswith("needs up to 31 s, ") and "s left of the budget (16 s, 2 s kept" in steps["long"]["reason"]
    assert steps["late"]["status"] == steps["late.work"]["status"] == "not-run-out-of-budget"
    assert steps["late"]["reason"].startswith("needs up to 25 s")  # boot 20, its first item 2 + 1, its stop 2
    assert steps["late"]["pid"] is None and results["counts"]["not-run-out-of-budget"] == 3


# --- bundles ------------------------------------------------------------------------------------------------

def tiny_wheel(folder: Path) -> Path:
    """sitting_probe 1.0: a module with VALUE and 2.5 MB of incompressible bytes (three parts of 1 MiB)."""
    files = {"sitting_probe/__init__.py": b"VALUE = 'probe-7'\n",
             "sitting_probe/blob.bin": random.Random(0).randbytes(2_500_000),
             "sitting_probe-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: sitting-probe\nVersion: 1.0\n",
             "sitting_probe-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
                     f"{len(data)}\n" for name, data in files.items()) + "sitting_probe-1.0.dist-info/RECORD,,\n"
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / "sitting_probe-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name, data in {**files, "sitting_probe-1.0.dist-info/RECORD": record.encode()}.items():
            z.writestr(name, data)
    return wheel


def stage(tmp_path: Path, layout: str) -> Path:
    """The wheel as a bundle laid out as `layout`: wheels + SHA256SUMS; parts (bundle.py's write_parts, 1 MiB)
    + SHA256SUMS; or those parts joined and re-split into chunks of 700,000 bytes, SHA256SUMS still the parts'."""
    source = tmp_path / "stage"
    if layout == "wheels":
        wheel = tiny_wheel(source)
        (source / "SHA256SUMS").write_text(f"{hashlib.sha256(wheel.read_bytes()).hexdigest()}  {wheel.name}\n")
        return source
    parts = write_parts(tiny_wheel(tmp_path / "w").parent, source, part_bytes=1 << 20)
    assert len(parts) == 3
    if layout == "chunks":
        joined = b"".join((source / p).read_bytes() for p in parts)
        for p in parts:
            (source / p).unlink()
        for i in range(0, len(joined), 700_000):
            (source / f"chunk-{i // 700_000:02d}").write_bytes(joined[i:i + 700_000])
    return source


def bundle_plan(tmp_path: Path, source: Path) -> dict:
    return {"bundles": [{"name": "probe", "from": str(source), "target": str(tmp_path / "site"), "part_mib": 1,
                         "timeout_s": 60}]}


@pytest.mark.parametrize("layout", ["wheels", "parts", "chunks"])
def test_a_bundle_is_checked_installed_and_on_the_pythonpath_of_every_step(tmp_path, layout):
    source = stage(tmp_path, layout)
    steps = [item("use", "import sitting_probe; print(sitting_probe.VALUE, sitting_probe.__file__)")]
    results = sit(tmp_path, steps, **bundle_plan(tmp_path, source))
    bundle = steps_of(results)["bundle.probe"]
    assert bundle["status"] == "ok" and bundle["reason"].startswith(f"1 wheels from {1 if layout == 'wheels' else 3 if layout == 'parts' else 4} {layout}")
    printed = (tmp_path / "results" / "use.log").read_text().split()
    assert printed == ["probe-7", str(tmp_path / "site" / "sitting_probe" / "__init__.py")]
    assert not [p for p in tmp_path.iterdir() if ".partial-" in p.name]
    if layout == "chunks":  # the next call on the same machine: installed already, nothing redone
        (tmp_path / "again").mkdir()
        again = sit(tmp_path / "again", steps, **bundle_plan(tmp_path, source))
        assert steps_of(again)["bundle.probe"]["reason"] == f"already installed in {tmp_path / 'site'} (the same SHA256SUMS and selection)"


@pytest.mark.parametrize("layout, damage, says", [
    ("wheels", "sitting_probe-1.0-py3-none-any.whl", "sitting_probe-1.0-py3-none-any.whl in {source} does not match"),
    ("parts", "part-ab", "part-ab in {source} does not match"),
    ("chunks", "chunk-02", "bytes 1048576-2097152 of the joined chunks do not match part-ab"),
    ("chunks", None, "of the joined chunks do not match part-ac in"),  # the last chunk not staged
])
def test_a_bundle_that_does_not_match_its_sha256sums_is_refused_before_any_install(tmp_path, layout, damage, says):
    source = stage(tmp_path, layout)
    if damage:
        data = bytearray((source / damage).read_bytes())
        data[1000] ^= 1
        (source / damage).write_bytes(bytes(data))
    else:
        sorted(source.glob("chunk-*"))[-1].unlink()
    results = sit(tmp_path, [item("use", "import sitting_probe")], **bundle_plan(tmp_path, source))
    steps = steps_of(results)
    assert steps["bundle.probe"]["status"] == "failed"
    assert says.format(source=source) in steps["bundle.probe"]["reason"]
    assert steps["use"] == {**steps["use"], "status": "skipped", "reason": "bundle probe was not installed"}
    assert not (tmp_path / "site").exists() and not [p for p in tmp_path.iterdir() if ".partial-" in p.name]


# --- the command ----------------------------------------------------------------------------------------------

def test_the_dry_run_prints_the_commands_and_the_budget_and_runs_nothing(tmp_path):
    port, touched = free_port(), tmp_path / "touched"
    plan = write_plan(tmp_path, [
        {"run": "touch", "shell": f"touch {touched}", "timeout_s": 100},
        server("fake", port, "--child-pid-file", str(touched), boot=200, grace=20, steps=[
            item("short", "pass", timeout=20),
            {"run": "bench", "module": "benchmarks.capacity", "args": ["--base-url", "{url}", "--out-dir", "{dir}"],
             "timeout_s": 300}])], budget_s=400, reserve_s=10)
    done = subprocess.run([sys.executable, "-m", "conformance.sitting", str(plan), "--dry-run", "--results",
                           str(tmp_path / "results")], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert f"touch {touched}" in out
    assert f"-m benchmarks.capacity --base-url http://127.0.0.1:{port} --out-dir {tmp_path / 'results' / 'fake.bench'}" in out
    assert f"PYTHONPATH={ROOT}:" in out
    assert "\n".join(line.rstrip() for line in out.splitlines()[-7:]) == """\
  touch                             110        110  runs
  fake (boot)                       200        310  runs
  fake.short                         21        331  runs
  fake.bench                        310        331  not run: needs up to 330 s, 59 s left of the budget (400 s, 10 s kept for stops and results)
  fake (stop)                        20        351  runs
  total                                        351
in the worst case 1 of 5 steps is not run"""
    assert not touched.exists() and not (tmp_path / "results").exists()


def test_the_example_plan_reads_and_fits_its_budget_in_the_worst_case():
    done = subprocess.run([sys.executable, "-m", "conformance.sitting", "benchmarks/plans/capacity-h100.yaml", "--dry-run"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "-m reference.serve --model {checkpoint} --profile many_streams_v2" in done.stdout
    assert "every step fits, even in the worst case" in done.stdout


@pytest.mark.parametrize("path", sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "benchmarks" / "plans").rglob("*.yaml")))
def test_every_shipped_plan_reads(path):
    """A plan is data a GPU sitting runs as it is: one that the format refuses would cost a device call to find out."""
    from conformance.sitting.plan import load

    assert load(ROOT / path, ROOT).steps


def test_a_staging_call_moves_the_carried_chunks_into_place_and_runs_nothing(tmp_path):
    carried, touched = tmp_path / "carried", tmp_path / "touched"
    carried.mkdir()
    for name in ("chunk-00", "chunk-01"):
        (carried / name).write_bytes(name.encode())
    plan = write_plan(tmp_path, [{"run": "touch", "shell": f"touch {touched}", "timeout_s": 10}],
                      bundles=[{"name": "b", "from": str(tmp_path / "stage"), "incoming": str(carried),
                                "target": str(tmp_path / "site")}])
    done = subprocess.run([sys.executable, "-m", "conformance.sitting", str(plan), "--stage-only", "--results",
                           str(tmp_path / "results")], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"bundle.b: 2 files moved in; {tmp_path / 'stage'} holds 2 files\n"
    assert sorted(p.name for p in (tmp_path / "stage").iterdir()) == ["chunk-00", "chunk-01"]
    assert not list(carried.iterdir()) and not touched.exists() and not (tmp_path / "results").exists()


def test_an_interrupted_sitting_stops_its_server_and_work_and_writes_and_packs_its_results(tmp_path):
    port, child, started = free_port(), tmp_path / "child.pid", tmp_path / "started"
    plan = write_plan(tmp_path, [server("fake", port, "--child-pid-file", str(child), steps=[
        item("wait", f"import time; open({str(started)!r}, 'w').close(); time.sleep(600)", timeout=60),
        item("later", "pass")])])
    tool = subprocess.Popen([sys.executable, "-m", "conformance.sitting", str(plan), "--results",
                             str(tmp_path / "results"), "--pack", str(tmp_path / "out" / "sitting.tar.gz")],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while not started.exists() and time.monotonic() < deadline and tool.poll() is None:
            time.sleep(0.05)
        assert started.exists(), tool.stdout.read() if tool.poll() is not None else "the work item never started"
        tool.send_signal(signal.SIGTERM)
        out, _ = tool.communicate(timeout=30)
    finally:
        if tool.poll() is None:
            tool.kill()
    assert tool.returncode == 1, out
    results = json.loads((tmp_path / "results" / "results.json").read_text())
    steps = steps_of(results)
    assert results["state"] == "interrupted (SIGTERM)"
    assert steps["fake.wait"]["status"] == "failed" and steps["fake.wait"]["reason"] == "interrupted (SIGTERM)"
    assert steps["fake.later"]["reason"] == "the sitting was interrupted (SIGTERM)"
    assert group(steps["fake"]["pid"]) == [] and not live(int(child.read_text()))
    with tarfile.open(tmp_path / "out" / "sitting.tar.gz") as tar:
        assert {"results/results.json", "results/RESULTS.md", "results/fake.log"} <= set(tar.getnames())
    assert "interrupted (SIGTERM): 1 ok, 1 failed, 1 skipped" in out


def test_ours_is_reference_serve_with_the_plans_profile_port_and_overrides(tmp_path):
    plan = load(write_plan(tmp_path, [{"server": "ours", "boot_timeout_s": 300, "ours": {
        "model": "~/ckpt", "profile": "many_streams_v2", "port": 8091,
        "set": {"connectors.talker_to_code2wav.extra.codec_carried_state": False, "stages.0.max_num_seqs": 64}}}]), ROOT)
    ours = plan.steps[0]
    assert ours.command == ("{python}", "-m", "reference.serve", "--model", "~/ckpt", "--profile", "many_streams_v2",
                            "--host", "127.0.0.1", "--port", "8091",
                            "--set", "connectors.talker_to_code2wav.extra.codec_carried_state=false",
                            "--set", "stages.0.max_num_seqs=64")
    assert ours.health == "http://127.0.0.1:8091/health" and ours.values["url"] == "http://127.0.0.1:8091"


@pytest.mark.parametrize("change, says", [
    ({"budget_s": 60, "colour": "red"}, "unknown key colour"),
    ({"steps": [{"run": "a", "shell": "true"}]}, "steps[0]: timeout_s missing"),
    ({"steps": [{"run": "a", "shell": "echo {nothing}", "timeout_s": 1}]}, "step a uses {nothing}, which nothing fills"),
    ({"steps": [{"run": "a", "shell": "true", "timeout_s": 1}, {"run": "a", "shell": "true", "timeout_s": 1}]},
     "the name a is used twice"),
    ({"steps": [{"run": "a", "shell": "true", "timeout_s": 1, "env": {"PYTHONPATH": "x"}}]}, "PYTHONPATH is built from"),
    ({"steps": [{"server": "s", "command": "x", "boot_timeout_s": 5}]}, "a command needs health"),
    ({"steps": [{"run": "a", "shell": "true", "timeout_s": 1, "yields": "url"}]}, "a placeholder name of its own"),
])
def test_a_plan_is_refused_whole_before_anything_runs(tmp_path, change, says):
    raw = {"budget_s": 60, "steps": [{"run": "ok", "shell": "true", "timeout_s": 1}], **change}
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(PlanError) as refused:
        load(path, ROOT)
    assert says in str(refused.value)
