"""Writes the talker goldens (golden/talker/streams.json) from the independent oracle.

    python -m conformance.tools.regen_talker [OUT_PATH]

The only writer of golden/talker. The oracle (conformance/oracles/talker_torch.py: transformers' Qwen3, eager
float32, the contract read literally) shares no step code with the vLLM talker. Goldens are greedy;
each records its smallest top-1/top-2 logit margin, so a reader sees how decisive it is.
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import torch
import transformers

from conformance.talker import talker_cases
from higgs_dummy.cache import cached_checkpoint
from higgs_dummy.checkpoint import checkpoint_digest
from conformance.oracles.talker_torch import OracleTalker
from reference.speech import SpeechAPI


def oracle_streams(checkpoint: Path, prompts: list[dict], max_tokens: int) -> dict:
    """The oracle's greedy stream of every prompt on one checkpoint."""
    oracle = OracleTalker(checkpoint)
    prompter = SpeechAPI(engine=None, checkpoint=checkpoint, runner="v1")
    streams = {}
    for prompt in prompts:
        talker_prompt = prompter.prompt(talker_cases.speech_request(prompt, max_tokens))
        result = oracle.generate(talker_prompt, max_steps=max_tokens)
        streams[prompt["id"]] = {
            "prompt_len": len(talker_prompt.token_ids),
            "rows": result.rows,
            "lm_tokens": result.lm_tokens,
            "finished": result.finished,
            "min_margin": round(result.min_margin, 4),
        }
    return streams


def build_goldens() -> dict:
    doc = talker_cases.load_prompts()
    spec = doc["checkpoint"]
    checkpoint = cached_checkpoint(spec["size"], spec["seed"])
    by_id = {p["id"]: p for p in doc["prompts"]}
    flavours = {
        flavour: oracle_streams(cached_checkpoint(spec["size"], spec["seed"], flavour), [by_id[i] for i in ids],
                                doc["max_tokens"])
        for flavour, ids in talker_cases.flavoured_prompts().items()
    }
    return {
        "tolerance": "exact: every row of 8 codes and every LM token equal",
        "provenance": {
            "generator": "conformance.oracles.talker_torch.OracleTalker (transformers Qwen3Model, eager, float32, CPU)",
            "sampling": "greedy",
            "checkpoint": {**spec, "sha256": checkpoint_digest(checkpoint)},
            "versions": {"python": platform.python_version(), "torch": torch.__version__,
                         "transformers": transformers.__version__},
            "command": "tox -e regen",
        },
        "streams": oracle_streams(checkpoint, doc["prompts"], doc["max_tokens"]),
        "flavours": flavours,
    }


def main(out_path: str | Path = talker_cases.GOLDEN_PATH) -> None:
    goldens = build_goldens()
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(goldens, indent=1, sort_keys=True) + "\n")
    named = [("", goldens["streams"])] + [(f"{f}/", streams) for f, streams in goldens["flavours"].items()]
    for prefix, streams in named:
        for pid, s in streams.items():
            print(f"{prefix}{pid}: {len(s['rows'])} rows, finished={s['finished']}, min margin {s['min_margin']}")


if __name__ == "__main__":
    main(*sys.argv[1:])
