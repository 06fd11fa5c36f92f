"""Talker checks on real vLLM engines: greedy streams, the stream's tail, seeded and sampled draws, tensor and data parallel, the real checkpoint."""
