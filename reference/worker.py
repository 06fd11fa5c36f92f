"""The talker's vLLM worker (`worker_cls="reference.worker.TalkerWorker"`).

It builds vLLM's own runner, checks that it is the runner the deployment asked for (a silent
fallback from V2 to V1, or back, is an error), and under V1 gives the runner the talker mixin
(reference/runner_v1.py). Under V2 nothing is swapped: the model's own ModelState and sampler
plug in through `get_model_state_cls()`.
"""

from __future__ import annotations

import os

from reference import compat, plugin
from reference.engine import RUNNER_ENV
from reference.feature_switches import options_from_hf_config
from reference.runner_v1 import talker_runner_class

plugin.register()  # the worker process may start without the entry point (an uninstalled checkout)

_Base = compat.platform_worker_base()


class TalkerWorker(_Base):
    def init_device(self, *args, **kwargs):
        result = super().init_device(*args, **kwargs)
        built = compat.runner_kind(self.model_runner)
        wanted = os.environ.get(RUNNER_ENV)
        if wanted is not None and built != ("v2" if wanted == "1" else "v1"):
            raise RuntimeError(
                f"vLLM built Model Runner {built.upper()} but {RUNNER_ENV}={wanted} asked for "
                f"{'V2' if wanted == '1' else 'V1'}: refusing to run on a runner the deployment did not choose"
            )
        options = options_from_hf_config(self.vllm_config.model_config.hf_config)
        if options is not None and options.runner != built:
            raise RuntimeError(
                f"the deployment resolved Model Runner {options.runner.upper()} but vLLM built {built.upper()}"
            )
        if built == "v1":
            self.model_runner.__class__ = talker_runner_class(type(self.model_runner))
            self.model_runner._talker_init()
        return result

    def talker_runner_kind(self) -> str:
        """Which runner this worker really runs ('v1' or 'v2'), for the engine-boot checks."""
        return compat.runner_kind(self.model_runner)

    def talker_open_requests(self) -> int:
        """Requests whose talker state this worker still holds (0 once all have ended)."""
        runner = self.model_runner
        if compat.runner_kind(runner) == "v1":
            return len(runner.talker_requests)
        return len(runner.model_state.slot_of)
