"""The talker's vLLM worker (`worker_cls="reference.talker.worker.TalkerWorker"`).

It builds vLLM's own runner, checks that it is the runner the deployment asked for (a silent
fallback from V2 to V1, or back, is an error), and under V1 gives the runner the talker mixin
(reference/talker/runner_v1.py). Under V2 nothing is swapped: the model's own ModelState and sampler
plug in through `get_model_state_cls()`.
"""

from __future__ import annotations

import os

from reference import compat
from reference.talker import plugin
from reference.talker.engine import RUNNER_ENV
from reference.talker.options import options_from_hf_config
from reference.talker.runner_v1 import talker_runner_class

plugin.register()  # the worker process may start without the entry point (an uninstalled checkout)

_Base = compat.platform_worker_base()


class TalkerWorker(_Base):
    def init_device(self, *args, **kwargs):
        result = super().init_device(*args, **kwargs)
        built = compat.runner_kind(self.model_runner)
        options = options_from_hf_config(self.vllm_config.model_config.hf_config)
        problem = runner_mismatch(built, os.environ.get(RUNNER_ENV), options.runner if options else None)
        if problem:
            raise RuntimeError(problem)
        if built == "v1":
            self.model_runner.__class__ = talker_runner_class(type(self.model_runner))
            self.model_runner._talker_init()
        return result

    def talker_runner_kind(self) -> str:
        """Which runner this worker really runs ('v1' or 'v2'), for the engine-boot checks."""
        return compat.runner_kind(self.model_runner)

    def talker_full_cuda_graphs(self) -> list[int]:
        """Batch sizes (tokens) of the FULL CUDA graphs this worker captured, for the graph checks."""
        return compat.full_cuda_graph_sizes(self.model_runner)

    def talker_sampler_graphs(self) -> dict | None:
        """The sampling step's CUDA graphs under V2 (reference/talker/step_graphs.py): the batch
        buckets captured and the replays so far; None where the step runs eagerly (V1 too)."""
        graphs = compat.sampler_step_graphs(self.model_runner)
        return None if graphs is None else {"buckets": graphs.buckets, "replays": graphs.replays}

    def talker_built_settings(self) -> dict:
        """The settings that decide behaviour and speed, as this worker's vLLM built them (after
        vLLM's own resolution), for the read-back check of reference/deploy/readback.py."""
        return compat.built_settings(self.vllm_config, self.model_runner)

    def talker_open_requests(self) -> int:
        """Requests whose talker state this worker still holds (0 once all have ended)."""
        runner = self.model_runner
        if compat.runner_kind(runner) == "v1":
            return len(runner.talker_requests)
        return len(runner.model_state.slot_of)


def runner_mismatch(built: str, env_value: str | None, resolved: str | None) -> str | None:
    """Why the runner vLLM built ('v1'/'v2') is not the one asked for, or None when it is.
    Asked for: `VLLM_USE_V2_MODEL_RUNNER` ("1" V2, anything else V1; unset: no opinion) and the
    runner the deployment profile resolved (carried in the model config; None: no profile)."""
    if env_value is not None:
        wanted = "v2" if env_value == "1" else "v1"
        if built != wanted:
            return (
                f"vLLM built Model Runner {built.upper()} but {RUNNER_ENV}={env_value} asked for "
                f"{wanted.upper()}: refusing to run on a runner the deployment did not choose"
            )
    if resolved is not None and resolved != built:
        return f"the deployment resolved Model Runner {resolved.upper()} but vLLM built {built.upper()}"
    return None
