"""Our server as the serving checks start it, started by hand, so that the checks can judge it at its URL
(`--implementation reference --server-url URL`, conformance/serving/implementations.py).

    python -m conformance.serving.reference_server [--variant cpu_default] [--port 8000] [--print]

The tiny dummy checkpoint (higgs_dummy, built on first use), the variant's deploy overrides of
conformance/cases/serving/server.yaml (a small talker that fits a CPU; on CUDA the gpu_overrides too) and the
suite's voice folder (the named voice "narrator") in a temporary folder; served as `higgs-tiny` on 127.0.0.1.
It runs in the foreground until interrupted; `--print` prints the command line instead.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
from pathlib import Path

from conformance import case_files
from conformance.serving.serving_client import ROOT, serve_command, write_voices


def command(variant_id: str, port: int, voices: Path) -> list[str]:
    from higgs_dummy.cache import cached_checkpoint  # builds the checkpoint on first use

    doc = case_files.load("serving/server")
    variants = {v["id"]: v for v in doc["variants"]}
    if variant_id not in variants:
        raise SystemExit(f"--variant {variant_id!r}: use one of {', '.join(variants)} (serving/server.yaml)")
    variant = variants[variant_id]
    gpu = doc["gpu_overrides"] if variant["platform"] == "cuda" else {}
    overrides = {**doc["overrides"], **gpu, **variant["overrides"]}
    return serve_command(cached_checkpoint("tiny", 0), variant["profile"], variant["platform"], overrides, port, voices)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", default="cpu_default", help="a variant of serving/server.yaml")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--print", action="store_true", help="print the command line, start nothing")
    args = parser.parse_args(argv)
    voices = Path(tempfile.mkdtemp(prefix="higgs_voices_"))
    write_voices(voices)
    cmd = command(args.variant, args.port, voices)
    if args.print:
        print(shlex.join(cmd))
        return 0
    print(f"serving at http://127.0.0.1:{args.port}: {shlex.join(cmd)}", flush=True)
    os.chdir(ROOT)
    # As the suite's sessions run it (conftest.py): a small CPU KV cache, engine processes spawned.
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    os.execv(sys.executable, cmd)


if __name__ == "__main__":
    sys.exit(main())
