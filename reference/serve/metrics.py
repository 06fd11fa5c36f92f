"""Prometheus metrics of the speech server, in a registry of their own, served by `/metrics` after
vLLM's (process-wide registry: `vllm:num_requests_running`, `vllm:num_requests_waiting`,
`vllm:kv_cache_usage_perc`, `vllm:generation_tokens_total`, ...).

- higgs_serve_requests_running        speech requests producing audio (their first rows arrived)
- higgs_serve_requests_waiting        speech requests accepted, no audio rows yet
- higgs_serve_requests_aborted_total  requests aborted in the engine because their client left
- higgs_serve_requests_total{status}  responses by HTTP status
- higgs_serve_talker_slots_in_use     requests whose talker state the workers hold (asked at scrape
                                      time: the workers' `talker_open_requests`)
- higgs_serve_ttfa_seconds            request received -> first PCM chunk ready (streamed requests)
- higgs_serve_first_decode_seconds    the code2wav stage's share of it: the first window cut (the
                                      talker made its frames) -> its PCM chunk ready
- higgs_serve_queue_depth             requests waiting for a talker slot (reference/serve/admission.py)
- higgs_serve_rejected_total{limit}   requests turned away with 503 by the serving limit they met
                                      (max_waiting_requests, max_queue_wait_s, min_realtime_factor)
- higgs_serve_talker_steps_per_second the talker's pace, read from the rows of running requests
                                      (reference/serve/pace.py; NaN while none is measured): 25 is
                                      a stream in real time
- higgs_serve_sends_waiting           streamed responses whose send waits for the client to take bytes
                                      (a slow or stalled reader: its socket and the transport's buffer
                                      are full; the stream's producer waits behind it)
"""

from __future__ import annotations

import math

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

TTFA_BUCKETS = (0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0)


class ServeMetrics:
    def __init__(self):
        self.registry = CollectorRegistry()
        r = self.registry
        self.running = Gauge("higgs_serve_requests_running", "speech requests producing audio", registry=r)
        self.waiting = Gauge("higgs_serve_requests_waiting", "speech requests without audio rows yet", registry=r)
        self.aborted = Counter("higgs_serve_requests_aborted", "requests aborted in the engine on disconnect",
                               registry=r)
        self.responses = Counter("higgs_serve_requests", "responses by HTTP status", ["status"], registry=r)
        self.slots = Gauge("higgs_serve_talker_slots_in_use", "requests whose talker state the workers hold",
                           registry=r)
        self.ttfa = Histogram("higgs_serve_ttfa_seconds", "request received -> first PCM chunk ready",
                              buckets=TTFA_BUCKETS, registry=r)
        self.first_decode = Histogram("higgs_serve_first_decode_seconds", "first window cut -> its PCM chunk ready",
                                      buckets=TTFA_BUCKETS, registry=r)
        self.queue_depth = Gauge("higgs_serve_queue_depth", "requests waiting for a talker slot", registry=r)
        self.rejected = Counter("higgs_serve_rejected", "requests turned away (503) by a serving limit", ["limit"],
                                registry=r)
        self.talker_pace = Gauge("higgs_serve_talker_steps_per_second",
                                 "the talker's steps a second, from the rows of running requests", registry=r)
        self.sends_waiting = Gauge("higgs_serve_sends_waiting", "streamed responses whose send waits for the client",
                                   registry=r)

    def show_pace(self, pace) -> None:
        """The pace gauge reads `pace` (reference/serve/pace.py) at scrape time; NaN while unmeasured."""
        self.talker_pace.set_function(lambda: math.nan if (value := pace.steps_per_second()) is None else value)

    def render(self) -> bytes:
        return generate_latest(REGISTRY) + generate_latest(self.registry)


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> {'name{labels}': value} (for the checks; labels kept verbatim)."""
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            try:
                values[name] = float(value)
            except ValueError:
                continue
    return values


def metric(values: dict[str, float], name: str) -> float:
    """The sum of every series of `name` (all label sets); 0.0 when absent."""
    return sum(v for k, v in values.items() if k == name or k.startswith(name + "{"))
