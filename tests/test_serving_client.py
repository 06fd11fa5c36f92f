"""The serving checks' server process does not outlive the test process that started it."""

import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.cpu

ROOT = Path(__file__).resolve().parent.parent
PARENT = """
import subprocess, sys, time
from conformance.serving.serving_client import die_with_parent
child = subprocess.Popen(["sleep", "300"], start_new_session=True, preexec_fn=die_with_parent)
print(child.pid, flush=True)
time.sleep(300)
"""


def test_a_child_started_with_die_with_parent_ends_when_its_parent_is_killed():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                              env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    child = psutil.Process(int(parent.stdout.readline()))
    assert child.is_running() and child.status() != psutil.STATUS_ZOMBIE
    parent.kill()  # as `timeout` or an OOM kill would: no cleanup runs in the parent
    parent.wait(10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and child.is_running() and child.status() != psutil.STATUS_ZOMBIE:
        time.sleep(0.05)
    ended = not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
    if not ended:
        child.kill()
    assert ended, "the child outlived its killed parent"
