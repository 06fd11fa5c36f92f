"""Helpers shared by the deploy case tests (the cases themselves load through conformance/case_files.py).

- `fill(node, directory)`: in case text, {dir} becomes the case's temporary directory, REPO the
  repository root and UPSTREAM the deploy/ folder of the pinned vllm-omni wheel.
- The wheel is data: `python -m conformance.deploy.deploy_cases --install-upstream` (tox [cpu]
  commands_pre) unpacks it with pip into UPSTREAM_ROOT, `<sys.prefix>/upstream`, which is not on
  sys.path. Installed into site-packages it would register a `vllm.general_plugins` entry point,
  and vLLM would import vllm_omni (which patches vLLM) in every engine the tests start.
- `upstream_deploy_dir()`: that deploy/ folder, or None; `needs_upstream`: the skip mark of the
  tests that read upstream's files, naming the command.
"""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import distributions
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
UPSTREAM_VERSION = "0.30.0"
UPSTREAM_ROOT = Path(sys.prefix) / "upstream"
UPSTREAM_PIP = "python -m conformance.deploy.deploy_cases --install-upstream"


def upstream_deploy_dir() -> Path | None:
    folder = UPSTREAM_ROOT / "vllm_omni" / "deploy"
    return folder if folder.is_dir() else None


def upstream_version() -> str | None:
    found = [d.version for d in distributions(path=[str(UPSTREAM_ROOT)]) if d.metadata["Name"] == "vllm-omni"]
    return found[0] if found else None


def install_upstream() -> int:
    """Unpack the pinned wheel into UPSTREAM_ROOT (no dependencies, nothing on sys.path); a no-op when there."""
    if upstream_version() == UPSTREAM_VERSION:
        return 0
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--upgrade",
               "--target", str(UPSTREAM_ROOT), f"vllm-omni=={UPSTREAM_VERSION}"]
    return subprocess.run(command, check=False).returncode


needs_upstream = pytest.mark.skipif(
    upstream_deploy_dir() is None,
    reason=f"vllm-omni {UPSTREAM_VERSION}'s deploy files are not unpacked: run `{UPSTREAM_PIP}` (data only, never imported)",
)


def fill(node: Any, directory: str) -> Any:
    """Substitute {dir}, REPO and UPSTREAM in every string of a case."""
    if isinstance(node, str):
        upstream = upstream_deploy_dir()
        node = node.replace("{dir}", directory).replace("REPO", str(REPO_ROOT))
        return node.replace("UPSTREAM", str(upstream)) if upstream else node
    if isinstance(node, dict):
        return {k: fill(v, directory) for k, v in node.items()}
    if isinstance(node, list):
        return [fill(v, directory) for v in node]
    return node


if __name__ == "__main__":
    if sys.argv[1:] != ["--install-upstream"]:
        raise SystemExit("usage: python -m conformance.deploy.deploy_cases --install-upstream")
    raise SystemExit(install_upstream())


def value_at(tree: Any, dotted: str) -> Any:
    """The value at a dotted key of a resolved configuration ("stages.0.max_num_seqs")."""
    node = tree
    for part in dotted.split("."):
        key = int(part) if part.isdigit() and int(part) in node else part
        node = node[key]
    return node
