"""vllm-omni 0.30.0's own streaming path against its own offline path, engine-free (`tox -e upstream-cpu`).

Streaming: the stage-input processor `talker2code2wav_async_chunk`
(model_executor/stage_input_processors/higgs_audio_v3.py:215-387) is called once per talker step
with that step's delay-pattern row (`{"codes": {"audio": tensor[1, 8]}}`), as the connector calls it,
then once more with no row and `is_finished=True`. Its stand-ins: a transfer manager holding the
per-request row buffer (`code_prompt_token_ids`, a defaultdict of lists) and a connector whose
`config["extra"]` is the geometry, and a request with `external_req_id` and `is_finished()`. Every
payload it returns (flat codebook-major codes, `meta.left_context_size`, `meta.right_holdback_size`)
is decoded by the code2wav stage class's `forward` (conformance/differential/upstream_cpu_codec.py:
the tiny fixture codec, with its decoder width and CUDA query adapted in this process), with the
meta handed in as `runtime_additional_information=[{"meta": ...}]`, so upstream's own trimming
(`forward_chunk`, higgs_audio_v3_code2wav.py:467-492) runs. The kept PCM is concatenated.

Offline: the sync processor `talker2code2wav` (:98-178) on the whole stream, then the same forward.

Geometries: the connector `extra` of upstream's three deploy files (read from the installed wheel:
all initial 1, chunk 25, left 25, holdback 4), and a control whose left context and holdback (10, 10)
cover the decoder's reach (conformance/differential/stream_offline.py judges).
"""

from __future__ import annotations

import importlib
import json
import types
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from conformance.differential import stream_offline, talker_streams
from conformance.differential.inputs import NUM_CODEBOOKS
from conformance.differential.upstream_cpu_codec import UpstreamCodec
from conformance.differential.verdicts import ROOT, Check

STAGE = "vllm_omni.model_executor.stage_input_processors.higgs_audio_v3"
DEPLOY_FILES = ("higgs_multimodal_qwen3.yaml", "higgs_multimodal_qwen3_high_throughput.yaml",
                "higgs_multimodal_qwen3_low_latency.yaml")
GEOMETRY_KEYS = ("initial_codec_chunk_frames", "codec_chunk_frames", "codec_left_context_frames",
                 "codec_right_holdback_frames")
CONTROL_ID = "control_left10_holdback10"
CONTROL = {"initial_codec_chunk_frames": 1, "codec_chunk_frames": 25, "codec_left_context_frames": 10,
           "codec_right_holdback_frames": 10}
STREAMING_CASES = ROOT / "conformance" / "cases" / "codec" / "streaming.yaml"
TALKER_GOLDEN = ROOT / "golden" / "talker" / "streams.json"


def deploy_geometry(path: Path) -> dict[str, int]:
    """The codec streaming geometry in a deploy file's connector `extra` (exactly one connector has one)."""
    connectors = (yaml.safe_load(path.read_text()) or {}).get("connectors") or {}
    found = [c["extra"] for c in connectors.values() if "codec_chunk_frames" in (c.get("extra") or {})]
    if len(found) != 1:
        raise ValueError(f"{path}: {len(found)} connectors carry a codec geometry; expected exactly one")
    missing = [k for k in GEOMETRY_KEYS if k not in found[0]]
    if missing:
        raise ValueError(f"{path}: the connector's extra lacks {missing}")
    return {k: int(found[0][k]) for k in GEOMETRY_KEYS}


def geometries() -> dict[str, dict[str, int]]:
    """sub-case id -> geometry: upstream's deploy files (from the installed wheel), then the control."""
    import vllm_omni

    deploy = Path(vllm_omni.__file__).parent / "deploy"
    found = {Path(name).stem: deploy_geometry(deploy / name) for name in DEPLOY_FILES}
    return {**found, CONTROL_ID: CONTROL}


def stream_payloads(stage: types.ModuleType, rows: np.ndarray, geometry: dict[str, int]) -> list[Any]:
    """What talker2code2wav_async_chunk returns for one stream's rows [L, 8], fed one step at a time."""
    manager = types.SimpleNamespace(code_prompt_token_ids=defaultdict(list),
                                    connector=types.SimpleNamespace(config={"extra": dict(geometry)}))
    request = types.SimpleNamespace(external_req_id="stream", is_finished=lambda: False)
    payloads = []
    for row in rows:
        step = {"codes": {"audio": torch.tensor(row, dtype=torch.long).reshape(1, NUM_CODEBOOKS)}}
        payloads.append(stage.talker2code2wav_async_chunk(manager, step, request, is_finished=False))
    payloads.append(stage.talker2code2wav_async_chunk(manager, None, request, is_finished=True))
    return [p for p in payloads if p is not None]


def _window(codec: UpstreamCodec, payload: Any) -> stream_offline.Window:
    flat = payload.codes.audio.numpy()
    frames = flat.reshape(NUM_CODEBOOKS, -1)
    left, right = int(payload.meta.left_context_size or 0), int(payload.meta.right_holdback_size or 0)
    pcm = codec.decode(frames, meta={"left_context_size": left, "right_holdback_size": right}) if flat.size else flat
    return stream_offline.Window(frames, left, right, np.asarray(pcm, np.float64))


def offline(stage: types.ModuleType, codec: UpstreamCodec, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(frames [8, F], PCM) of upstream's sync path on a finished stream's rows."""
    output = types.SimpleNamespace(finished=True, outputs=[types.SimpleNamespace(
        multimodal_output={"codes": {"audio": torch.from_numpy(rows)}})])
    (prompt,) = stage.talker2code2wav([output])
    frames = np.asarray(prompt["prompt_token_ids"], dtype=np.int64).reshape(NUM_CODEBOOKS, -1)
    return frames, codec.decode(frames)


def stream_check(codec: UpstreamCodec) -> Check:
    """The stream_offline check: one sub-case per geometry over every talker golden stream."""
    from reference.codec.config import CodecConfig
    from reference.codec.streaming import decoder_context_frames

    from conformance.differential.codec_cases import fixture_config

    stage = importlib.import_module(STAGE)
    bound = stream_offline.Bound(**yaml.safe_load(STREAMING_CASES.read_text())["bound"])
    reach = decoder_context_frames(CodecConfig.from_dict(fixture_config()))
    streams = {sid: np.asarray(s["rows"], dtype=np.int64).reshape(-1, NUM_CODEBOOKS)
               for sid, (_, _, s) in talker_streams.golden_streams(json.loads(TALKER_GOLDEN.read_text())).items()}
    offline_of = {sid: offline(stage, codec, rows) for sid, rows in streams.items()}
    check = Check(stream_offline.CHECK, stream_offline.TOLERANCE)
    for case_id, geometry in geometries().items():
        results = {}
        for sid, rows in streams.items():
            windows = [_window(codec, p) for p in stream_payloads(stage, rows, geometry)]
            results[sid] = stream_offline.compare(windows, *offline_of[sid])
        within = stream_offline.covers_reach(geometry["codec_left_context_frames"],
                                             geometry["codec_right_holdback_frames"], reach)
        difference, detail = stream_offline.judge_geometry(results, within, bound)
        shape = "/".join(str(geometry[k]) for k in GEOMETRY_KEYS)
        check.add(case_id, difference, f"initial/chunk/left/holdback {shape}, decoder reach {reach}; {detail}")
    return check
