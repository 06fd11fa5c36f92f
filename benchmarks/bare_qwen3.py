"""The bare backbone: a stock Qwen3ForCausalLM of the talker's shape, which the talker's decode step
is compared with (engine_steps.py).

No weights file: a folder holding only config.json (the talker checkpoint's text_config, i.e. the
same hidden size, layers, heads, head dim, vocabulary and dtype) booted with load_format="dummy"
and skip_tokenizer_init, fed token ids. Its engine arguments are the talker's, from the same
resolved profile, minus what only the talker reads (hf_overrides with its options; the talker's
worker class is added by reference/talker/engine.py, never here); the runner is made explicit in
the environment the same way (deployment.env).
"""

from __future__ import annotations

import json
from pathlib import Path

from vllm import SamplingParams
from vllm.inputs import TokensPrompt
from vllm.sampling_params import RequestOutputKind

from reference.talker import code_channel
from reference.talker.engine import deployment_engine_kwargs

TALKER_ONLY_ENGINE_ARGS = ("hf_overrides",)


def write_config(checkpoint: str | Path, folder: str | Path) -> dict:
    """Writes folder/config.json for the bare backbone of `checkpoint`; returns it."""
    text = json.loads((Path(checkpoint) / "config.json").read_text())["text_config"]
    # Without `architectures` vLLM takes the folder for a pooling model (../shared/device/README.md).
    config = {**text, "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"}
    (Path(folder) / "config.json").write_text(json.dumps(config, indent=1))
    return config


def bare_engine_kwargs(deployment) -> dict:
    """The deployment's engine arguments without the talker's own; sets the runner's environment."""
    kwargs = deployment_engine_kwargs(deployment)
    for key in TALKER_ONLY_ENGINE_ARGS:
        kwargs.pop(key, None)
    return kwargs


def start_bare_async_llm(checkpoint: str | Path, folder: str | Path, **engine_kwargs):
    """An AsyncLLM of the bare backbone, its config.json written into `folder` (keep it for the
    engine's life); returns (engine, config)."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    config = write_config(checkpoint, folder)
    args = AsyncEngineArgs(model=str(folder), load_format="dummy", skip_tokenizer_init=True, seed=0, **engine_kwargs)
    return AsyncLLM.from_engine_args(args), config


def bare_requests(prompt_token_ids: list[int]):
    """engine_steps.RequestMaker of the bare backbone: the talker's prompt ids, plain sampling
    (no seed: see engine_steps.py), exact lengths by ignore_eos."""

    def make(index: int, steps: int, sampling: dict):
        params = SamplingParams(**sampling, max_tokens=steps, ignore_eos=True, detokenize=False,
                                output_kind=RequestOutputKind.FINAL_ONLY)
        return TokensPrompt(prompt_token_ids=list(prompt_token_ids), cache_salt=code_channel.unique_cache_salt()), params

    return make
