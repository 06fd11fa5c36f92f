"""Can the code2wav stage keep up? The codec's decode time per batch of steady windows, against
the audio the talker makes per step.

    python -m benchmarks.codec_speed --profile default --batches 1 16 64 --out-dir DIR

A steady chunk of the profile's geometry emits `chunk_frames` new frames (25 under `default`, 1 s
of audio). Decoded as a window (`path` graph or eager) it decodes left context + chunk + holdback
frames (45: 10 + 25 + 10); carried (`path` carried, reference/codec/carried.py) only its 25 new
frames, every layer's state kept from the chunk before. Per batch size B this times the stage's own
decode (CodecStage.decode_windows, warmed as a server warms it; carried: `advance` on B streams
past their first chunks, and each chunk taken), on the stage's device, float32 as the stage loads
it, a batch's chunks copied to the host in one transfer as the stage's worker copies them, after
warm-up decodes, `--repeats` times, and reports the median and
range in ms, the ms per new frame (the decode's cost per frame of audio it emits), and the
stage's capacity: B chunks of audio per decode, in audio seconds per second. On CUDA windows are
timed twice: replaying the warm-up's CUDA graph (`path` graph) and eagerly; so are carried chunks
(`carried graph`, reference/codec/carried_graphs.py, and `carried`). The
talker, at c streams and `--step-ms` per step, makes c frames of audio a step (c x 0.04 s): where
the capacity at B = c is below that, the stage falls behind and first audio waits
(benchmarks/results/2026-12-01-h200-codec-graphs-a/NOTES.md: first PCM at 16 and 64 streams).
`--tf32` lets cuDNN use TF32 in the codec's convolutions (the profile's opt-in `extra.codec_tf32`; full
float32 otherwise): the timings then say what it gains, and the stream-vs-offline figure what it costs. That
figure is always measured: one stream of `--agreement-frames` random frames decoded a frame at a time as the
talker makes them (carried where the geometry allows, else in windows, as the stage does), its SNR and largest
error against the offline decode (the bound of conformance/cases/codec/streaming.yaml for a geometry that
stitches exactly: 100 dB, 1e-5); with TF32, the stream and the offline decode each against the float32 one too.
Writes DIR/codec_speed.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from benchmarks.spread import spread
from reference.codec.carried import CarriedDecoder, advance, stitched_carried
from reference.codec.stage import CodecStage, _to_host
from reference.codec.streaming import Window, agreement, stitched_stream


def time_decodes(stage: CodecStage, windows: list[Window], repeats: int, warmup: int = 3) -> list[float]:
    """ms per `stage.decode_windows(windows)`, each waited for (its chunks copied to the host, as
    they leave the stage)."""
    for _ in range(warmup):
        _to_host(stage.decode_windows(windows))
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        _to_host(stage.decode_windows(windows))
        samples.append(1000 * (time.perf_counter() - start))
    return samples


class SteadyChunks:
    """B carried streams of the stage's geometry past their first chunk: each `next()` pushes codes [B, 8, chunk]
    into every stream (`advance`, as CodecStage.decode_carried), takes each stream's chunk and copies the batch to
    the host as the stage's worker does (`_to_host`). The streams first decode their look-ahead, so every chunk is
    a steady one. `close()` gives their slots back."""

    def __init__(self, stage: CodecStage, codes: torch.Tensor, graphs=None) -> None:
        g = stage.geometry
        self.streams = [stage.carried_stream(g) for _ in codes]
        if None in self.streams:
            raise ValueError(f"{g}: the stage decodes this geometry's windows, not carried")
        self.codes, self.chunk, self.graphs = codes, codes.shape[2], graphs
        advance(self.streams, codes.new_zeros(len(codes), codes.shape[1], g.right_holdback_frames), last=False)
        self.emitted = 0

    def next(self) -> None:
        advance(self.streams, self.codes, last=False, graphs=self.graphs)
        _to_host([s.take(self.emitted, self.chunk) for s in self.streams])
        self.emitted += self.chunk

    def close(self) -> None:
        for s in self.streams:
            s.release()


def time_carried(stage: CodecStage, codes: torch.Tensor, repeats: int, warmup: int = 3, graphs=None) -> list[float]:
    """ms per steady carried chunk of B streams (SteadyChunks.next), codes [B, 8, chunk]."""
    load, samples = SteadyChunks(stage, codes, graphs), []
    try:
        for _ in range(warmup + repeats):
            start = time.perf_counter()
            load.next()
            samples.append(1000 * (time.perf_counter() - start))
    finally:
        load.close()
    return samples[warmup:]


def measure(codec, geometry, batches: list[int], repeats: int, step_ms: float) -> list[dict]:
    g = geometry
    window = g.left_context_frames + g.chunk_frames + g.right_holdback_frames
    frame_s = codec.hop_length / codec.sample_rate
    chunk_s = g.chunk_frames * frame_s
    stage = CodecStage(codec, max(batches), 2, geometry, carried=False)
    stage.warm()
    carried = CodecStage(codec, max(batches), 2, geometry)
    if (why := CarriedDecoder(codec).refusal(g)) is None:
        carried.warm()
    else:
        print(f"no carried path: {why}")
    graphs, rows = stage.graphs, []
    for batch in batches:
        codes = torch.randint(0, 1024, (batch, codec.cfg.num_codebooks, window),
                              generator=torch.Generator().manual_seed(batch))
        windows = [Window(c, g.left_context_frames, g.chunk_frames) for c in codes]
        paths = ["graph"] * (graphs is not None) + ["eager"]
        paths += ["carried graph"] * (carried.carried_graphs is not None) + ["carried"] * (why is None)
        for path in paths:
            stage.graphs = graphs if path == "graph" else None
            if path.startswith("carried"):
                samples = time_carried(carried, codes[:, :, : g.chunk_frames], repeats,
                                       graphs=carried.carried_graphs if path == "carried graph" else None)
            else:
                samples = time_decodes(stage, windows, repeats)
            ms = statistics.median(samples)
            rows.append({
                "batch": batch, "path": path,
                "decoded_frames": g.chunk_frames if path.startswith("carried") else window,
                "new_frames": g.chunk_frames, "ms_per_decode": ms, "spread_ms": spread(samples),
                "ms_per_new_frame": ms / (batch * g.chunk_frames),
                "capacity_audio_s_per_s": batch * chunk_s / (ms / 1000),
                "talker_audio_s_per_s": batch * frame_s / (step_ms / 1000),  # c = batch streams, one frame a step
            })
    return rows


def stream_vs_offline(codec, geometry, frames: int) -> dict:
    """SNR and largest error of one stream (a frame at a time, as the stage decodes it) against the offline decode,
    in the codec's precision; with TF32, the stream and the offline decode each against the float32 one too."""
    codes = torch.randint(0, 1024, (codec.cfg.num_codebooks, frames), generator=torch.Generator().manual_seed(frames))
    stitch = stitched_stream if CarriedDecoder(codec).refusal(geometry) else stitched_carried
    offline, stream = codec.decode(codes), stitch(codec, codes, geometry)
    found = {"frames": frames, "stream_vs_offline": vars(agreement(stream, offline))}
    if codec.tf32:
        codec.tf32 = False
        try:
            exact = codec.decode(codes)
        finally:
            codec.tf32 = True
        found.update(stream_vs_float32=vars(agreement(stream, exact)), offline_vs_float32=vars(agreement(offline, exact)))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.codec_speed", description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="default", help="deploy profile: its geometry and the codec's device")
    parser.add_argument("--size", default="4b", help="dummy checkpoint shape: tiny | 4b")
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 16, 64])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--step-ms", type=float, default=4.0, help="the talker's step at those batches (H200: about 4)")
    parser.add_argument("--platform", choices=["cuda", "cpu"], help="default: cuda when torch sees a GPU")
    parser.add_argument("--tf32", action="store_true", help="TF32 convolutions (the profile's extra.codec_tf32)")
    parser.add_argument("--agreement-frames", type=int, default=250, help="the stream-vs-offline clip, in frames")
    parser.add_argument("--out-dir", type=Path, required=True)
    args = parser.parse_args(argv)

    from higgs_dummy.cache import cached_checkpoint
    from reference.codec.model import load_codec
    from reference.deploy.resolve import resolve_deployment
    from reference.talker.engine import stage_device

    platform = args.platform or ("cuda" if torch.cuda.is_available() else "cpu")
    deployment = resolve_deployment(args.profile, platform)
    device = stage_device(deployment, deployment.codec_stage)
    codec = load_codec(cached_checkpoint(args.size, 0, "no_eoc"), device=device)
    codec.tf32 = args.tf32
    rows = measure(codec, deployment.geometry, args.batches, args.repeats, args.step_ms)
    agreed = stream_vs_offline(codec, deployment.geometry, args.agreement_frames)
    print(f"codec on {device}, {args.size} checkpoint, {deployment.profile}, {'TF32' if args.tf32 else 'float32'}: "
          f"chunks of {rows[0]['new_frames']} frames")
    print(f"{'batch':>5} {'path':>13} {'frames':>6} {'ms/decode':>20} {'ms/new frame':>12} {'stage audio s/s':>16} "
          f"{'talker audio s/s':>17}")
    for r in rows:
        low, high = r["spread_ms"]
        print(f"{r['batch']:>5} {r['path']:>13} {r['decoded_frames']:>6} {r['ms_per_decode']:>8.2f} ({low:.2f}-{high:.2f}) "
              f"{r['ms_per_new_frame']:>12.4f} {r['capacity_audio_s_per_s']:>16.1f} {r['talker_audio_s_per_s']:>17.1f}")
    for name, figure in agreed.items():
        if name != "frames":
            print(f"{name.replace('_', ' ')} ({args.agreement_frames} frames): SNR {figure['snr_db']:.1f} dB, "
                  f"max abs err {figure['max_abs_err']:.3g}")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    out = {"profile": deployment.profile, "platform": platform, "device": str(device), "size": args.size,
           "tf32": args.tf32, "step_ms": args.step_ms, "torch": torch.__version__, "rows": rows, "agreement": agreed}
    (args.out_dir / "codec_speed.json").write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
