"""What the suite reads from the machine: the GPU, and the environment variables a user sets."""

from __future__ import annotations

REAL_CHECKPOINT_ENV = "HIGGS_V3_CHECKPOINT"


def has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()
