"""vllm-omni's own deploy loader, run beside ours on the same files (issue #14, item 5).

Upstream's loader is config/stage_config.py of the installed wheel (0.30.0). Importing vllm_omni
patches vLLM and needs torch, vLLM 0.30 and omegaconf, so it is never imported here. Instead a
child process (`python -m conformance.deploy.upstream_loader`, reading a JSON request on stdin) puts
small stand-ins for the modules stage_config.py imports into sys.modules (transformers'
PretrainedConfig, vLLM's logger and Scheduler, the omni scheduler classes, whose dotted paths are
all it reads, the endpoint policy, the YAML helpers as yaml.safe_load, and the platform object
with a settable device_name), loads stage_config.py and the Higgs v3 pipeline topology by file
path, and runs upstream's own load_deploy_config + merge_pipeline_deploy per platform. The stand-
ins never reach our process: our tests import the real vLLM.

`resolve_upstream(requests)` returns, per (file, platform), the runner (use_v2_model_runner),
each stage's yaml_engine_args and default sampling, and the connectors the transfer config sees
(resolve_deploy_yaml of the raw file: upstream never applies a platform to connectors), or the
error upstream raised. `compare(ours, theirs)` lists the keys where the two loaders disagree;
keys only upstream sets (pipeline topology: model_arch, engine_output_type, ...) are not
differences, nor are our defaults and derived values.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from conformance.deploy.deploy_cases import upstream_deploy_dir
from conformance.module_files import load_module_file

CHILD = [sys.executable, "-m", "conformance.deploy.upstream_loader"]


def _child(request: dict[str, Any]) -> dict[str, Any]:
    """In the child process only: install the stand-ins, run upstream's loader."""
    import logging
    import types

    import yaml

    package = Path(request["package"])

    def module(name: str, package_like: bool = False, **attrs: Any) -> types.ModuleType:
        mod = types.ModuleType(name)
        mod.__dict__.update(attrs)
        if package_like:
            mod.__path__ = []  # type: ignore[attr-defined]
        sys.modules[name] = mod
        return mod

    class Scheduler:  # vLLM's scheduler base: only subclassed and named
        pass

    for name in ("vllm", "vllm.v1", "vllm.v1.core", "vllm.v1.core.sched", "vllm_omni", "vllm_omni.config",
                 "vllm_omni.core", "vllm_omni.core.sched", "vllm_omni.model_executor",
                 "vllm_omni.model_executor.models", "vllm_omni.model_executor.models.higgs_audio_v3"):
        module(name, package_like=True)
    module("transformers", PretrainedConfig=type("PretrainedConfig", (), {}))
    module("vllm.logger", init_logger=logging.getLogger)
    module("vllm.v1.core.sched.scheduler", Scheduler=Scheduler)
    module("vllm_omni.config.endpoint_policy", EndpointRestriction=object)
    module("vllm_omni.config.yaml_util", load_yaml_config=lambda p: yaml.safe_load(Path(p).read_text()),
           to_dict=lambda obj, resolve=True: obj, create_config=lambda d: d)
    for mod_name, classes in (("omni_ar_scheduler", ("OmniARScheduler", "OmniARAsyncScheduler")),
                              ("omni_generation_scheduler", ("OmniGenerationScheduler",))):
        full = f"vllm_omni.core.sched.{mod_name}"
        module(full, **{c: type(c, (Scheduler,), {"__module__": full}) for c in classes})
    platform = types.SimpleNamespace(device_name="cuda")
    module("vllm_omni.platforms", current_omni_platform=platform)

    sc = load_module_file("vllm_omni.config.stage_config", package / "config" / "stage_config.py")
    pipeline = load_module_file("vllm_omni.model_executor.models.higgs_audio_v3.pipeline",
                    package / "model_executor" / "models" / "higgs_audio_v3" / "pipeline.py").HIGGS_AUDIO_V3_PIPELINE
    out = []
    for path, name in request["pairs"]:
        platform.device_name = name
        try:
            stages = sc.merge_pipeline_deploy(pipeline, sc.load_deploy_config(path), {})
            out.append({
                "runner": "v2" if stages[0].yaml_engine_args.get("use_v2_model_runner") else "v1",
                "stages": {str(s.stage_id): s.yaml_engine_args for s in stages},
                "sampling": {str(s.stage_id): s.yaml_extras.get("default_sampling_params") for s in stages},
                "connectors": sc.resolve_deploy_yaml(path).get("connectors") or {},
            })
        except Exception as exc:  # upstream's own errors are results here
            out.append({"error": f"{type(exc).__name__}: {exc}"})
    return {"results": out}


def resolve_upstream(pairs: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """Upstream's resolution of each (file, platform), computed in one child process."""
    folder = upstream_deploy_dir()
    if folder is None:
        raise RuntimeError("vllm-omni is not installed")
    request = json.dumps({"package": str(folder.parent), "pairs": [list(p) for p in pairs]})
    done = subprocess.run(CHILD, input=request, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"upstream loader child failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout)["results"]


def _flat(prefix: str, value: Any) -> dict[str, Any]:
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flat(f"{prefix}.{key}", item))
        return out
    return {prefix: value}


def compare(ours, theirs: dict[str, Any]) -> list[str]:
    """Dotted keys where our ResolvedDeployment (or our error) and upstream's result disagree."""
    from reference.deploy.schema import GEOMETRY_KEYS, RESERVED_STAGE_KEYS

    if isinstance(ours, Exception) or "error" in theirs:
        mine = f"error {type(ours).__name__}" if isinstance(ours, Exception) else "resolved"
        other = f"error {theirs['error'].split(':')[0]}" if "error" in theirs else "resolved"
        return [] if mine.startswith("error") and other.startswith("error") else [f"outcome: ours {mine}, upstream {other}"]
    diffs = [] if ours.runner == theirs["runner"] else [f"runner: ours {ours.runner}, upstream {theirs['runner']}"]
    for stage in ours.stages:
        sid = str(stage["stage_id"])
        upstream_args = theirs["stages"].get(sid, {})
        for key, value in stage.items():
            if key in RESERVED_STAGE_KEYS or ours.origins.get(f"stages.{sid}.{key}") == "default":
                continue
            if upstream_args.get(key, "<unset>") != value:
                diffs.append(f"stages.{sid}.{key}: ours {value!r}, upstream {upstream_args.get(key, '<unset>')!r}")
        sampling = theirs["sampling"].get(sid) or {}
        for key, value in (stage.get("default_sampling_params") or {}).items():
            if sampling.get(key, "<unset>") != value:
                diffs.append(f"stages.{sid}.default_sampling_params.{key}: ours {value!r}, upstream {sampling.get(key)!r}")
    mine, other = _flat("connectors", ours.connectors), _flat("connectors", theirs["connectors"])
    for key in sorted(set(mine) | set(other)):
        if key.rsplit(".", 1)[-1] == GEOMETRY_KEYS["growing_chunks"] and key not in other:
            continue  # ours alone (upstream's chunks never grow): our resolver fills it, upstream's has no such key
        if mine.get(key, "<unset>") != other.get(key, "<unset>"):
            diffs.append(f"{key}: ours {mine.get(key, '<unset>')!r}, upstream {other.get(key, '<unset>')!r}")
    return diffs


if __name__ == "__main__":
    json.dump(_child(json.load(sys.stdin)), sys.stdout, default=str)
