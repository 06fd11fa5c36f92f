"""tox plugin (tox loads a project's toxfile.py by itself): one virtualenv for several tox
environments, and no real-weights run without its weights.

`cpu-dummy` (the tests), `conformance` (the main job), `regen`, `sanity`, `cpu-real`, `robust`, `mutations`
and `dev` (the environment by hand: README.md's quickstart) install the same packages, so they share one folder (`env_dir` in tox.ini). tox 4 records which
environment built a folder and rebuilds it when another one uses it ("env type changed", about
90 s for vLLM and torch). Environments with `runner = shared-virtualenv` hand the folder over
instead; everything else tox records (Python, deps, package) is still compared, so a real change
still rebuilds.

An environment that sets HIGGS_WEIGHTS=real (`cpu-real`, `gpu-real`) runs
`python -m conformance.weights real` with tox's own interpreter before tox installs anything into
it, and stops with its exit status 2 and its message when HIGGS_V3_CHECKPOINT does not name a
checkpoint folder. (Its commands_pre run the same check in the environment: tox skips installs
with --skip-env-install.)
"""

from __future__ import annotations

import subprocess
import sys

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


@impl
def tox_on_install(tox_env: ToxEnv, arguments, section: str, of_type: str) -> None:  # noqa: ARG001
    environment = tox_env.environment_variables
    if environment.get("HIGGS_WEIGHTS") != "real" or getattr(tox_env, "_higgs_weights_checked", False):
        return
    check = subprocess.run([sys.executable, "-m", "conformance.weights", "real"], env=environment,
                           cwd=tox_env.core["tox_root"], stdout=subprocess.DEVNULL, check=False)  # the refusal: stderr
    if check.returncode:
        raise SystemExit(check.returncode)  # tox ends the environment with this status
    tox_env._higgs_weights_checked = True  # once per environment: tox installs deps, then the package
