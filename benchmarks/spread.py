"""A level's figures from its rounds: the median of the rounds and their spread, and TTFA's split.

Every figure is measured once per round (end to end: a batch of c streams; engine only: one timed
SHORT/LONG pair) and reported as the median of its rounds with their spread, the min-max range:
with 3 to 5 rounds an interquartile range says no more than the range does, and the range shows
the worst round.

TTFA's split: five consecutive parts of one stream's TTFA, each named by the event that ends it
(SPLIT); they add up to the stream's TTFA. A median's split is the split of the stream (or round)
at that median: the middle one, or the mean of the two middle ones for an even count, as
`statistics.median` takes the totals; so the parts add up to the median TTFA exactly, which
medians of the parts taken one by one would not. Each part's spread is its range over the rounds.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

# request submitted -> the engine core first schedules it -> the core's outputs carry its first
# token (prefill) -> that output's rows reach the speech API (the way out of the core) -> the first
# codec window's frames (after the delay pattern's lead-in, with their holdback) are all in -> the
# first PCM chunk out
SPLIT = ("admission", "prefill", "first_rows", "first_window", "first_pcm")


def split_of(start: float, admitted: float, first_token: float, first_rows: float, window_in: float,
             first_pcm: float) -> dict:
    """The five parts (seconds) between six instants of one stream, on one clock."""
    instants = (start, admitted, first_token, first_rows, window_in, first_pcm)
    return {part: later - earlier for part, earlier, later in zip(SPLIT, instants, instants[1:])}


def spread(values: Sequence[float]) -> list[float]:
    return [min(values), max(values)]


def split_of_median(items: Sequence[dict], total: str, split: str) -> dict:
    """The split of the median of `item[total]` over `items`, from each item's `item[split]`."""
    ordered = sorted(items, key=lambda item: item[total])
    middle = ordered[(len(ordered) - 1) // 2 : len(ordered) // 2 + 1]
    return {part: statistics.fmean(item[split][part] for item in middle) for part in SPLIT}


def round_figures(streams: Sequence[dict], wall_s: float) -> dict:
    """One round of c streams (each: ttfa_s, split_s, rtf, audio_s), run together in `wall_s`."""
    return {
        "ttfa_ms_median": 1000 * statistics.median(s["ttfa_s"] for s in streams),
        "split_ms": {part: 1000 * s for part, s in split_of_median(streams, "ttfa_s", "split_s").items()},
        "rtf_median": statistics.median(s["rtf"] for s in streams),
        "audio_s_per_s": sum(s["audio_s"] for s in streams) / wall_s,
    }


def level_figures(rounds: Sequence[dict]) -> dict:
    """The median over `rounds` (round_figures) of each figure, and the spread of each under "spread"."""
    return {
        **{key: statistics.median(r[key] for r in rounds) for key in ("ttfa_ms_median", "rtf_median", "audio_s_per_s")},
        "split_ms": split_of_median(rounds, "ttfa_ms_median", "split_ms"),
        "spread": {
            "ttfa_ms": spread([r["ttfa_ms_median"] for r in rounds]),
            "split_ms": {part: spread([r["split_ms"][part] for r in rounds]) for part in SPLIT},
            "rtf": spread([r["rtf_median"] for r in rounds]),
            "audio_s_per_s": spread([r["audio_s_per_s"] for r in rounds]),
        },
    }
