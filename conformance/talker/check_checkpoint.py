"""Check a checkpoint folder against every assumption the reference makes about the real format.

    python -m conformance.talker.check_checkpoint DIR

Prints one line per fact (`ok` or `MISMATCH`, with what was found) and exits 1 on any mismatch:
the config (model type, architecture, codebooks, BOC/EOC, rates, tie flags), the tokenizer (the
upstream special tokens, nothing project-only, stop ids), every tensor name (known to the talker,
each tensor the tie flags require present), the bundled codec's decode tensors (either key
layout) and the audio tokenizer's encoder tensors (built on the CPU to check names and shapes).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from safetensors import safe_open

from reference.codebooks import BOC, CODEBOOK_VOCAB, EOC, NUM_CODEBOOKS
from reference.codec.config import CodecConfig
from reference.codec.encoder import load_encoder
from reference.codec.layouts import CodecWeightsError, to_canonical
from reference.codec.model import read_codec_tensors
from reference.talker import special_tokens as st
from reference.talker.config import ARCHITECTURE, MODEL_TYPE
from reference.talker.weights import TieFlags, missing_names, weight_target

REAL_STOP_IDS = {"<|endoftext|>": 151643, "<|audio_end|>": 151671}


@dataclass(frozen=True)
class Finding:
    what: str
    ok: bool
    detail: str

    def __str__(self) -> str:
        return f"{'ok' if self.ok else 'MISMATCH':8} {self.what}: {self.detail}"


def _fact(what: str, found, expected) -> Finding:
    return Finding(what, found == expected, f"{found!r}" + ("" if found == expected else f", expected {expected!r}"))


def config_findings(config: dict) -> list[Finding]:
    audio = config.get("audio_encoder_config", {})
    ties = TieFlags.from_config(config)
    return [
        _fact("config model_type", config.get("model_type"), MODEL_TYPE),
        Finding("config architectures", ARCHITECTURE in (config.get("architectures") or []),
                f"{config.get('architectures')!r} (must name {ARCHITECTURE})"),
        _fact("audio_encoder_config.num_codebooks", audio.get("num_codebooks"), NUM_CODEBOOKS),
        _fact("audio_encoder_config.vocab_size", audio.get("vocab_size"), CODEBOOK_VOCAB),
        _fact("audio_stream_bos_id / eos_id", (config.get("audio_stream_bos_id"), config.get("audio_stream_eos_id")),
              (BOC, EOC)),
        _fact("sample_rate / frame_rate", (config.get("sample_rate"), config.get("frame_rate")), (24000, 25)),
        Finding("tie flags", True, f"text head {'tied to the text embedding' if ties.text_head else 'separate'}, "
                f"audio head {'tied to the codebook table' if ties.audio_head else 'separate'}"),
    ]


def tokenizer_findings(folder: Path) -> list[Finding]:
    tokenizer = st.load_tokenizer(folder)
    added = tokenizer.get_added_vocab()
    higgs_like = {t for t in added if t.startswith("<|") and t.endswith("|>")}
    expected = set(st.REQUIRED + st.VOICE_CLONE + (st.END_OF_TEXT, st.AUDIO_END))
    findings = [
        Finding("required specials", all(t in added for t in st.REQUIRED), f"{[t for t in st.REQUIRED if t in added]}"),
        Finding("voice-clone specials", all(t in added for t in st.VOICE_CLONE),
                f"{[t for t in st.VOICE_CLONE if t in added]}"),
        Finding("no specials beyond upstream's", not (higgs_like - expected - {t for t in higgs_like if "reserved" in t}),
                f"unexpected: {sorted(higgs_like - expected - {t for t in higgs_like if 'reserved' in t})}"),
    ]
    try:
        ids = st.special_ids(tokenizer)
    except ValueError as exc:
        return findings + [Finding("special ids", False, str(exc))]
    vocab = tokenizer.get_vocab()
    for token, real_id in REAL_STOP_IDS.items():
        findings.append(Finding(f"stop id {token}", token in vocab, f"{vocab.get(token)} (the real checkpoint: {real_id})"))
    findings.append(Finding("eos", ids.eos == vocab.get(st.END_OF_TEXT), f"{ids.eos}"))
    return findings


def tensor_names(folder: Path) -> list[str]:
    names = []
    for f in sorted(folder.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as handle:
            names += list(handle.keys())
    return names


def weight_findings(config: dict, names: list[str]) -> list[Finding]:
    ties = TieFlags.from_config(config)
    unknown = []
    for name in names:
        try:
            weight_target(name, ties)
        except ValueError:
            unknown.append(name)
    layers = int(config.get("text_config", {}).get("num_hidden_layers", 0))
    missing = missing_names(set(names), ties, layers)
    return [
        Finding("tensor names known", not unknown, f"{len(names)} tensors" + (f"; unknown: {unknown[:5]}" if unknown else "")),
        Finding("talker tensors the tie flags require", not missing,
                f"{layers} layers" + (f"; missing: {missing[:5]}" if missing else "")),
    ]


def codec_findings(folder: Path, config: dict) -> list[Finding]:
    try:
        layout, _ = to_canonical(read_codec_tensors(folder), CodecConfig.from_dict(config.get("audio_tokenizer_config")))
        decode = Finding("codec decode tensors", True, f"{layout} key layout")
    except (CodecWeightsError, ValueError) as exc:
        decode = Finding("codec decode tensors", False, str(exc).splitlines()[0])
    try:
        load_encoder(folder)
        encoder = Finding("audio tokenizer encoder tensors", True, "acoustic encoder, semantic model and encoder, fc, "
                          "quantizer project_in: every tensor present with its shape")
    except (CodecWeightsError, ValueError) as exc:
        encoder = Finding("audio tokenizer encoder tensors", False, str(exc).splitlines()[0])
    return [decode, encoder]


def check(folder: str | Path) -> list[Finding]:
    folder = Path(folder)
    config_path = folder / "config.json"
    if not config_path.is_file():
        return [Finding("config.json", False, f"no config.json in {folder}")]
    config = json.loads(config_path.read_text())
    names = tensor_names(folder)
    return (config_findings(config) + tokenizer_findings(folder) + weight_findings(config, names)
            + codec_findings(folder, config))


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m conformance.talker.check_checkpoint DIR", file=sys.stderr)
        return 2
    findings = check(argv[0])
    for finding in findings:
        print(finding)
    bad = [f for f in findings if not f.ok]
    print(f"{len(findings) - len(bad)} of {len(findings)} facts match" + (f"; {len(bad)} MISMATCH" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
