"""On a real engine, the talker's draws follow temperature -> top-k -> top-p, per codebook.

One batch of seeded requests (conformance/cases/talker/sampling_distribution.yaml: four sampling
settings, each binding a different stage of the filter) runs on the "sampling" flavour of the tiny
checkpoint. The independent oracle then recomputes every step's logits along each request's
realised rows (teacher forcing: the stream is the oracle's input, not its output) and filters
them with its own numpy code (conformance/oracles/sampling_numpy.py, which shares nothing with
reference/talker/step.py). Two checks per setting:

1. Support (hard): every drawn code lies in the oracle's top-p support. The only exception is a
   near call at the edge: a code whose top-k rank or preceding top-p mass would put it inside
   under logits that differ from the oracle's by at most `logit_slack` each (float rounding of
   the engine's forward against the oracle's; the engines run float32 on both platforms).
   False alarms: none from chance (a correct sampler never draws outside its support); only
   float error beyond the slack, which on these logits is 20 times smaller.
2. Frequencies: the randomised probability-integral transform of every draw with two or more
   candidates, u = F(code-) + v * P(code) with v ~ U(0, 1) and codes ordered by the oracle's
   probability, is uniform on (0, 1) and independent across draws when the draws follow the
   oracle's distribution (each u is uniform given everything before it). A one-sample KS test
   against U(0, 1) per setting, at alpha / settings: with seeds drawn at random a correct sampler
   fails some setting with probability at most alpha = 1e-3. Float error of the engine's logits
   moves each probability by about 1e-4 relative, far below what the KS test sees at these sizes.

The seeds are fixed, so the verdict is reproducible. Runs under V1 on the CPU (tox -e cpu-dummy)
and under V1, V2 eager and V2 CUDA graphs on a GPU (tox -e gpu).
"""

import time

import numpy as np
import pytest

from conformance import case_files
from conformance.talker import talker_cases
from conformance.engines import runner_params
from conformance.oracles.talker_torch import OracleTalker
from conformance.talker.sampling_draws import DrawReport
from conformance.talker.sampling_stats import ks_uniform_p
from higgs_dummy.cache import cached_checkpoint

pytestmark = [pytest.mark.dummy_weights, pytest.mark.slow, pytest.mark.engine, pytest.mark.cpu]

CASE = case_files.load("talker/sampling_distribution")
PROMPTS = {p["id"]: p for p in talker_cases.load_prompts()["prompts"]}
SETTINGS = {s["id"]: s for s in CASE["settings"]}
GRAPHS = {"cudagraph_mode": "FULL_AND_PIECEWISE", "cudagraph_capture_sizes": [1, 2, 4, 8, 16, 32]}
VARIANTS = {
    "v1": {"enforce_eager": True},
    "v2-eager": {"enforce_eager": True},
    "v2-graphs": {"enforce_eager": False, "compilation_config": GRAPHS},
}


def requests():
    """(setting id, request) for the whole batch: each setting cycles through the prompts."""
    batch = []
    for s, setting in enumerate(CASE["settings"]):
        for i in range(CASE["requests_per_setting"]):
            prompt = PROMPTS[CASE["prompts"][i % len(CASE["prompts"])]]
            sampling = {**setting["sampling"], "seed": CASE["first_seed"] + 100 * s + i}
            batch.append((setting["id"], talker_cases.speech_request(prompt, CASE["max_tokens"], sampling)))
    return batch


@pytest.fixture(scope="module")
def oracle():
    return OracleTalker(cached_checkpoint(**CASE["checkpoint"]))


@pytest.mark.parametrize("variant", runner_params(VARIANTS))
def test_draws_follow_temperature_top_k_top_p(variant, pool, oracle, record_property):
    checkpoint = cached_checkpoint(**CASE["checkpoint"])
    api = pool.get(variant.split("-")[0], {**CASE["engine"], **VARIANTS[variant]}, checkpoint=checkpoint)
    batch = requests()
    started = time.monotonic()
    results = api.generate([request for _, request in batch])
    generated = time.monotonic() - started
    reports = {sid: DrawReport() for sid in SETTINGS}
    rng = np.random.default_rng(CASE["pit_seed"])
    for n, ((sid, request), result) in enumerate(zip(batch, results)):
        logits = oracle.teacher_forced_logits(api.prompt(request), result.rows).double().numpy()
        reports[sid].add_stream(logits, result.rows, request.sampling, CASE["logit_slack"], rng,
                                f"request {n} ({sid}, seed {request.sampling['seed']})")
    limit = CASE["alpha"] / len(SETTINGS)
    verdicts = {}
    for sid, report in reports.items():
        d, p = ks_uniform_p(report.pit) if report.pit else (float("nan"), 0.0)
        verdicts[sid] = (d, p)
        line = (f"{variant} {sid}: {report.draws} draws, {len(report.pit)} with >= 2 candidates, "
                f"KS D = {d:.4f}, p = {p:.3g}; {report.edge} near calls at the edge, "
                f"{len(report.outside)} outside the support")
        print(line)
        record_property("report", line)
    print(f"{variant}: {len(batch)} requests generated in {generated:.1f} s, checked in "
          f"{time.monotonic() - started - generated:.1f} s")
    for sid, report in reports.items():
        assert not report.outside, f"{sid}: {len(report.outside)} draws outside the top-p support, e.g. " + \
            "; ".join(report.outside[:3])
    for sid, report in reports.items():
        assert len(report.pit) >= CASE["min_random_draws"], (
            f"{sid}: only {len(report.pit)} draws had two or more candidates: the check could not fail")
        d, p = verdicts[sid]
        assert p >= limit, (f"{sid}: the draws do not follow the oracle's distribution: KS D = {d:.4f} over "
                            f"{len(report.pit)} PIT values, p = {p:.2e} < {limit:.1e}")
