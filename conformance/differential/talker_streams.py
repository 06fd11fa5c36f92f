"""The talker streams check: a foreign talker's greedy streams against the talker goldens.

The goldens (golden/talker/streams.json: 10 prompts on the greedy tiny checkpoint and 4 on two other
flavours) are our oracle's greedy streams with the training-layout ramp-down. A foreign stream is
    equal           every row of 8 codes and every LM token equal;
    ramp_down_max1  equal instead to our oracle's stream with upstream's ramp-down (row j after the
                    EOC row holds max(1, j) leading EOCs: conformance/cases/talker/tail.yaml), which
                    feeds different rows back after the EOC row; the rows before it are the golden's;
    unexplained     neither.
Upstream's variant is asked for (a callable) only when a stream differs. A foreign stream id is a
golden's, or "batched/<golden id>" for the same prompt run among others. Numpy and the standard
library only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from conformance.differential.inputs import EOC, NUM_CODEBOOKS
from conformance.differential.verdicts import Check

CHECK = "talker_streams"
BATCHED = "batched/"
TOLERANCE = "exact: every row of 8 codes and every LM token (greedy, float32)"
Stream = dict[str, Any]  # {"rows": [[8 codes], ...], "lm_tokens": [...]} (a golden also has "finished")


def golden_streams(doc: dict[str, Any]) -> dict[str, tuple[str, str, Stream]]:
    """stream id -> (checkpoint flavour, prompt id, golden stream); ids as in talker2code2wav."""
    streams = {pid: ("greedy", pid, s) for pid, s in doc["streams"].items()}
    for flavour, group in doc["flavours"].items():
        streams.update({f"{flavour}/{pid}": (flavour, pid, s) for pid, s in group.items()})
    return streams


def _rows(stream: Stream) -> np.ndarray:
    return np.asarray(stream["rows"], dtype=np.int64).reshape(-1, NUM_CODEBOOKS)


def eoc_row(rows: np.ndarray) -> int | None:
    """The first row whose codebook 0 is EOC (the audio's end), None when the stream has none."""
    hits = np.flatnonzero(rows[:, 0] == EOC)
    return int(hits[0]) if len(hits) else None


def differing_rows(ours: np.ndarray, theirs: np.ndarray) -> list[int]:
    n = min(len(ours), len(theirs))
    rows = [int(r) for r in np.flatnonzero((ours[:n] != theirs[:n]).any(axis=1))]
    return rows + list(range(n, max(len(ours), len(theirs))))


def _same(a: Stream, b: Stream) -> bool:
    return _rows(a).tolist() == _rows(b).tolist() and list(a["lm_tokens"]) == list(b["lm_tokens"])


def classify(golden: Stream, theirs: Stream, upstream_variant: Callable[[], Stream]) -> tuple[str | None, str]:
    """(difference id or None, detail) of one foreign stream against its golden."""
    ours, other = _rows(golden), _rows(theirs)
    ending = "finished" if golden["finished"] else "cut by max_tokens"
    counts = f"{len(ours)} rows, {len(golden['lm_tokens'])} LM tokens"
    if _same(golden, theirs):
        return None, f"{ending}: {counts} equal"
    differ = differing_rows(ours, other)
    where = f"eoc at row {eoc_row(ours)}" if eoc_row(ours) is not None else "no eoc"
    against = (f"ours {counts}, theirs {len(other)} rows, {len(theirs['lm_tokens'])} LM tokens; "
               f"{len(differ)} rows differ from row {differ[0] if differ else '-'} ({where})")
    if _same(upstream_variant(), theirs):
        return "ramp_down_max1", f"{ending}: equal to our oracle with upstream's ramp-down; {against}"
    if list(golden["lm_tokens"]) != list(theirs["lm_tokens"]):
        against += "; the LM tokens differ"
    return "unexplained", f"{ending}: {against}"


def run(doc: dict[str, Any], theirs: dict[str, Stream],
        upstream_variant: Callable[[str, str], Stream]) -> Check:
    """Every golden stream against `theirs[stream id]`, then every "batched/" stream against its
    golden; `upstream_variant(flavour, prompt id)` gives our oracle's stream with upstream's
    ramp-down. A golden missing from `theirs` is `not_run`; a foreign stream with no golden, `no_golden`."""
    check = Check(CHECK, TOLERANCE)
    goldens = golden_streams(doc)
    ids = list(goldens) + [i for i in theirs if i.startswith(BATCHED)]
    ids += [i for i in theirs if i not in ids]
    for stream_id in ids:
        key = stream_id.removeprefix(BATCHED)
        if key not in goldens:
            check.add(stream_id, "no_golden", "a foreign stream no golden names")
        elif stream_id not in theirs:
            check.add(stream_id, "not_run", "no foreign stream for this golden")
        else:
            flavour, prompt_id, golden = goldens[key]
            difference, detail = classify(golden, theirs[stream_id], lambda: upstream_variant(flavour, prompt_id))
            check.add(stream_id, difference, detail)
    return check
