"""The talker's generation contract for one greedy step, read literally (the oracle's state machine).

Torch only (no transformers, nothing from `reference`), so that the differential checks can run it
beside a foreign implementation's own pins (conformance/differential/). `OracleTalker`
(talker_torch.py) drives it with a Qwen3 body; the differential checks drive it with seeded logits.
"""

from __future__ import annotations

import torch

# Own copies of the format's constants, on purpose: an independent oracle shares no code with reference/.
N = 8
CODES = 1024
BOC, EOC = 1024, 1025


def pick(logits: torch.Tensor, allowed: list[int], margins: list[float] | None = None) -> int:
    """Greedy choice among the allowed ids; all masked would fall back to argmax."""
    if not allowed:
        return int(torch.argmax(logits))
    values = logits[allowed]
    order = torch.argsort(values, descending=True)
    if margins is not None and len(allowed) > 1:
        margins.append(float(values[order[0]] - values[order[1]]))
    return allowed[int(order[0])]


# Ramp-down variants: row j after the EOC row has j + 1 leading EOCs in the training layout (the
# delay pattern applied to real frames), max(1, j) in upstream's talker (vllm-omni 0.30.0).
RAMP_DOWNS = ("training", "upstream")


def contract_row(logits: torch.Tensor, step: int, remaining: int | None, margins: list[float] | None = None,
                 ramp_down: str = "training"):
    """One greedy step of the generation contract, read literally.

    `remaining` is the ramp-down counter (None before EOC). Returns (row, remaining), or
    (None, 0) when the request is already done (its LM token is EOS). logits: [8, 1026]
    """
    if remaining == 0:
        return None, 0
    locked = None
    if remaining is not None:
        locked = N - remaining + (1 if ramp_down == "training" else 0)  # leading codebooks held at EOC
        remaining -= 1
    every_code = list(range(CODES))
    row = []
    for q in range(N):
        if remaining is not None:
            row.append(EOC if q < locked else pick(logits[q], every_code, margins))
        elif q > step:
            row.append(BOC)  # lead-in
        else:
            allowed = every_code + [EOC] if q == 0 else every_code
            row.append(pick(logits[q], allowed, margins))
    if remaining is None and EOC in row:
        k = max(q for q in range(N) if row[q] == EOC)
        row[: k + 1] = [EOC] * (k + 1)
        remaining = N - k - 1
    return row, remaining
