"""What a run measures: the settings, and the phases they give (one engine each).

A phase is one engine boot followed by every measurement that engine serves, because a boot costs
1.5-2.5 minutes on the GPU machine and the measurements seconds:
- `talker/<profile>`: end-to-end levels for every profile named, plus the engine-only levels for
  the engine profiles (by default the first profile of each runner: `default` for V2,
  `high_throughput` for V1);
- `bare/<profile>`: a bare Qwen3 of the talker's shape with that profile's engine settings, for
  each engine profile: the engine-only levels, and greedy steps at the end-to-end concurrencies,
  which give the backbone bound of the end-to-end mode.

The batch fits the largest concurrency a phase runs: where the profile allows fewer sequences
(`default`: 16) the phase raises `stages.0.max_num_seqs` to it, and where the profile captures CUDA
graphs only up to a smaller batch it adds capture sizes up to it (every 8, as h200_v2.yaml does);
otherwise "64 streams" would mean 16 running and 48 waiting, or 48 eager. A raised talker batch
raises the codec batch (`stages.1.max_num_seqs`) with it, as every shipped CUDA profile pairs them
(a talker step hands the stage up to one window per sequence; on the H200, 2026-12-01, 64 streams
waited 162-2,524 ms per round for their first PCM with a codec batch of 16, 30-1,053 ms with 64:
benchmarks/results/2026-12-01-h200-codec-graphs-a/NOTES.md). Both engines of a ratio get the same overrides; each
phase records its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from reference.deploy.resolve import resolve_deployment

# The engine-only samplings. "default" is the profiles' default_sampling_params (temperature 1,
# top-k 50, top-p 0.95); the talker draws with a seed per request (its own noise), the bare
# backbone with none (stock vLLM's seeded top-k/top-p is 7-15x slower: engine_steps.py).
SAMPLINGS = {
    "greedy": {"temperature": 0.0},
    "default": {"temperature": 1.0, "top_k": 50, "top_p": 0.95},
}


@dataclass
class Settings:
    platform: str  # "cuda" | "cpu"
    size: str = "4b"  # the dummy checkpoint's shape (higgs_dummy: tiny | 4b)
    profiles: list[str] = field(default_factory=lambda: ["default", "high_throughput"])
    engine_profiles: list[str] | None = None  # None: the first profile of each runner
    modes: list[str] = field(default_factory=lambda: ["e2e", "engine"])
    bare: bool = True
    e2e_levels: list[int] = field(default_factory=lambda: [1, 4, 16])
    engine_levels: list[int] = field(default_factory=lambda: [1, 16, 64])
    samplings: list[str] = field(default_factory=lambda: ["greedy", "default"])
    rounds: int = 3  # end-to-end: batches of c streams per level (each figure: median and spread of the rounds)
    max_tokens: int = 257  # end-to-end: rows per stream (250 frames = 10 s of audio)
    voice_seconds: float = 0.0  # end-to-end: clone one named voice of this many seconds (0: zero-shot)
    engine_steps: tuple[int, int] = (32, 288)  # engine only: the two lengths whose difference is timed
    engine_repeats: int = 3  # engine only: timed (SHORT, LONG) pairs per level; ms/step is their median
    overrides: dict = field(default_factory=dict)  # --set KEY=VALUE, for every phase
    phase_timeout: float = 420.0
    budget: float | None = None  # seconds for the whole run; phases that do not fit are skipped
    gpus: list[str] = field(default_factory=list)  # one phase at a time on each; empty on a CPU
    cpu_parallel: int = 1  # phases at once without GPUs (the CPU smoke: 2, its figures mean nothing)

    @property
    def slots(self) -> list[str | None]:
        """Where phases run at once: each GPU id, or `cpu_parallel` unnamed CPU slots."""
        return list(self.gpus) or [None] * self.cpu_parallel


@dataclass
class Phase:
    name: str  # "talker/default", "bare/high_throughput"
    kind: str  # "talker" | "bare"
    profile: str
    runner: str | None = None  # "v1" | "v2", as the profile resolves on the platform
    e2e_levels: list[int] = field(default_factory=list)
    engine_levels: list[tuple[str, int]] = field(default_factory=list)  # (sampling, concurrency)
    overrides: dict = field(default_factory=dict)  # deploy keys: --set plus the batch fit
    error: str | None = None  # the plan itself failed (unknown profile, refused combination)

    @property
    def max_concurrency(self) -> int:
        return max(self.e2e_levels + [c for _, c in self.engine_levels], default=1)


def plan_phases(settings: Settings) -> list[Phase]:
    """The phases in the order they start: per engine profile the talker then its bare twin, then
    the end-to-end-only profiles (with a --budget, what matters most comes first)."""
    runners = {p: _runner(p, settings) for p in dict.fromkeys(settings.profiles + (settings.engine_profiles or []))}
    engine_profiles = settings.engine_profiles
    if engine_profiles is None:  # the first profile of each runner
        firsts: dict[str, str] = {}
        for profile in settings.profiles:
            if isinstance(runners[profile], str):
                firsts.setdefault(runners[profile], profile)
        engine_profiles = list(firsts.values())
    e2e = list(settings.e2e_levels) if "e2e" in settings.modes else []
    engine = [(s, c) for s in settings.samplings for c in settings.engine_levels] if "engine" in settings.modes else []
    phases = []
    for profile in dict.fromkeys(engine_profiles + settings.profiles):
        talker = Phase(f"talker/{profile}", "talker", profile,
                       e2e_levels=e2e if profile in settings.profiles else [],
                       engine_levels=engine if profile in engine_profiles else [])
        if talker.e2e_levels or talker.engine_levels:
            phases.append(talker)
        if settings.bare and profile in engine_profiles:
            greedy_e2e = [("greedy", c) for c in e2e]  # the backbone bound of the end-to-end mode
            levels = sorted(set(engine + greedy_e2e), key=_level_order)
            phases.append(Phase(f"bare/{profile}", "bare", profile, engine_levels=levels))
    for phase in phases:
        _fit(phase, runners[phase.profile], settings)
    return phases


def _level_order(level: tuple[str, int]) -> tuple:
    sampling, concurrency = level
    return (sampling != "greedy", sampling, concurrency)


def _runner(profile: str, settings: Settings) -> str | Exception:
    try:
        return resolve_deployment(profile, settings.platform, settings.overrides).runner
    except (ValueError, OSError) as exc:  # DeployFileError, RunnerUnavailable: a ValueError
        return exc


def _fit(phase: Phase, runner: str | Exception, settings: Settings) -> None:
    """Sets phase.runner and phase.overrides (the batch fit above), or phase.error."""
    if isinstance(runner, Exception):
        phase.error = f"profile {phase.profile!r} does not resolve on {settings.platform}: {runner}"
        return
    phase.runner = runner
    base = resolve_deployment(phase.profile, settings.platform, settings.overrides)
    fit = batch_fit(base.engine_kwargs, phase.max_concurrency)
    codec_batch = (base.codec_stage or {}).get("max_num_seqs")
    if "stages.0.max_num_seqs" in fit and codec_batch is not None and codec_batch < phase.max_concurrency:
        fit["stages.1.max_num_seqs"] = phase.max_concurrency  # the codec batch follows the talker's
    phase.overrides = {**settings.overrides, **fit}


def batch_fit(engine_kwargs: dict, need: int) -> dict:
    """The deploy overrides that let `need` requests decode at once under these engine arguments:
    max_num_seqs raised to it, and decode capture sizes every 8 up to it where the graphs stop
    short (a profile's larger sizes, for prompts, stay)."""
    overrides: dict = {}
    if engine_kwargs.get("max_num_seqs", need) < need:
        overrides["stages.0.max_num_seqs"] = need
    sizes = (engine_kwargs.get("compilation_config") or {}).get("cudagraph_capture_sizes")
    decode = max((s for s in sizes or [] if s <= engine_kwargs.get("max_num_seqs", need)), default=0)
    if not engine_kwargs.get("enforce_eager") and sizes and decode < need:
        overrides["stages.0.compilation_config.cudagraph_capture_sizes"] = sorted(
            set(sizes) | set(range(decode + 8, need, 8)) | {need})
    return overrides
