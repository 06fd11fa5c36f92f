"""The seeded-answer finding on a fresh server (docs/implementations.md, "what failed and why", item 2): the same
seeded body answered three times, whole WAV first (its prompt prefilled cold), then PCM twice (its prompt's cached
blocks reused), with stage 0's prefix-cache counters after each. wav == pcm == pcm2: repeatable here; pcm == pcm2
but not wav: a cold and a cached prefill draw different codes; pcm != pcm2: not even two cached prefills agree.

    python seeded_probe.py http://127.0.0.1:8091
"""

import sys

import httpx

URL = sys.argv[1]
MODEL = httpx.get(f"{URL}/v1/models", timeout=30).json()["data"][0]["id"]
BODY = {"model": MODEL, "input": "The quick brown fox jumps over the lazy dog.", "voice": "default", "seed": 7,
        "max_new_tokens": 160}


def prefix_cache() -> list[str]:
    text = httpx.get(f"{URL}/metrics", timeout=30).text
    return [line for line in text.splitlines() if line.startswith(("vllm:prefix_cache_queries", "vllm:prefix_cache_hits"))]


def answer(fmt: str) -> bytes:
    response = httpx.post(f"{URL}/v1/audio/speech", json={**BODY, "response_format": fmt}, timeout=600)
    response.raise_for_status()
    return response.content


def first_difference(a: bytes, b: bytes) -> str:
    if a == b:
        return "equal"
    at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"differ from byte {at} (sample {at // 2}, {at // 1920 + 1}th 40 ms row), lengths {len(a)} and {len(b)}"


answers = {}
for name, fmt in (("wav", "wav"), ("pcm", "pcm"), ("pcm2", "pcm")):
    answers[name] = answer(fmt)
    print(name, len(answers[name]), "bytes;", "; ".join(prefix_cache()))
print("wav data vs pcm:", first_difference(answers["wav"][44:], answers["pcm"]))
print("pcm vs pcm2:", first_difference(answers["pcm"], answers["pcm2"]))
