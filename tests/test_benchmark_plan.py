"""The benchmark's plan fits each phase's batch to its largest concurrency (benchmarks/plan.py):
more sequences where the profile allows fewer, and decode capture sizes up to it, while the
profile's larger sizes for prompts stay. Resolution only: no engine."""

import pytest

from benchmarks.plan import Settings, plan_phases

pytestmark = pytest.mark.cpu
SIZES = "stages.0.compilation_config.cudagraph_capture_sizes"


def talker_overrides(profile: str, concurrency: int) -> dict:
    settings = Settings(platform="cuda", profiles=[profile], modes=["e2e"], bare=False, e2e_levels=[1, concurrency])
    (phase,) = plan_phases(settings)
    assert phase.error is None, phase.error
    return phase.overrides


def test_64_streams_get_64_sequences_and_decode_graphs_every_8_beside_the_prompt_sizes():
    overrides = talker_overrides("default", 64)  # default.yaml: 16 sequences, graphs 1..16 and 32..512
    assert overrides["stages.0.max_num_seqs"] == 64
    assert overrides[SIZES] == [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 128, 256, 512]
    assert overrides["stages.1.max_num_seqs"] == 64  # the codec batch follows the talker's


def test_a_codec_batch_is_raised_only_with_the_talkers():
    custom = {"stages.0.max_num_seqs": 64, "stages.1.max_num_seqs": 8}  # a batch pair chosen by hand
    settings = Settings(platform="cuda", profiles=["default"], modes=["e2e"], bare=False, e2e_levels=[64],
                        overrides=custom)
    (phase,) = plan_phases(settings)
    assert phase.overrides == custom  # 64 sequences already: nothing raised, the codec batch stays 8


def test_a_profile_whose_batch_already_fits_is_left_as_it_is():
    assert talker_overrides("default", 16) == {}
    assert talker_overrides("high_throughput_v2", 64) == {}
    assert talker_overrides("many_streams_v2", 256) == {}


def test_eager_profiles_get_no_capture_sizes():
    overrides = talker_overrides("high_throughput", 64)  # V1, eager on CUDA
    assert SIZES not in overrides


def test_batch_fit_is_what_a_phase_gets_and_what_the_step_breakdown_uses():
    from benchmarks.plan import batch_fit
    from reference.deploy.resolve import resolve_deployment

    kwargs = resolve_deployment("default", "cuda").engine_kwargs
    assert batch_fit(kwargs, 64) | {"stages.1.max_num_seqs": 64} == talker_overrides("default", 64)
    assert batch_fit(kwargs, 8) == {}
