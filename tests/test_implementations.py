"""The switch that picks the speech server the serving checks judge (conformance/serving/implementations.py),
its adapters, and the results table (conformance/serving/results.py); and, through a server of ours started
once, the checks run at a URL with each adapter (issue #32)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conformance import case_files
from conformance.environment import has_cuda
from conformance.serving import implementations, results
from conformance.serving.implementations import GENERIC, REFERENCE, SGLANG_OMNI, VLLM_OMNI, choose, series
from reference.serve.metrics import metric

pytestmark = pytest.mark.cpu

ROOT = Path(__file__).resolve().parents[1]
PYTHON_ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


# --- the switch -----------------------------------------------------------------------------------------------

def test_without_options_the_reference_is_started_here():
    chosen = choose(environ={})
    assert chosen.implementation is REFERENCE and chosen.url is None and not chosen.remote


def test_the_environment_chooses_and_the_options_win():
    environ = {implementations.IMPLEMENTATION_ENV: "generic", implementations.SERVER_URL_ENV: "http://h:1/"}
    assert choose(environ=environ) == implementations.Selection(GENERIC, "http://h:1")
    assert choose("vllm-omni", "https://gpu:8000", environ=environ) == implementations.Selection(VLLM_OMNI,
                                                                                                 "https://gpu:8000")


@pytest.mark.parametrize("name, url, names", [
    ("tts", None, "--implementation"),  # not an implementation
    ("vllm-omni", None, "--server-url"),  # the suite starts only ours
    ("generic", None, "--server-url"),
    ("sglang-omni", None, "--server-url"),
    ("reference", "127.0.0.1:8000", "--server-url"),  # no scheme
    ("reference", "http://127.0.0.1:8000/v1", "--server-url"),  # a base URL, not an endpoint
])
def test_a_bad_selection_is_refused_naming_the_option(name, url, names):
    with pytest.raises(ValueError, match=names):
        choose(name, url, environ={})


def test_pytest_refuses_an_implementation_without_a_url():
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q",
                          "conformance/serving/test_serving.py", "--implementation", "vllm-omni"],
                         cwd=ROOT, env=PYTHON_ENV, capture_output=True, text=True, timeout=300)
    assert run.returncode == pytest.ExitCode.USAGE_ERROR, run.stdout[-2000:] + run.stderr[-2000:]
    assert "--implementation vllm-omni needs --server-url" in run.stderr


# --- the adapters ---------------------------------------------------------------------------------------------

def test_each_adapter_spells_the_same_request_its_way():
    wav = b"RIFF....WAVEfmt "
    ours = REFERENCE.body("higgs-tiny", "Hi.", ref_wav=wav, ref_text="Hello.", max_tokens=600, stream_format="audio")
    assert ours == {"model": "higgs-tiny", "input": "Hi.", "voice": "default", "temperature": 0.0,
                    "ref_audio": base64.b64encode(wav).decode(), "ref_text": "Hello.", "max_tokens": 600,
                    "stream_format": "audio"}
    upstream = VLLM_OMNI.body("m", "Hi.", ref_wav=wav, ref_text="Hello.", max_tokens=600, temperature=0.0)
    assert upstream == {"model": "m", "input": "Hi.", "voice": "default", "seed": 7,
                        "ref_audio": "data:audio/wav;base64," + base64.b64encode(wav).decode(), "ref_text": "Hello.",
                        "max_new_tokens": 600}  # no temperature field upstream: not sent


def test_a_server_at_a_url_gets_the_suites_answer_length_where_the_check_names_none():
    assert VLLM_OMNI.body("m", "Hi.", default_max_tokens=160)["max_new_tokens"] == 160
    assert VLLM_OMNI.body("m", "Hi.", max_tokens=600, default_max_tokens=160)["max_new_tokens"] == 600
    assert "max_tokens" not in REFERENCE.body("m", "Hi.", default_max_tokens=160)  # its server.yaml caps it
    assert "max_tokens" not in GENERIC.body("m", "Hi.", default_max_tokens=160)  # not an OpenAI field


def test_an_implementations_encoder_bound_overrides_the_suites_only_where_it_has_one():
    suite = {"max_priming": 156, "max_padding": 480, "max_mel_db": 2.0, "max_tail_mel_db": 3.0}
    assert VLLM_OMNI.format_bound("opus", suite) == {**suite, "max_mel_db": 4.0}
    assert VLLM_OMNI.format_bound("mp3", suite) == suite and REFERENCE.format_bound("opus", suite) == suite


def test_an_error_names_the_field_where_the_adapter_says():
    in_param = {"message": "bad", "param": "voice"}
    in_message = {"message": "Invalid voice 'alloy'. Supported: a, b", "param": None}
    assert REFERENCE.names_field(in_param, "voice") and not REFERENCE.names_field(in_message, "voice")
    assert VLLM_OMNI.names_field(in_message, "voice") and VLLM_OMNI.names_field(in_param, "voice")
    assert not VLLM_OMNI.names_field({"message": "voices are loaded", "param": None}, "voice")  # a word, not a part


def test_a_lacking_feature_says_why_and_an_unknown_one_is_refused():
    assert REFERENCE.not_applicable(*implementations.FEATURES) is None
    assert GENERIC.not_applicable("sse", "repeatable").startswith("not applicable to generic: OpenAI's speech API")
    assert "sends waiting" in VLLM_OMNI.not_applicable("abort_metric", "sends_waiting")
    assert VLLM_OMNI.format_reason("mp3", streamed=False) is None
    assert "aac whole" in VLLM_OMNI.format_reason("aac", streamed=False)
    assert "mp3 streamed" in VLLM_OMNI.format_reason("mp3", streamed=True)
    with pytest.raises(ValueError, match="unknown feature 'speed'"):
        REFERENCE.not_applicable("speed")


def test_metrics_are_read_by_name_and_label():
    values = {'vllm_omni:speech_stream_aborted_total{model_name="m",reason="cancelled"}': 2.0,
              'vllm_omni:speech_stream_aborted_total{model_name="m",reason="closed"}': 1.0,
              'vllm_omni:speech_stream_aborted_total{model_name="m",reason="error"}': 5.0,
              'http_requests_total{handler="/v1/audio/speech",method="POST",status="5xx"}': 1.0,
              'http_requests_total{handler="/v1/audio/speech",method="POST",status="2xx"}': 9.0,
              "higgs_serve_requests_aborted_total": 4.0}
    assert VLLM_OMNI.metrics.aborted(values) == 3.0  # a client that left, not an error
    assert VLLM_OMNI.metrics.server_errors(values) == 1.0
    assert REFERENCE.metrics.aborted(values) == 4.0
    assert series(values, "http_requests_total") == 10.0 and series(values, "absent") == 0.0


def test_upstreams_requests_in_flight_are_its_api_servers_not_its_engines_last_snapshot():
    """After an abort upstream's vllm:* gauges keep the engines' last snapshot (made at most once a second, none
    while idle: core/sched/omni_scheduler_mixin.py:986-991), as on the H200: running 1, waiting 1, 15 KV blocks.
    The adapter reads the API server's gauges, republished when the request is cleaned up."""
    after_abort = {'vllm:num_requests_running{model_name="m",stage="0",replica="0"}': 1.0,
                   'vllm:num_requests_waiting{model_name="m",stage="1",replica="0"}': 1.0,
                   'vllm:kv_cache_usage_perc{model_name="m",stage="0",replica="0"}': 0.000439,
                   'vllm_omni:num_requests_running{model_name="m"}': 0.0,
                   'vllm_omni:num_requests_waiting{model_name="m"}': 0.0}
    assert sum(metric(after_abort, name) for name in VLLM_OMNI.metrics.in_flight) == 0
    assert all(metric(after_abort, name) == 0 for name in VLLM_OMNI.metrics.idle)
    assert not any(name.startswith("vllm:") for name in VLLM_OMNI.metrics.in_flight + VLLM_OMNI.metrics.idle)


def test_a_reference_outside_the_durations_an_implementation_accepts_is_drawn_at_the_nearest_bound():
    from conformance.serving.serving_client import body_for, wav_bytes
    from conformance.talker import talker_cases

    clone = {"id": "c", "text": "A voice.", "ref_audio": {"seconds": 0.5, "seed": 5}, "ref_text": "The reference."}
    assert REFERENCE.fit_ref_audio(clone["ref_audio"]) == {"seconds": 0.5, "seed": 5}  # ours: as before
    assert VLLM_OMNI.fit_ref_audio(clone["ref_audio"]) == {"seconds": 1.0, "seed": 5}  # upstream: at least 1 s
    assert VLLM_OMNI.fit_ref_audio({"seconds": 31.0, "seed": 5}) == {"seconds": 30.0, "seed": 5}
    assert VLLM_OMNI.fit_ref_audio({"seconds": 2.0, "seed": 5}) == {"seconds": 2.0, "seed": 5}

    ours = body_for(clone, REFERENCE, "higgs-tiny")
    assert base64.b64decode(ours["ref_audio"]) == wav_bytes(talker_cases.reference_audio({"seconds": 0.5, "seed": 5}))
    upstream = body_for(clone, VLLM_OMNI, "m")
    wav = base64.b64decode(upstream["ref_audio"].removeprefix("data:audio/wav;base64,"))
    short = wav_bytes(talker_cases.reference_audio(clone["ref_audio"]))
    assert len(wav) == 44 + 2 * 24000 and wav[44:44 + len(short) - 44] == short[44:]  # the same noise, drawn longer
    assert upstream["ref_text"] == "The reference." and upstream["seed"] == 7


METRIC_FEATURES = ("metrics", "abort_metric", "sends_waiting", "server_errors")


@pytest.mark.parametrize("impl", implementations.IMPLEMENTATIONS.values(), ids=lambda i: i.name)
def test_each_adapters_feature_table_is_consistent(impl):
    """What an adapter lacks is a feature the checks know, each with its reason; a server without /metrics lacks
    every check that reads it; it streams only formats it answers, and names a media type only for those."""
    assert set(impl.lacks) <= set(implementations.FEATURES) and all(impl.lacks.values()), impl.lacks
    if impl.metrics is None:
        assert set(METRIC_FEATURES) <= set(impl.lacks), set(METRIC_FEATURES) - set(impl.lacks)
    elif impl.metrics.sends_waiting is None:
        assert "sends_waiting" in impl.lacks
    assert impl.streamed_formats <= impl.whole_formats <= implementations.OPENAI_FORMATS
    assert set(impl.whole_media_types) <= impl.whole_formats and set(impl.format_bounds) <= impl.whole_formats
    assert "stream_format" not in impl.streamed_fields  # Implementation.streamed sets it
    assert ("repeatable" in impl.lacks) == (not impl.repeatable)
    assert impl.ref_audio in ("base64", "data_uri") and impl.ref_audio_seconds[0] <= impl.ref_audio_seconds[1]


def test_the_sglang_omni_adapter_spells_its_requests_and_says_what_it_lacks():
    wav = b"RIFF....WAVEfmt "
    body = SGLANG_OMNI.body("m", "Hi.", ref_wav=wav, ref_text="Hello.", default_max_tokens=160)
    assert body == {"model": "m", "input": "Hi.", "voice": "default", "temperature": 0.0, "max_new_tokens": 160,
                    "ref_audio": "data:audio/wav;base64," + base64.b64encode(wav).decode(), "ref_text": "Hello."}
    # OpenAI asks for a stream with stream_format alone; sglang-omni streams only with `stream: true`, raw PCM.
    assert SGLANG_OMNI.streamed({"response_format": "pcm"}, "audio") == {
        "response_format": "pcm", "stream_format": "audio", "stream": True}
    assert REFERENCE.streamed({"response_format": "wav"}, "sse") == {"response_format": "wav", "stream_format": "sse"}
    assert SGLANG_OMNI.format_reason("pcm", streamed=True) is None
    assert "wav streamed in none of pcm" in SGLANG_OMNI.format_reason("wav", streamed=True)
    assert SGLANG_OMNI.format_reason("aac", streamed=False) is None
    assert all(SGLANG_OMNI.not_applicable(f).startswith("not applicable to sglang-omni: its server has no /metrics")
               for f in METRIC_FEATURES)
    assert SGLANG_OMNI.not_applicable("health", "repeatable", "sse", "ref_audio") is None
    assert choose("sglang-omni", "http://gpu:8000/", environ={}) == implementations.Selection(SGLANG_OMNI,
                                                                                           "http://gpu:8000")


def _dead_url() -> str:
    """A loopback URL where nothing listens (a port bound once and let go)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_the_checks_aimed_at_a_dead_url_fail_naming_it_and_never_start_a_server_in_its_place(tmp_path):
    """No server at the URL: the checks that need one fail at setup, naming the URL and the implementation; none
    passes, none is judged against a server the suite started (ours writes its log under the fixtures' work
    folder, which stays empty)."""
    url = _dead_url()
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q",
                          "--basetemp", str(tmp_path / "base"), "conformance/serving/test_serving.py", "-k",
                          "test_models_list or test_health_answers", "--implementation", "sglang-omni",
                          "--server-url", url], cwd=ROOT, env=PYTHON_ENV, capture_output=True, text=True, timeout=300)
    out = run.stdout + run.stderr
    assert run.returncode == pytest.ExitCode.TESTS_FAILED, out[-3000:]
    assert f"--server-url {url}: no server answers there" in out, out[-3000:]
    assert "start sglang-omni's server first" in out, out[-3000:]
    assert "2 errors" in out and "passed" not in out, out[-3000:]
    assert not list((tmp_path / "base").rglob("server.log")), "a server was started in the dead URL's place"


def test_a_results_run_at_a_dead_url_is_refused_and_writes_nothing(tmp_path):
    url = _dead_url()
    with pytest.raises(SystemExit) as refused:
        results.main(["run", "--implementation", "sglang-omni", "--server-url", url, "--out", str(tmp_path)])
    assert f"no server answers at {url}" in str(refused.value.code), refused.value.code
    assert "start sglang-omni's server there first" in str(refused.value.code)
    assert not list(tmp_path.iterdir())


# --- the results table ----------------------------------------------------------------------------------------

def test_a_checks_name_drops_the_implementation_parameter():
    base = "conformance/serving/test_serving.py::test_x"
    assert results.check_name(f"{base}[vllm-omni]", "vllm-omni") == base
    assert results.check_name(f"{base}[reference-plain]", "reference") == f"{base}[plain]"
    assert results.check_name(f"{base}[mp3-generic]", "generic") == f"{base}[mp3]"
    assert results.check_name(f"{base}[cpu_default-plain]", "reference") == f"{base}[cpu_default-plain]"


def _recorded(tmp_path, fake_tests: str) -> dict:
    """What the Recorder writes for a file of fake checks, run by pytest in a child process."""
    (tmp_path / "test_fake.py").write_text(textwrap.dedent(fake_tests))
    script = textwrap.dedent(f"""
        import json, pytest
        from conformance.serving.results import Recorder
        recorder = Recorder("generic")
        pytest.main(["-q", "-p", "no:cacheprovider", "--rootdir", {str(tmp_path)!r}, {str(tmp_path)!r}],
                    plugins=[recorder])
        print("RESULT" + json.dumps(recorder.checks))
    """)
    run = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=PYTHON_ENV, capture_output=True,
                         text=True, timeout=300)
    return json.loads(run.stdout.split("RESULT")[-1])


def test_the_recorder_writes_each_outcome_with_its_reason(tmp_path):
    checks = _recorded(tmp_path, """
        import pytest

        def test_passes(record_property):
            record_property("note", "judged whole only")

        def test_fails():
            assert 1 == 2, "the header claims 22050 Hz"

        @pytest.mark.skip(reason="not applicable to generic: no metrics")
        def test_skipped_at_collection():
            pass

        def test_skipped_inside():
            pytest.skip("not applicable to generic: no sse")
    """)
    assert {k.split("::")[1]: (v["outcome"], v["reason"]) for k, v in checks.items()} == {
        "test_passes": ("pass", "judged whole only"),
        "test_fails": ("fail", "call: AssertionError: the header claims 22050 Hz assert 1 == 2"),
        "test_skipped_at_collection": ("not applicable", "not applicable to generic: no metrics"),
        "test_skipped_inside": ("not applicable", "not applicable to generic: no sse"),
    }


def test_the_recorder_keeps_the_checks_a_stopped_run_never_reached(tmp_path):
    """A run cut short (the GPU call's timeout sends SIGINT) records what ran; the rest is "not run", not missing."""
    checks = _recorded(tmp_path, """
        import pytest

        def test_ran():
            pass

        def test_the_run_stops_here():
            raise KeyboardInterrupt

        def test_never_reached():
            pass
    """)
    outcomes = {k.split("::")[1]: v["outcome"] for k, v in checks.items()}
    assert outcomes == {"test_ran": "pass", "test_the_run_stops_here": "not run", "test_never_reached": "not run"}
    assert checks[next(k for k in checks if k.endswith("test_never_reached"))]["reason"].startswith("not reached")


def _doc(name, checks, ran=True):
    return results.document(name, "http://h:1" if ran else None, checks, ran=ran, command=[],
                            reason=None if ran else "no GPU here")


def test_the_table_has_a_column_per_implementation_and_a_row_per_check():
    a = "conformance/serving/test_serving.py::test_a"
    b = "conformance/serving/test_serving.py::test_b[x|y]"
    ours = _doc("reference", {a: {"outcome": "pass", "reason": ""}, b: {"outcome": "fail", "reason": "call: 500"}})
    theirs = _doc("vllm-omni", {a: {"outcome": "not run", "reason": "no GPU here"}}, ran=False)
    rendered = results.table([ours, theirs])
    assert "1 pass, 1 fail; run at http://h:1" in rendered and "1 not run; not run: no GPU here" in rendered
    assert "| `test_serving.py::test_a` | pass | not run (1) |" in rendered
    assert "| `test_serving.py::test_b[x\\|y]` | FAIL (2) | not collected |" in rendered
    assert rendered.endswith("Reasons:\n\n1. no GPU here\n2. call: 500\n")
    marked = f"intro\n{results.BEGIN}\nold\n{results.END}\nafter\n"
    assert results.replace_table(marked, rendered) == f"intro\n{results.BEGIN}\n{rendered}{results.END}\nafter\n"
    with pytest.raises(ValueError, match="no markers"):
        results.replace_table("no table here", rendered)


def test_the_docs_table_is_the_one_the_committed_results_make():
    docs = results.load_all()
    assert [d["implementation"] for d in docs] == ["reference", "vllm-omni", "sglang-omni"]
    text = (ROOT / "docs" / "implementations.md").read_text()
    assert results.replace_table(text, results.table(docs)) == text, (
        "docs/implementations.md is stale: python -m conformance.serving.results table --write docs/implementations.md")


def test_the_committed_results_name_the_checks_collected_now(tmp_path):
    """A check renamed, added or removed since the results were written shows here: run them again."""
    collected = {}
    for doc in results.load_all():
        script = textwrap.dedent(f"""
            import json
            from pathlib import Path
            from conformance.serving.results import not_run
            path = not_run({doc['implementation']!r}, "collected only", Path({str(tmp_path)!r}))
            print("RESULT" + path.read_text())
        """)
        run = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=PYTHON_ENV, capture_output=True,
                             text=True, timeout=300)
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
        collected[doc["implementation"]] = {c["check"] for c in json.loads(run.stdout.split("RESULT")[-1])["checks"]}
        assert {c["check"] for c in doc["checks"]} == collected[doc["implementation"]], doc["implementation"]


# --- the checks at a URL, through our server started once ------------------------------------------------------

@pytest.fixture(scope="module")
def our_server(tmp_path_factory):
    """Ours as conformance/serving/reference_server.py starts it (cpu_default, the suite's voice folder)."""
    from conformance.serving.serving_client import ServerProcess, write_voices
    from higgs_dummy.cache import cached_checkpoint

    doc = case_files.load("serving/server")
    variant = next(v for v in doc["variants"] if v["id"] == "cpu_default")
    work = tmp_path_factory.mktemp("implementations")
    write_voices(work / "voices")
    server = ServerProcess(cached_checkpoint("tiny", 0), variant["profile"], "cpu",
                           {**doc["overrides"], **variant["overrides"]}, work, work / "voices")
    try:
        server.wait_healthy()
        yield server
    finally:
        server.stop()


def _judged(server, implementation: str, selection: str, out: Path) -> dict[str, tuple[str, str]]:
    run = subprocess.run([sys.executable, "-m", "conformance.serving.results", "run", "--implementation",
                          implementation, "--server-url", server.url, "--out", str(out), "--", "-k", selection],
                         cwd=ROOT, env=PYTHON_ENV, capture_output=True, text=True, timeout=600)
    assert run.returncode in (0, 1), run.stdout[-3000:] + run.stderr[-3000:]
    doc = json.loads((out / f"{implementation}.json").read_text())
    assert doc["ran"] and doc["server_url"] == server.url
    judged = {c["check"].split("::")[1]: (c["outcome"], c["reason"]) for c in doc["checks"]}
    assert (run.returncode == 1) == any(o == "fail" for o, _ in judged.values()), run.stdout[-3000:]
    return judged


@pytest.mark.slow
@pytest.mark.engine
@pytest.mark.dummy_weights
@pytest.mark.skipif(has_cuda(), reason="judges the adapters through our CPU server (cpu_default): the CPU suite runs it; "
                    "on a CUDA machine test_serving.py's gpu_* variants judge the server")
def test_the_checks_judge_a_server_at_a_url_through_each_adapter(our_server, tmp_path):
    """Our server at its URL judged three ways: as ours (the full bad-input table, the named voice), as a
    generic OpenAI server (only OpenAI's cases; what needs repeatable answers or metrics not applicable), and
    through the vllm-omni adapter, whose metric names ours does not carry: a fail, recorded as one."""
    selection = ("test_models_list or (bad_input and (empty_input or missing_input)) or "
                 "(streamed_audio_equals and named_voice) or test_health_names or metrics_carry")
    ours = _judged(our_server, "reference", selection, tmp_path / "ours")
    for check in ("test_models_list_the_model_the_requests_name",
                  "test_bad_input_is_a_client_error_naming_the_field[empty_input]",
                  "test_streamed_audio_equals_the_whole_response[named_voice]",
                  "test_metrics_carry_the_names_the_implementation_claims"):
        assert ours[check] == ("pass", ""), f"{check}: {ours[check]}"  # the whole reason, not pytest's cut
    outcome, reason = ours["test_health_names_the_runner_and_models_the_served_name"]
    assert outcome == "not applicable" and reason.startswith("not applicable (reference only"), reason

    generic = _judged(our_server, "generic", selection, tmp_path / "generic")
    assert generic["test_bad_input_is_a_client_error_naming_the_field[missing_input]"] == ("pass", "")
    assert generic["test_bad_input_is_a_client_error_naming_the_field[empty_input]"][0] == "not applicable"
    assert generic["test_streamed_audio_equals_the_whole_response[named_voice]"] == (
        "not applicable", GENERIC.not_applicable("repeatable"))
    assert generic["test_metrics_carry_the_names_the_implementation_claims"] == (
        "not applicable", GENERIC.not_applicable("metrics"))

    upstream = _judged(our_server, "vllm-omni", "metrics_carry or test_models_list", tmp_path / "upstream")
    assert upstream["test_models_list_the_model_the_requests_name"] == ("pass", "")
    outcome, reason = upstream["test_metrics_carry_the_names_the_implementation_claims"]
    assert outcome == "fail" and "/metrics lacks vllm_omni:num_requests_running, " in reason, reason
    assert "vllm_omni:speech_stream_aborted_total" in reason and "vllm:num_requests_running" not in reason, reason
