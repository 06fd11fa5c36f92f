"""The serving checks' server process does not outlive the test process that started it; the metric names
they read from a server's /metrics."""

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


# /metrics of a server whose speech counters are labelled and have seen no stream abort yet (prometheus_client's
# text format: a labelled family with no series keeps only its # HELP and # TYPE lines).
UNUSED_LABELLED_COUNTER = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 0.0
# HELP vllm_omni:speech_stream_aborted_total Speech audio generators terminated before normal completion.
# TYPE vllm_omni:speech_stream_aborted_total counter
# HELP vllm_omni:speech_stream_completed_total Speech audio generators that completed normally.
# TYPE vllm_omni:speech_stream_completed_total counter
vllm_omni:speech_stream_completed_total{model_name="m"} 3.0
# HELP vllm_omni:speech_stream_completed_created Speech audio generators that completed normally.
# TYPE vllm_omni:speech_stream_completed_created gauge
vllm_omni:speech_stream_completed_created{model_name="m"} 1.7e+09
"""


def test_a_labelled_counter_without_series_is_carried_by_its_type_line():
    from conformance.serving.serving_client import metric_names
    from reference.serve.metrics import parse_metrics

    names = metric_names(UNUSED_LABELLED_COUNTER)
    series_names = {k.split("{")[0] for k in parse_metrics(UNUSED_LABELLED_COUNTER)}
    assert "vllm_omni:speech_stream_aborted_total" not in series_names  # no series: only its # TYPE line
    assert {"vllm:num_requests_running", "vllm_omni:speech_stream_aborted_total",
            "vllm_omni:speech_stream_completed_total", "vllm_omni:speech_stream_completed_created"} <= names
    assert "vllm_omni:speech_stream_aborted" not in names and "# HELP" not in " ".join(names)
    # OpenMetrics declares a counter without _total; its series carry the suffix.
    assert metric_names("# TYPE vllm_omni:speech_stream_aborted counter\n") == {
        "vllm_omni:speech_stream_aborted", "vllm_omni:speech_stream_aborted_total"}
    assert metric_names("# HELP x y\n# TYPE x gauge\nx 1.0\n# EOF\n") == {"x"}


def test_prometheus_clients_own_text_for_an_unused_labelled_counter_is_read_as_carried():
    from prometheus_client import CollectorRegistry, Counter, generate_latest

    from conformance.serving.implementations import VLLM_OMNI
    from conformance.serving.serving_client import metric_names

    registry = CollectorRegistry()
    Counter("vllm_omni:speech_stream_aborted", "aborted", ["model_name", "reason"], registry=registry)
    completed = Counter("vllm_omni:speech_stream_completed", "completed", ["model_name"], registry=registry)
    completed.labels(model_name="m").inc()
    names = metric_names(generate_latest(registry).decode())
    assert {"vllm_omni:speech_stream_aborted_total", "vllm_omni:speech_stream_completed_total"} <= names
    assert VLLM_OMNI.metrics.aborted({}) == 0.0  # no series yet: nothing aborted
