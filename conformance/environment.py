"""What the suite reads from the machine: the GPU, and the environment variables a user sets."""

from __future__ import annotations

REAL_CHECKPOINT_ENV = "HIGGS_V3_CHECKPOINT"
# pytest-xdist arguments of the CPU suite (tox -e cpu-dummy says the same): three workers on two
# cores, since many checks wait (on a server, a deadline, a phase limit, an engine's other process)
# and a third worker fills those waits; each check in its group (conftest.py), so that a group's
# engines and module fixtures are built once.
CPU_WORKERS = ("-n", "3", "--dist", "loadgroup")
# ... and of the GPU suite (tox -e gpu and gpu-real say the same): eight groups at a time on the GPU machine's 16
# cores, their engines sharing the card, each with a fixed 1 GiB KV cache (conformance/engines.py); the real-weight
# checks four, each of their engines holding the 4b checkpoint's weights.
GPU_WORKERS = ("-n", "8", "--dist", "loadgroup")
GPU_REAL_WORKERS = ("-n", "4", "--dist", "loadgroup")


def has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()
