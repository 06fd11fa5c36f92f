"""Which model runner the Higgs talker gets on which platform.

A profile asks for a runner with `model_runner`:

- `prefer-v2` (the shipped default profile): Model Runner V2 where the platform runs it (CUDA),
  otherwise the V1 opt-out. The platform *pins* V1, and the deploy loader then restores the
  upstream V1 streaming geometry (see `reference/deploy/resolve.py`, rule `matrix-restore`).
  This is what "the default profile on CPU boots V1 with the V1 geometry" means.
- `v2` (an explicit choice: a V2-only profile such as h200_v2.yaml, or `--set model_runner=v2`):
  V2 or nothing. On a platform that cannot run it, loading fails with `RunnerUnavailable`, whose
  message names the platform and the V1 profile to use instead. Nothing falls back silently.
- `v1`: the V1 opt-out on every platform.

`select_runner` is an ordered, first-match rule table (`RUNNER_RULES`); the matrix itself is
`PLATFORMS`. CUDA follows the profile; ROCm, NPU, XPU, MUSA and CPU pin V1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

# The V1 opt-out profile named by every "use V1 instead" message.
V1_OPT_OUT_PROFILE = "reference/deploy/profiles/low_latency.yaml"

RUNNER_REQUESTS = ("prefer-v2", "v2", "v1")


@dataclass(frozen=True)
class PlatformRow:
    """One platform of the matrix.

    runs_v2: the Higgs talker's V2 path (device state, model sampler, FULL decode graphs) runs here.
    why_not_v2: the reason quoted in the fail-fast error when it does not.
    """

    name: str
    runs_v2: bool
    why_not_v2: str = ""


_CUDA_ONLY = "the talker's V2 path is validated on CUDA only"

PLATFORMS: dict[str, PlatformRow] = {
    row.name: row
    for row in (
        PlatformRow("cuda", runs_v2=True),
        PlatformRow("rocm", runs_v2=False, why_not_v2=_CUDA_ONLY),
        PlatformRow("npu", runs_v2=False, why_not_v2=_CUDA_ONLY),
        PlatformRow("xpu", runs_v2=False, why_not_v2=_CUDA_ONLY),
        PlatformRow("musa", runs_v2=False, why_not_v2=_CUDA_ONLY),
        PlatformRow(
            "cpu", runs_v2=False, why_not_v2="Model Runner V2 needs Triton, which has no CPU backend here"
        ),
    )
}


class RunnerUnavailable(ValueError):
    """An explicit `model_runner: v2` on a platform that cannot run it."""


@dataclass(frozen=True)
class RunnerChoice:
    """runner: "v1" or "v2". pinned: the platform overrode a `prefer-v2` request (restore V1 geometry)."""

    runner: str
    pinned: bool
    rule: str
    reason: str


def check_platform(platform: str) -> PlatformRow:
    try:
        return PLATFORMS[platform]
    except KeyError:
        raise ValueError(f"unknown platform {platform!r}; known platforms: {', '.join(PLATFORMS)}") from None


def unavailable_message(platform: str, origin: str = "") -> str:
    """The fail-fast text for an explicit v2 on a platform without V2 (exact text, locked by matrix.yaml)."""
    row = check_platform(platform)
    where = f" (set by {origin})" if origin else ""
    return (
        f"model_runner: v2{where} is not available on platform '{platform}' ({row.why_not_v2}); "
        f"use the V1 opt-out profile {V1_OPT_OUT_PROFILE} or set model_runner: v1"
    )


@dataclass(frozen=True)
class _RunnerRule:
    name: str
    matches: Callable[[str, PlatformRow], bool]
    choose: Callable[[str, PlatformRow, str], RunnerChoice]


def _raise_unavailable(requested: str, row: PlatformRow, origin: str) -> RunnerChoice:
    raise RunnerUnavailable(unavailable_message(row.name, origin))


# Ordered, first-match. The request has been checked against RUNNER_REQUESTS before.
RUNNER_RULES: tuple[_RunnerRule, ...] = (
    _RunnerRule(
        "explicit-v1",
        lambda req, row: req == "v1",
        lambda req, row, o: RunnerChoice("v1", False, "explicit-v1", "explicit v1"),
    ),
    _RunnerRule(
        "platform-runs-v2",
        lambda req, row: row.runs_v2,
        lambda req, row, o: RunnerChoice("v2", False, "platform-runs-v2", f"{row.name} runs V2"),
    ),
    _RunnerRule(
        "platform-pins-v1",
        lambda req, row: req == "prefer-v2",
        lambda req, row, o: RunnerChoice("v1", True, "platform-pins-v1", f"platform matrix: {row.name} pins V1"),
    ),
    _RunnerRule("explicit-v2-unavailable", lambda req, row: True, _raise_unavailable),
)


def select_runner(requested: str, platform: str, origin: str = "") -> RunnerChoice:
    """The runner for a `model_runner` request on a platform; raises RunnerUnavailable (fail fast).

    origin: where the request came from, quoted in the error ("reference/deploy/profiles/h200_v2.yaml").
    """
    row = check_platform(platform)
    if requested not in RUNNER_REQUESTS:
        raise ValueError(f"model_runner must be one of {', '.join(RUNNER_REQUESTS)}, got {requested!r}")
    for rule in RUNNER_RULES:
        if rule.matches(requested, row):
            return rule.choose(requested, row, origin)
    raise AssertionError("RUNNER_RULES ends with a catch-all rule")  # pragma: no cover


def vllm_env(runner: str) -> dict[str, str]:
    """Environment for the engine: always explicit, so vLLM can never silently pick the other runner."""
    if runner not in ("v1", "v2"):
        raise ValueError(f"runner must be 'v1' or 'v2', got {runner!r}")
    return {"VLLM_USE_V2_MODEL_RUNNER": "1" if runner == "v2" else "0"}
