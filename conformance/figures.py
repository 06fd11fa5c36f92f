"""The three kinds of pinned figure, and what each promises on any machine.

exact     Bit-equal on every platform the suite runs (token ids, codec rows, row counts). Only
          integers are pinned exactly, and only where the float error cannot reach the decision:
          the dummy talkers' greedy logits have top-1/top-2 margins of about 1 (higgs_dummy/
          checkpoint.py), float32 error on any vector width or thread count is about 1e-5.
bounded   One-sided: a figure that must reach a bound (an exactly stitching stream's SNR, a
          decode's distance to the float64 oracle, a quality floor). Its value on one machine is
          float rounding noise, which moves with the CPU's vector width, BLAS kernels and thread
          count: the noise is never a target, only the bound is.
measured  Two-sided: the figure of a lossy setting (a stream geometry short of the decoder's reach),
          pinned to what was measured, within a tolerance derived from how far legitimate float
          differences can move it (`snr_tolerance_db`).

A test gives the upgrade gate a figure as `record_property("figure:NAME", bounded(...))` or
`measured(...)`; conformance/gate/diff.py compares a bounded figure with its bound and a measured
one with the baseline's value.
"""

from __future__ import annotations

import math

# Every float path the suite accepts keeps a stream that stitches exactly at least this far above
# its rounding noise (conformance/cases/codec/streaming.yaml's bound): the float noise floor.
FLOAT_FLOOR_SNR_DB = 100.0
# Measured SNR figures are written with 4 decimals; a tolerance leaves room for that rounding.
SNR_DECIMALS = 4


def snr_tolerance_db(snr_db: float, floor_db: float = FLOAT_FLOOR_SNR_DB) -> float:
    """How far an SNR figure of a lossy setting may move between two legitimate float paths.

    The measured error e is the setting's own loss plus float noise n, and any accepted float path
    has ||n|| <= ||x|| 10^(-floor/20). With r = ||n|| / ||e|| = 10^((snr - floor) / 20) the error's
    norm lies in [||e|| (1 - r), ||e|| (1 + r)], so the SNR moves by at most -20 log10(1 - r) dB.
    A figure within 6 dB of the floor (r >= 1/2) is float noise itself: pin it as bounded.
    """
    r = 10.0 ** ((snr_db - floor_db) / 20.0)
    if r >= 0.5:
        raise ValueError(
            f"an SNR of {snr_db:.1f} dB is within 6 dB of the float floor ({floor_db} dB): it measures "
            "rounding noise, not the setting; pin it as a bound, not as a measured value"
        )
    return -20.0 * math.log10(1.0 - r)


def bounded(value: float, unit: str, *, at_least: float | None = None, at_most: float | None = None) -> dict:
    """A figure the gate checks against its bound only (one of at_least / at_most)."""
    if (at_least is None) == (at_most is None):
        raise ValueError("a bounded figure has exactly one of at_least, at_most")
    bound = {"at_least": at_least} if at_least is not None else {"at_most": at_most}
    return {"class": "bounded", "value": value, "unit": unit, **bound}


def measured(value: float, unit: str, tolerance: float) -> dict:
    """A figure the gate compares with the baseline's value, two-sided, within `tolerance`."""
    return {"class": "measured", "value": value, "unit": unit, "tolerance": tolerance}


def snr_figure(snr_db: float, *, bound_db: float | None) -> dict:
    """A stream's SNR against its offline decode as a gate figure: bounded by `bound_db` where the
    geometry stitches exactly (a bound is given), measured otherwise."""
    value = snr_db if math.isinf(snr_db) else round(snr_db, SNR_DECIMALS)
    if bound_db is not None:
        return bounded(value, "dB", at_least=bound_db)
    return measured(value, "dB", recorded_snr_tolerance_db(snr_db))


def recorded_snr_tolerance_db(snr_db: float) -> float:
    """`snr_tolerance_db` plus the rounding of a figure written with SNR_DECIMALS decimals, rounded up."""
    step = 10.0 ** -SNR_DECIMALS
    return round(math.ceil((snr_tolerance_db(snr_db) + step) / step) * step, SNR_DECIMALS)


def misses_bound(figure: dict) -> bool:
    """True when a bounded figure's value is on the wrong side of its bound."""
    if "at_least" in figure:
        return not figure["value"] >= figure["at_least"]
    return not figure["value"] <= figure["at_most"]
