"""Suite-wide pytest setup: the weights of the run, and platform skips with reasons that say what to
set or run.

Weights (`--weights dummy|real`, default $HIGGS_WEIGHTS, else dummy; conformance/weights.py):
- dummy: the checks build their own dummy checkpoints (higgs_dummy/); `real_weights` checks skip,
  naming the environment that runs them.
- real (tox -e cpu-real / gpu-real): the session refuses to start (exit 2) unless
  HIGGS_V3_CHECKPOINT names a checkpoint folder, so no `real_weights` check skips for want of it;
  `dummy_weights` checks in the selection run as in a dummy run. A real-weights session in which
  no `real_weights` check ran fails (exit 1), whatever else passed.
"""

from __future__ import annotations

import os

import pytest

from conformance import weights
from conformance.environment import REAL_CHECKPOINT_ENV, has_cuda
from conformance.serving import implementations

# CPU engines: a small KV cache unless the caller chose one (vLLM reads it in the worker).
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
# ... and OpenMP threads left unbound: vLLM's "auto" pins every engine's threads to the same cores
# (OMP_PROC_BIND), and the suite runs three engines at a time on two cores (docs/speed.md).
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
# ... and idle OpenMP threads asleep, not spinning: libgomp (torch's and vLLM's) spins a thread after each parallel
# region, which with three workers, their servers and engines on two cores takes the cores from the threads with
# work. Read when libgomp loads, so it reaches the xdist workers and every child, not a process that has it loaded.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# ... and, on a machine with fewer cores than tox's three workers, one OpenMP thread per process: two threads in
# each of the workers' engines and servers only take turns on the same two cores (docs/speed.md).
if (os.cpu_count() or 1) < 3:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
# Engine processes are spawned, never forked: a test process that already holds engines (their
# threads) hung forking the next one on the GPU machine (python warns "use of fork() may lead to
# deadlocks"). vLLM on a CPU spawns anyway.
os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")

DUMMY_RUN_SKIP = (f"a dummy-weights run ({weights.MODE_ENV}=dummy): real-weight checks run under `tox -e cpu-real` "
                  f"or `tox -e gpu-real` with {REAL_CHECKPOINT_ENV}=/path/to/higgs-audio-v3-tts-4b")


def pytest_addoption(parser):
    parser.addoption("--weights", choices=weights.MODES, default=None,
                     help=f"dummy or real weights (default: ${weights.MODE_ENV}, else dummy); real needs "
                          f"{REAL_CHECKPOINT_ENV}")
    implementations.add_options(parser)


def pytest_configure(config):
    try:
        chosen = weights.mode(config.getoption("weights"))
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None
    config.option.weights = chosen  # what the report and the verdict read (conformance/report.py, gate_run.py)
    try:  # the speech server the serving checks judge (conformance/serving/implementations.py)
        implementations.select(implementations.choose(config.getoption("implementation"),
                                                      config.getoption("server_url")))
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None
    if chosen == "real":
        if problem := weights.checkpoint_problem():
            pytest.exit(f"refusing to start: {problem}", returncode=weights.REFUSED)
        if not hasattr(config, "workerinput"):  # pytest-xdist's controller sees every report; a worker a share
            config.pluginmanager.register(RealChecksRan(), "higgs-real-checks-ran")


class RealChecksRan:
    """Fails a real-weights session in which no real-weights check ran (all skipped or deselected)."""

    def __init__(self):
        self.ran = 0

    def pytest_runtest_logreport(self, report):
        self.ran += weights.ran_real_check(report)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session):
        if self.ran == 0 and not session.config.option.collectonly and session.exitstatus in (0, 5):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter, config):
        if self.ran == 0 and not config.option.collectonly:
            terminalreporter.write_sep("=", "FAILED: a real-weights run in which no real_weights check ran", red=True)
            terminalreporter.write_line(f"every real_weights check was skipped or deselected; the weights "
                                        f"({weights.describe('real')}) were not tested. Select them: -m real_weights")


# The test parameters that pick a module's engine: a runner variant, or a module's engines. A
# module whose every case boots an engine of its own names its case parameter in ENGINE_PARAM.
ENGINE_PARAMS = ("variant", "engines")


def xdist_group(item) -> str:
    """The pytest-xdist group of a check (`pytest -n N --dist loadgroup`: tox -e cpu-dummy and
    tox -e gpu): a group runs in one worker, in order. An engine check's group is its test file and
    the parameter that picks its engine (ENGINE_PARAMS), so that each group's engines boot once and
    different engines boot in parallel; any other check's group is its test file, so that its
    module fixtures are built once."""
    if "engine" not in item.keywords:
        return item.module.__name__
    params = item.callspec.params if hasattr(item, "callspec") else {}
    names = [getattr(item.module, "ENGINE_PARAM", None), *ENGINE_PARAMS]
    engine = next((params[name] for name in names if name in params), None)
    engine = engine.get("id") if isinstance(engine, dict) else engine
    return f"{item.module.__name__}:{engine or 'all'}"


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    cuda = has_cuda()
    dummy = config.getoption("weights") == "dummy"
    for item in items:
        item.add_marker(pytest.mark.xdist_group(xdist_group(item)))
        if "gpu" in item.keywords and not cuda:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU with vLLM: run `tox -e gpu` on a GPU machine"))
        if "real_weights" in item.keywords and dummy:
            item.add_marker(pytest.mark.skip(reason=DUMMY_RUN_SKIP))
        if reason := not_applicable(item, implementations.selection()):  # first: the reason pytest reports
            item.add_marker(pytest.mark.skip(reason=reason), append=False)


def not_applicable(item, selection) -> str | None:
    """Why a check cannot judge the selected implementation (it then skips with that reason), or None: a
    `reference_only` check when the server is one at a URL, a `needs(FEATURE, ...)` check where the adapter
    lacks a feature (conformance/serving/implementations.py)."""
    only = item.get_closest_marker("reference_only")
    if only is not None and selection.remote:
        return f"not applicable (reference only, the server is at a URL): {only.kwargs['reason']}"
    needs = item.get_closest_marker("needs")
    return selection.implementation.not_applicable(*needs.args) if needs is not None else None
