"""What the talker reads from the deployment: the runner and the resolved V2 feature switches.

The deploy side (reference/deploy/switches.py) resolves the switches once, in the launching
process; the result travels to the workers inside the HF config (vLLM `hf_overrides`, key
`HF_OVERRIDES_KEY`) and is rebuilt there with `TalkerOptions.from_dict`, which never logs and
never re-resolves.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping

# The attribute of the HF config that carries TalkerOptions.to_dict() to the workers.
HF_OVERRIDES_KEY = "higgs_talker_options"


@dataclass(frozen=True)
class TalkerOptions:
    """What the talker model reads: the runner and the resolved switches. Built once, never re-resolved."""

    runner: str
    device_talker_state: bool
    model_sampler: bool
    full_decode_cudagraphs: bool
    sampler_cudagraphs: bool
    window_aligned_first_chunk: bool

    def __post_init__(self) -> None:
        if self.runner not in ("v1", "v2"):
            raise ValueError(f"TalkerOptions.runner must be 'v1' or 'v2', got {self.runner!r}")
        for name in (f.name for f in fields(self) if f.name != "runner"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"TalkerOptions.{name} must be a bool, got {getattr(self, name)!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "TalkerOptions":
        """Rebuild in a worker from the HF config; exact keys, no defaults, no logging."""
        names = {f.name for f in fields(cls)}
        unknown, missing = sorted(set(data) - names), sorted(names - set(data))
        if unknown or missing:
            raise ValueError(f"TalkerOptions.from_dict: unknown keys {unknown}, missing keys {missing}")
        return cls(**dict(data))


def options_from_hf_config(hf_config) -> TalkerOptions | None:
    """The resolved options a worker reads (None when the engine was not started from a profile)."""
    data = getattr(hf_config, HF_OVERRIDES_KEY, None)
    return TalkerOptions.from_dict(data) if data else None
