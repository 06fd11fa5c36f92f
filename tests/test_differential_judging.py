"""The differential machinery itself (conformance/differential/): how a difference is named and judged.

The foreign implementations run in their own environments (tox -e diff-*); these checks feed the
same classifiers hand-made foreign behaviour, so that a wrong verdict here cannot hide there.
"""

import numpy as np
import pytest

from conformance.differential import delay_grids, state_machine
from conformance.differential.inputs import scenario_logits, scenarios
from conformance.differential.verdicts import AGREE, CANNOT, NEW, PINNED, judge, read_pins
from conformance.oracles import delay_numpy

pytestmark = pytest.mark.cpu

PINS = [{"id": "p", "implementation": "x", "check": "c", "difference": "known", "source": "f.py:1", "ours": "o"}]


def recorded(*differences):
    return {"check": "c", "tolerance": "t", "cannot_run": None,
            "cases": [{"id": f"k{i}", "equal": d is None, "difference": d, "detail": ""} for i, d in enumerate(differences)]}


@pytest.mark.parametrize("differences, status", [
    ((None, None), AGREE),
    ((None, "known"), PINNED),
    (("known", "other"), NEW),
    (("unexplained",), NEW),
])
def test_judge(differences, status):
    assert judge("x", recorded(*differences), PINS)[0] == status


def test_a_pin_counts_only_for_its_implementation_and_check():
    assert judge("y", recorded("known"), PINS)[0] == NEW
    assert judge("x", {**recorded("known"), "check": "d"}, PINS)[0] == NEW


def test_cannot_run_keeps_its_reason():
    assert judge("x", {"check": "c", "cannot_run": "why", "cases": []}, PINS) == (CANNOT, "why")


def test_the_oracle_as_foreign_pair_agrees():
    check = delay_grids.run(delay_numpy.delayed_rows, delay_numpy.undelayed_frames)
    assert len(check.cases) == 41 * 5 and all(c.equal for c in check.cases)


def test_a_revert_shifted_by_one_is_named():
    def shifted(rows):
        frames = delay_numpy.undelayed_frames(rows)
        return np.roll(frames, 1, axis=1)

    check = delay_grids.run(None, shifted)
    differing = [c for c in check.cases if not c.equal]
    assert differing and all("revert" in c.difference for c in differing)
    assert all(c.equal for c in check.cases if c.id.startswith(("T0_", "T1_")))  # a roll of 0 or 1 frame is no change


def test_ours_is_equal_to_itself_and_upstreams_ramp_down_is_named():
    for scenario in scenarios():
        logits = scenario_logits(scenario)
        rows = state_machine.ours(logits)
        assert state_machine.classify(logits, rows) == (None, f"{len(rows)} rows equal")
        difference = state_machine.classify(logits, state_machine.ours(logits, "upstream"))[0]
        has_eoc = any(s["codebook"] == 0 and s["code"] == "eoc" for s in scenario["spikes"])
        assert difference == ("ramp_down_max1" if has_eoc else None), scenario["id"]


def test_a_foreign_row_with_boc_on_an_active_codebook_is_named():
    scenario = next(s for s in scenarios() if s["id"] == "eoc_at_step_20")
    logits = scenario_logits(scenario)
    rows = state_machine.ours(logits, "upstream")
    rows[10][3] = 1024
    assert state_machine.classify(logits, rows)[0] == "boc_not_masked"
    rows[10][3] = (rows[10][3] + 1) % 1024  # a plain wrong code
    assert state_machine.classify(logits, rows)[0] == "unexplained"


# -- the talker streams check (talker_streams.py): a foreign talker's greedy streams against the goldens

def _goldens():
    from conformance.talker import talker_cases

    return talker_cases.load_goldens()


def _as_stream(golden):
    return {"rows": [list(r) for r in golden["rows"]], "lm_tokens": list(golden["lm_tokens"])}


def _never():
    raise AssertionError("upstream's variant is asked for only when a stream differs")


def test_a_golden_stream_equals_itself_without_asking_for_upstreams_variant():
    from conformance.differential import talker_streams

    golden = _goldens()["streams"]["fox"]
    difference, detail = talker_streams.classify(golden, _as_stream(golden), _never)
    assert difference is None
    assert detail == f"finished: {len(golden['rows'])} rows, {len(golden['lm_tokens'])} LM tokens equal"


def test_a_stream_equal_to_upstreams_variant_is_the_ramp_down_and_says_where():
    from conformance.differential import talker_streams

    golden = _goldens()["streams"]["fox"]
    eoc = talker_streams.eoc_row(np.asarray(golden["rows"]))
    theirs = _as_stream(golden)
    assert theirs["rows"][eoc + 1][:2] == [1025, 1025]  # the training layout: row j after the EOC row, j + 1 EOCs
    theirs["rows"][eoc + 1][1] = 7  # upstream's max(1, j): codebook 1 one more real code
    difference, detail = talker_streams.classify(golden, theirs, lambda: theirs)
    assert difference == "ramp_down_max1"
    assert f"1 rows differ from row {eoc + 1} (eoc at row {eoc})" in detail


def test_another_voices_stream_is_unexplained():
    """clone_same_text_a and _b share every prompt token id; only the reference rows differ."""
    from conformance.differential import talker_streams

    streams = _goldens()["streams"]
    a, b = streams["clone_same_text_a"], streams["clone_same_text_b"]
    difference, detail = talker_streams.classify(b, _as_stream(a), lambda: _as_stream(b))
    assert difference == "unexplained" and detail.startswith("cut by max_tokens: ")


def test_differing_lm_tokens_are_not_equal():
    from conformance.differential import talker_streams

    golden = _goldens()["streams"]["hello"]
    theirs = {**_as_stream(golden), "lm_tokens": golden["lm_tokens"][:-1]}
    difference, detail = talker_streams.classify(golden, theirs, lambda: _as_stream(golden))
    assert difference == "unexplained" and detail.endswith("the LM tokens differ")


def test_every_golden_is_a_sub_case_and_batched_streams_meet_their_golden():
    from conformance.differential import talker_streams

    doc = _goldens()
    goldens = talker_streams.golden_streams(doc)
    assert len(goldens) == len(doc["streams"]) + sum(len(g) for g in doc["flavours"].values())
    flavour, prompt_id, hello = goldens["tied_text_head/hello"]
    assert (flavour, prompt_id) == ("tied_text_head", "hello") and hello == doc["flavours"]["tied_text_head"]["hello"]
    theirs = {sid: _as_stream(g) for sid, (_, _, g) in goldens.items() if sid != "fox"}
    theirs["batched/hello"] = _as_stream(doc["streams"]["hello"])
    theirs["batched/runner"] = _as_stream(doc["streams"]["hello"])  # another prompt's stream
    theirs["batched/nobody"] = _as_stream(doc["streams"]["hello"])
    nothing = {"rows": [], "lm_tokens": []}
    cases = {c.id: c for c in talker_streams.run(doc, theirs, lambda flavour, prompt: nothing).cases}
    assert cases["fox"].difference == "not_run"
    assert cases["batched/hello"].equal and cases["batched/runner"].difference == "unexplained"
    assert cases["batched/nobody"].difference == "no_golden"
    assert all(cases[sid].equal for sid in goldens if sid != "fox")


def test_the_cpu_columns_ramp_down_is_pinned_for_it_alone():
    pins = read_pins()
    recorded = {"check": "talker_streams", "tolerance": "t", "cannot_run": None,
                "cases": [{"id": "fox", "equal": False, "difference": "ramp_down_max1", "detail": ""}]}
    assert judge("vllm-omni-cpu", recorded, pins)[0] == PINNED
    assert judge("vllm-omni", recorded, pins)[0] == NEW


# -- upstream's code2wav on the CPU (upstream_cpu_codec.py): how its two refusals are named

def test_the_codec_refusals_are_named_from_their_errors():
    from conformance.differential import upstream_cpu_codec as codec

    width = RuntimeError("Error(s) in loading state_dict for DacDecoder: size mismatch for conv1.weight: copying a "
                         "param with shape torch.Size([64, 256, 7]) from checkpoint, the shape in current model is "
                         "torch.Size([1024, 256, 7]).")
    assert codec.classify_load_error(width)[0] == "fixed_decoder_width"
    assert codec.classify_load_error(KeyError("fc2.weight"))[0] == "unexplained"
    assert codec.classify_load_error(None)[0] is None
    cuda = RuntimeError("Tried to instantiate dummy base class _cuda_isCurrentStreamCapturing")
    assert codec.classify_decode_error(cuda)[0] == "cuda_query"
    assert codec.classify_decode_error(ValueError("audio_codes out of range"))[0] == "unexplained"
    assert codec.classify_decode_error(None)[0] is None


def test_the_width_adaptation_changes_only_the_decoder_width_and_is_undone():
    import types

    from conformance.differential import upstream_cpu_codec as codec

    seen = []
    module = types.SimpleNamespace(build_higgs_audio_acoustic_decoder=lambda cfg, device: seen.append((cfg, device)))
    original = module.build_higgs_audio_acoustic_decoder
    written_in = {"acoustic_model_config": {"decoder_hidden_size": 1024, "hidden_size": 256}, "other": 1}
    with codec.with_decoder_width(module, codec.decoder_width()):
        module.build_higgs_audio_acoustic_decoder(written_in, "cpu")
    assert module.build_higgs_audio_acoustic_decoder is original
    assert seen == [({"acoustic_model_config": {"decoder_hidden_size": 64, "hidden_size": 256}, "other": 1}, "cpu")]
    assert written_in["acoustic_model_config"]["decoder_hidden_size"] == 1024


# -- per-implementation inputs (verdicts.py): a new adapter does not void the others' results

def test_each_implementation_hashes_its_own_inputs(tmp_path):
    from conformance.differential import verdicts

    assert not any("adapter_vllm_omni_cpu" in p for p in verdicts.input_files("boson"))
    assert "conformance/differential/adapter_vllm_omni_cpu.py" in verdicts.input_files("vllm-omni-cpu")
    assert verdicts.inputs_sha256(implementation="vllm-omni") == verdicts.inputs_sha256()
    assert verdicts.inputs_sha256(implementation="vllm-omni-cpu") != verdicts.inputs_sha256()
    written = verdicts.write_results("vllm-omni-cpu", {}, [verdicts.Check("codec_decode", cannot_run="why")], tmp_path,
                                     ran={"what": "x"})
    doc = verdicts.read_results("vllm-omni-cpu", tmp_path)
    assert written.name == "vllm-omni-cpu.json" and doc["ran"] == {"what": "x"}
    assert doc["inputs_sha256"] == verdicts.inputs_sha256(implementation="vllm-omni-cpu")
    now = {impl: verdicts.inputs_sha256(implementation=impl) for impl in verdicts.IMPLEMENTATIONS}
    fresh = verdicts.table(tmp_path, pins=[], current_inputs=now)
    assert "codec_decode x vllm-omni-cpu: cannot run: why" in fresh
    stale = verdicts.table(tmp_path, pins=[], current_inputs={**now, "vllm-omni-cpu": "other"})
    assert any(line.startswith("codec_decode x vllm-omni-cpu: cannot run: stale results") for line in stale)


def test_the_pins_schema_names_every_implementation_and_check():
    import json

    from conformance.differential import verdicts

    schema = json.loads((verdicts.ROOT / "conformance" / "schemas" / "differential" / "pinned.json").read_text())
    fields = schema["properties"]["pinned"]["items"]["properties"]
    assert fields["implementation"]["enum"] == list(verdicts.IMPLEMENTATIONS)
    assert fields["check"]["enum"] == list(verdicts.CHECKS)


def _refused(where, error):
    return {"outcome": "refused", "where": where, "error": error}


def _completed(rows=16, finish_reason="length"):
    return {"outcome": "completed", "rows": rows, "finish_reason": finish_reason}


def test_a_refusal_naming_the_field_is_equal_and_an_acceptance_is_named_per_probe():
    from conformance.differential import engine_checks

    assert engine_checks.judge_probe("top_p_zero", _refused("SamplingParams", "top_p must be in (0, 1], got 0.0")) == (
        None, "refused in SamplingParams: top_p must be in (0, 1], got 0.0")
    assert engine_checks.judge_probe("top_k_negative", _refused("generate", "bad value"))[0] == "refused_unnamed"
    difference, detail = engine_checks.judge_probe("top_k_above_vocab", _completed(16, "length"))
    assert difference == "accepts_top_k_above_vocab" and "16 rows" in detail and "length" in detail


def test_the_length_probes_expect_a_refusal_past_the_model_length_and_a_completion_within():
    from conformance.differential import engine_checks

    assert engine_checks.judge_probe("prompt_near_model_len", _completed(8))[0] is None
    assert engine_checks.judge_probe("prompt_near_model_len", _refused("generate", "too long"))[0] == (
        "refuses_prompt_near_model_len")
    refused = _refused("generate", "longer than max_model_len")
    assert engine_checks.judge_probe("prompt_past_model_len", refused)[0] is None
    assert engine_checks.judge_probe("prompt_past_model_len", _completed(3))[0] == "accepts_prompt_past_model_len"


def test_every_probe_is_a_sub_case_and_a_missing_one_is_not_run():
    from conformance.differential import engine_checks

    check = engine_checks.validation_check({"temperature_negative": _refused("SamplingParams", "temperature < 0")})
    by_id = {c.id: c for c in check.cases}
    assert set(by_id) == {*engine_checks.SAMPLING_PROBES, *engine_checks.LENGTH_PROBES}
    assert by_id["temperature_negative"].equal
    assert by_id["seed_past_int64"].difference == "not_run"


def test_seeded_sampling_equal_runs_agree_and_a_repeated_other_seed_or_an_engine_error_is_named():
    from conformance.differential import engine_checks

    rows = [[1] * 8, [2] * 8]
    same = {"alone": rows, "again": rows, "batched": rows, engine_checks.CHUNKED_SEEDED: rows,
            "other_seed": [[3] * 8]}
    assert all(c.equal for c in engine_checks.seeded_check(same).cases)
    broken = {**same, "batched": [[1] * 8], "other_seed": rows,
              engine_checks.CHUNKED_SEEDED: {"error": "RuntimeError: CPU Generator does not use offset"}}
    differences = {c.id: c.difference for c in engine_checks.seeded_check(broken).cases}
    assert differences == {"same_seed_again": None, "same_seed_batched": "seed_batched_differs",
                           f"same_seed_{engine_checks.CHUNKED_SEEDED}": "engine_error",
                           "other_seed_differs": "other_seed_same"}


def _abort_run(pool_after, kept):
    return {"aborted_after_steps": 8, "doomed_finished_before": None,
            "pool_before_abort": ["abort-doomed-1", "abort-kept-2"],
            "pool_after_abort": pool_after, "pool_end": [], "kept_alone": [[1] * 8, [2] * 8], "kept": kept,
            "kept_finish_reason": "stop", "doomed_rows": 6}


def test_an_abort_that_frees_the_state_and_leaves_the_other_request_alone_agrees():
    from conformance.differential import engine_checks

    check = engine_checks.abort_check(_abort_run(["abort-kept-2"], [[1] * 8, [2] * 8]))
    assert [(c.id, c.difference) for c in check.cases] == [("aborted_state_freed", None),
                                                           ("other_request_unchanged", None)]


def test_an_abort_that_keeps_the_state_or_changes_the_other_request_is_named():
    from conformance.differential import engine_checks

    kept_state = engine_checks.abort_check(_abort_run(["abort-doomed-1", "abort-kept-2"], [[1] * 8]))
    assert [c.difference for c in kept_state.cases] == ["state_kept_after_abort", "abort_changes_other_request"]
    late = engine_checks.abort_check({**_abort_run(None, []), "aborted_after_steps": None})
    assert [c.difference for c in late.cases] == ["not_aborted"]


def _long(tokens, outcome):
    return {"prompt_tokens": tokens, **outcome}


def test_a_long_input_past_our_limit_that_upstream_completes_is_named_and_a_refusal_on_both_sides_agrees():
    from conformance.differential import engine_checks

    rows = engine_checks.LONG_INPUT_MAX_TOKENS
    difference, detail = engine_checks.judge_long_input(_long(1001, {**_completed(rows - 1), "tokens": rows - 1}), 1024)
    assert difference == "accepts_past_our_limit"
    assert "ours: a 400 naming input" in detail and "cut by max_model_len (1001 + 23 output tokens)" in detail
    assert engine_checks.judge_long_input(_long(1024, _refused("generate", "longer than max_model_len")), 1024)[0] is None
    assert engine_checks.judge_long_input(_long(1000, {**_completed(rows), "tokens": rows}), 1024)[0] is None


def test_a_long_input_within_our_limit_that_upstream_refuses_or_cuts_is_named():
    from conformance.differential import engine_checks

    assert engine_checks.judge_long_input(_long(1000, _refused("generate", "too long")), 1024)[0] == (
        "refuses_within_our_limit")
    cut = _long(1000, {**_completed(20), "tokens": 20})
    assert engine_checks.judge_long_input(cut, 1024)[0] == "cut_within_our_limit"
    finished = _long(1000, {**_completed(20, "stop"), "tokens": 21})
    assert engine_checks.judge_long_input(finished, 1024)[0] is None


def test_every_long_input_probe_is_a_sub_case_and_a_missing_one_is_not_run():
    from conformance.differential import engine_checks

    run = {"max_model_len": 1024, "probes": {"text_at_model_len": _long(1024, _refused("generate", "longer"))}}
    by_id = {c.id: c for c in engine_checks.long_input_check(run).cases}
    assert set(by_id) == set(engine_checks.LONG_INPUT_PROBES)
    assert by_id["text_at_model_len"].equal and by_id["text_fills_our_limit"].difference == "not_run"


def test_the_long_input_limit_judged_is_our_servers_and_its_refusal_names_the_input():
    """engine_checks.ours_refuses states our speech server's input limit: held here to Service.check_length on
    the prompts the engine check sends (upstream_cpu_talker.long_text_prompt)."""
    from types import SimpleNamespace

    from conformance.differential import engine_checks
    from conformance.differential.upstream_cpu_talker import long_text_prompt
    from higgs_dummy.cache import cached_checkpoint
    from reference.serve.app import Service
    from reference.serve.protocol import RequestError
    from reference.speech import SpeechAPI, SpeechRequest

    api = SpeechAPI(engine=None, checkpoint=cached_checkpoint("tiny", 0, "sampling"), runner="v1")
    service = Service(speaker=SimpleNamespace(api=api), model_name="m", runner="v1", profile="default",
                      max_model_len=1024, default_sampling={}, voices={}, stream_default=None)
    budget = engine_checks.LONG_INPUT_MAX_TOKENS
    for probe_id in engine_checks.LONG_INPUT_PROBES:
        tokens = engine_checks.long_input_tokens(probe_id, 1024)
        text, prompt = long_text_prompt(api, tokens)
        assert len(prompt["prompt_token_ids"]) == tokens
        request = SpeechRequest(text, sampling={"max_tokens": budget})
        if engine_checks.ours_refuses(tokens, budget, 1024):
            with pytest.raises(RequestError) as refused:
                service.check_length(request)
            assert (refused.value.status, refused.value.param) == (400, "input"), probe_id
        else:
            assert service.check_length(request) == tokens, probe_id


# -- the stream-vs-offline check (stream_offline.py, upstream_cpu_stream.py): a stitched stream judged

HOP = 4  # samples per frame of the stand-in decode


def _offline(frames=12, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 1024, size=(8, frames)), rng.standard_normal(frames * HOP)


def _windows(frames, pcm, cuts, noise=0.0):
    """cuts: (start, end, left, right) in frames; each window keeps its exact offline samples, plus
    `noise` on its first kept sample (what a decode short of context does at a window edge)."""
    from conformance.differential.stream_offline import Window

    windows = []
    for start, end, left, right in cuts:
        kept = pcm[(start + left) * HOP:(end - right) * HOP].copy()
        kept[:1] += noise
        windows.append(Window(frames[:, start:end], left, right, kept))
    return windows


EXACT_CUTS = [(0, 5, 0, 4), (0, 9, 1, 4), (0, 12, 5, 0)]  # initial 1, then 4 frames, holdback 4, final flush
BOUND_OF_STREAMING_YAML = (100.0, 1e-5)


def _judged(windows, frames, pcm, within_reach=False):
    from conformance.differential import stream_offline

    result = stream_offline.compare(windows, frames, pcm)
    return stream_offline.judge_geometry({"s": result}, within_reach, stream_offline.Bound(*BOUND_OF_STREAMING_YAML))


def test_an_exact_stitch_is_equal():
    frames, pcm = _offline()
    difference, detail = _judged(_windows(frames, pcm, EXACT_CUTS), frames, pcm)
    assert difference is None, detail
    assert "every frame kept once in order" in detail and "SNR min inf dB" in detail


def test_a_lossy_stitch_is_named_by_whether_the_context_covers_the_reach():
    frames, pcm = _offline()
    lossy = _windows(frames, pcm, EXACT_CUTS, noise=0.1)
    difference, detail = _judged(lossy, frames, pcm)
    assert difference == "lossy_stitch" and "1/1 streams miss the bound" in detail
    assert _judged(lossy, frames, pcm, within_reach=True)[0] == "lossy_within_reach"


def test_a_frame_lost_or_repeated_at_a_window_edge_is_named():
    frames, pcm = _offline()
    short = _windows(frames, pcm, [(0, 5, 0, 4), (0, 9, 1, 4), (0, 12, 5, 1)])  # the last frame trimmed away
    difference, detail = _judged(short, frames, pcm)
    assert difference == "frames_differ" and "kept 11 frames, offline 12" in detail
    repeated = _windows(frames, pcm, [(0, 5, 0, 0), (0, 9, 1, 4), (0, 12, 5, 0)])  # holdback not trimmed
    assert _judged(repeated, frames, pcm)[0] == "frames_differ"


def test_a_stream_of_the_right_frames_but_short_samples_is_named():
    from conformance.differential.stream_offline import Window

    frames, pcm = _offline()
    windows = _windows(frames, pcm, EXACT_CUTS)
    last = windows[-1]
    windows[-1] = Window(last.frames, last.left, last.right, last.pcm[:-HOP])
    difference, detail = _judged(windows, frames, pcm)
    assert difference == "num_samples" and f"stitched {11 * HOP} samples, offline {12 * HOP}" in detail


def test_a_window_that_cannot_keep_its_trims_is_refused():
    from conformance.differential.stream_offline import Window

    frames, pcm = _offline()
    with pytest.raises(ValueError, match="window of 5 frames cannot keep"):
        Window(frames[:, :5], 3, 3, pcm[:0]).kept()
    with pytest.raises(ValueError, match="no stream ran"):
        from conformance.differential import stream_offline

        stream_offline.judge_geometry({}, False, stream_offline.Bound(*BOUND_OF_STREAMING_YAML))


def test_the_context_covers_the_reach_only_on_both_sides():
    from conformance.differential.stream_offline import covers_reach

    assert covers_reach(10, 10, (10, 10))
    assert not covers_reach(25, 4, (10, 10))  # upstream's deploy geometry
    assert not covers_reach(9, 10, (10, 10))


def test_only_the_lossy_stitch_of_the_cpu_column_is_pinned():
    pins = read_pins()

    def stream_check(difference):
        return {"check": "stream_offline", "tolerance": "t", "cannot_run": None,
                "cases": [{"id": "higgs_multimodal_qwen3", "equal": False, "difference": difference, "detail": ""}]}

    assert judge("vllm-omni-cpu", stream_check("lossy_stitch"), pins)[0] == PINNED
    for unpinned in ("lossy_within_reach", "frames_differ", "num_samples"):
        assert judge("vllm-omni-cpu", stream_check(unpinned), pins)[0] == NEW
    assert judge("vllm-omni", stream_check("lossy_stitch"), pins)[0] == NEW


def test_a_deploy_files_geometry_is_read_from_its_one_connector(tmp_path):
    from conformance.differential.upstream_cpu_stream import deploy_geometry

    extra = ("    extra:\n      codec_chunk_frames: 25\n      codec_left_context_frames: 25\n"
             "      codec_right_holdback_frames: 4\n      initial_codec_chunk_frames: 1\n")
    good = tmp_path / "good.yaml"
    good.write_text("connectors:\n  shm:\n    name: S\n" + extra + "  other:\n    name: T\n")
    assert deploy_geometry(good) == {"initial_codec_chunk_frames": 1, "codec_chunk_frames": 25,
                                     "codec_left_context_frames": 25, "codec_right_holdback_frames": 4}
    twice = tmp_path / "twice.yaml"
    twice.write_text("connectors:\n  a:\n" + extra + "  b:\n" + extra)
    with pytest.raises(ValueError, match="2 connectors carry a codec geometry"):
        deploy_geometry(twice)
    lacking = tmp_path / "lacking.yaml"
    lacking.write_text("connectors:\n  a:\n    extra:\n      codec_chunk_frames: 25\n")
    with pytest.raises(ValueError, match="lacks"):
        deploy_geometry(lacking)
