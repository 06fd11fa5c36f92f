"""Helpers shared by the deploy case tests (the cases themselves load through conformance/case_files.py).

- `fill(node, directory)`: in case text, {dir} becomes the case's temporary directory, REPO the
  repository root and UPSTREAM the deploy/ folder of the installed vllm-omni wheel.
- `upstream_deploy_dir()`: that folder, found with importlib.util.find_spec, which locates the
  package without executing it (the project never imports vllm_omni: importing it patches vLLM);
  None when the wheel is not installed.
- `needs_upstream`: the skip mark of tests that read upstream's files, naming the pip command.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
UPSTREAM_PIP = "python -m pip install --no-deps vllm-omni==0.30.0"


def upstream_deploy_dir() -> Path | None:
    spec = importlib.util.find_spec("vllm_omni")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(list(spec.submodule_search_locations)[0]) / "deploy"
    return folder if folder.is_dir() else None


needs_upstream = pytest.mark.skipif(
    upstream_deploy_dir() is None,
    reason=f"vllm-omni's deploy files are not installed: run `{UPSTREAM_PIP}` (data only, never imported)",
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
