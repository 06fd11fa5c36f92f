"""Speed of the talker under Model Runner V1 and V2: a benchmark, not a test (nothing here asserts
anything about time).

    python -m benchmarks [--preset gpu | --cpu-smoke] [--out-dir DIR] [...]   (benchmarks/__main__.py)

Two modes, one engine per phase:
- end to end (streams.py): TTFA, RTF and audio seconds per second of streams through
  `SpeechAPI.stream_audio`, per concurrency, for every deploy profile named;
- engine only (engine_steps.py): the talker's decode step in ms against a bare Qwen3 of the same
  shape (bare_qwen3.py) under the same profile's engine settings; the ratio is the headline.

Every phase (one engine: boot and measurements, phases.py) runs in a spawned child with its own
time limit (isolation.py), so a phase that hangs or crashes is recorded as failed and the run
goes on. The plan of phases: plan.py; each figure's median and spread over the rounds, and TTFA's
split in five: spread.py (the engine core's admission and first-token instants: admission.py); derived figures and the
terminal table: summary.py; the PNG: plot.py. Results of GPU runs live in benchmarks/results/.
"""

# The text every benchmark speaks (in process and through HTTP), here so that served.py can read it
# without importing vLLM.
TEXT = "Model Runner V2 keeps the talker state on the device and streams audio in codec windows."
