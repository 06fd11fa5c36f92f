"""tox plugin (tox loads a project's toxfile.py by itself): one virtualenv for several tox environments.

`cpu-dummy` (the tests), `conformance` (the main job), `regen` and `sanity` install the same
packages, so they share one folder (`env_dir` in tox.ini). tox 4 records which environment built
a folder and rebuilds it when another one uses it ("env type changed", about 90 s for vLLM and
torch). Environments with `runner = shared-virtualenv` hand the folder over instead; everything
else tox records (Python, deps, package) is still compared, so a real change still rebuilds.
"""

from __future__ import annotations

from tox.plugin import impl
from tox.tox_env.api import ToxEnv
from tox.tox_env.python.virtual_env.runner import VirtualEnvRunner
from tox.tox_env.register import ToxEnvRegister


class SharedVirtualEnvRunner(VirtualEnvRunner):
    @staticmethod
    def id() -> str:
        return "shared-virtualenv"

    def _setup_env(self) -> None:
        # Record this environment as the folder's owner before tox compares the owner.
        with self.cache.compare({"name": self.conf.name, "type": type(self).__name__}, ToxEnv.__name__):
            pass
        super()._setup_env()


@impl
def tox_register_tox_env(register: ToxEnvRegister) -> None:
    register.add_run_env(SharedVirtualEnvRunner)
