"""The figure classes (conformance/figures.py): the measured class's tolerance is what float noise
at the floor can do to a lossy figure, no more and no less."""

import math

import numpy as np
import pytest

from conformance import figures

pytestmark = pytest.mark.cpu


def snr_db(signal: np.ndarray, error: np.ndarray) -> float:
    return 10.0 * math.log10(float(signal @ signal) / float(error @ error))


def lossy_error(signal: np.ndarray, snr: float, rng: np.random.Generator) -> np.ndarray:
    e = rng.standard_normal(signal.shape)
    return e * (np.linalg.norm(signal) * 10.0 ** (-snr / 20.0) / np.linalg.norm(e))


@pytest.mark.parametrize("snr", [11.6, 23.5, 60.0, 87.2, 93.0])
def test_noise_at_the_floor_moves_a_lossy_snr_by_at_most_the_tolerance_and_can_reach_it(snr):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(4096)
    e = lossy_error(x, snr, rng)
    floor_norm = np.linalg.norm(x) * 10.0 ** (-figures.FLOAT_FLOOR_SNR_DB / 20.0)
    tolerance = figures.snr_tolerance_db(snr)
    for _ in range(50):  # noise in random directions stays inside
        n = rng.standard_normal(x.shape)
        assert abs(snr_db(x, e + n * (floor_norm / np.linalg.norm(n))) - snr) <= tolerance
    # noise against the loss's own direction is the worst case, and it reaches the tolerance
    worst = snr_db(x, e - e * (floor_norm / np.linalg.norm(e)))
    assert worst - snr == pytest.approx(tolerance, rel=1e-6)


@pytest.mark.parametrize("snr", [94.3, 100.0, 113.5])
def test_a_figure_near_the_floor_cannot_be_pinned_as_measured(snr):
    with pytest.raises(ValueError, match="within 6 dB of the float floor"):
        figures.snr_tolerance_db(snr)


def test_a_recorded_tolerance_covers_the_derived_one_and_the_recording_rounding():
    for snr in (11.6275, 23.5373, 87.1891):
        tol = figures.recorded_snr_tolerance_db(snr)
        assert figures.snr_tolerance_db(snr) + 10.0 ** -figures.SNR_DECIMALS <= tol + 1e-12
        assert tol < figures.snr_tolerance_db(snr) + 2 * 10.0 ** -figures.SNR_DECIMALS


def test_snr_figures_are_bounded_where_the_geometry_stitches_exactly_and_measured_elsewhere():
    assert figures.snr_figure(113.55271, bound_db=100.0) == {"class": "bounded", "value": 113.5527, "unit": "dB", "at_least": 100.0}
    lossy = figures.snr_figure(23.53731, bound_db=None)
    assert lossy["class"] == "measured" and lossy["value"] == 23.5373
    assert lossy["tolerance"] == figures.recorded_snr_tolerance_db(23.53731)
    assert figures.snr_figure(math.inf, bound_db=100.0)["value"] == math.inf


@pytest.mark.parametrize("figure, misses", [
    (figures.bounded(101.0, "dB", at_least=100.0), False),
    (figures.bounded(99.0, "dB", at_least=100.0), True),
    (figures.bounded(0.2, "", at_most=0.25), False),
    (figures.bounded(0.3, "", at_most=0.25), True),
    (figures.bounded(math.nan, "dB", at_least=100.0), True),
])
def test_a_bounded_figure_misses_only_on_the_wrong_side_of_its_bound(figure, misses):
    assert figures.misses_bound(figure) is misses


def test_a_bounded_figure_has_exactly_one_bound():
    with pytest.raises(ValueError):
        figures.bounded(1.0, "dB")
    with pytest.raises(ValueError):
        figures.bounded(1.0, "dB", at_least=0.0, at_most=2.0)
