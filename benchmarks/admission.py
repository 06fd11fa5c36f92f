"""When the engine core admitted each request and made its first token, from vLLM's own request stats.

`AdmissionTimes` stands in for an AsyncLLM in `SpeechAPI(engine, ...)`: its `generate` passes the
engine's outputs through and notes, from the first output of each request, `RequestOutput.metrics`
(vLLM's RequestStateStats):
- `.scheduled_ts`: the instant the engine core's scheduler first put the request into a batch,
  preemptions aside;
- `.first_token_ts`: the instant of the engine core's outputs that carried the request's first
  token (its prefill step done and sampled; vLLM fills it before it builds that RequestOutput).
Both are `time.monotonic()` in the engine core's process, CLOCK_MONOTONIC, one clock for every
process of the host, so they compare with the benchmark's own `time.monotonic()`. vLLM fills these
stats only while it logs stats (AsyncLLM's default, `disable_log_stats=False`); without them the
benchmark stops with a message instead of guessing.
"""

from __future__ import annotations


class AdmissionTimes:
    def __init__(self, engine):
        self.engine = engine
        self.scheduled: dict[str, float] = {}  # request id -> the core's first scheduling, monotonic s
        self.first_token: dict[str, float] = {}  # request id -> the core's outputs with its first token

    async def generate(self, prompt, params, request_id: str, **kwargs):
        outputs = self.engine.generate(prompt, params, request_id=request_id, **kwargs)
        try:
            async for output in outputs:
                if request_id not in self.scheduled:
                    self.scheduled[request_id] = _core_instant(output, "scheduled_ts")
                    self.first_token[request_id] = _core_instant(output, "first_token_ts")
                yield output
        finally:
            await outputs.aclose()  # aborts the request when the caller stopped early

    def __getattr__(self, name: str):
        return getattr(self.engine, name)


def _core_instant(output, name: str) -> float:
    instant = getattr(output.metrics, name, None) or None  # 0.0: not reached yet
    if instant is None:
        raise RuntimeError(f"vLLM's first output of request {output.request_id} carries no "
                           f"metrics.{name} (metrics: {output.metrics!r}): the TTFA split needs the "
                           "engine's request stats, which it keeps unless disable_log_stats is set")
    return instant
