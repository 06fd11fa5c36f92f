"""The independent oracle: the Higgs v3 talker in plain PyTorch + transformers, no vLLM.

Eager float32 on the CPU, one request at a time, written as directly from the generation
contract as possible (per-codebook loops, an explicit ramp-down counter), and sharing no step
code with the vLLM talker, so the goldens it writes can catch the talker's mistakes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import safe_open
from transformers import Qwen3Config, Qwen3Model

from conformance.oracles.talker_contract import N, RAMP_DOWNS, contract_row
from reference.talker.prompts import TalkerPrompt
from reference.talker.special_tokens import SpecialIds, load_tokenizer, special_ids

VOCAB = 1026  # N codebooks of CODES real codes + BOC + EOC (talker_contract.py holds the contract)


@dataclass
class OracleResult:
    rows: list[list[int]]  # the delay-pattern rows, one per audio step [num_rows, 8]
    lm_tokens: list[int]  # the LM token of every step: <|audio|> per row, then EOS if finished
    finished: bool
    # Top-1 minus top-2 logit of every greedy choice that had two or more candidates.
    margins: list[float] = field(default_factory=list, repr=False)
    min_margin: float = float("inf")


def _load_tensors(checkpoint: Path) -> dict[str, torch.Tensor]:
    tensors = {}
    for f in sorted(checkpoint.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as handle:
            for name in handle.keys():
                if not name.startswith("tied.embedding.modality_embeddings.0.model."):
                    tensors[name] = handle.get_tensor(name).float()
    return tensors


class OracleTalker:
    def __init__(self, checkpoint: str | Path):
        checkpoint = Path(checkpoint)
        config = json.loads((checkpoint / "config.json").read_text())
        text = dict(config["text_config"])
        text.pop("model_type", None)
        text.setdefault("rope_theta", 1_000_000.0)
        self.tokenizer = load_tokenizer(checkpoint)
        self.ids: SpecialIds = special_ids(self.tokenizer)
        tensors = _load_tensors(checkpoint)
        qwen_config = Qwen3Config(**text, attn_implementation="eager")
        self.body = Qwen3Model(qwen_config).float().eval()
        body_weights = {k.removeprefix("body."): v for k, v in tensors.items() if k.startswith("body.")}
        body_weights["embed_tokens.weight"] = tensors["tied.embedding.text_embedding.weight"]
        self.body.load_state_dict(body_weights, strict=True)
        # Fused codebook table [8 * 1026, D]; the audio head is the same table unless the config
        # unties it (audio_encoder_config.tie_word_embeddings, true when absent).
        self.audio_table = tensors["tied.embedding.modality_embeddings.0.embedding.weight"]
        tied = config.get("audio_encoder_config", {}).get("tie_word_embeddings", True)
        self.audio_head = self.audio_table if tied else tensors["tied.head.modality_heads.0.weight"]

    # -- embeddings -------------------------------------------------------------------------
    def _row_embedding(self, row) -> torch.Tensor:
        """Sum over codebooks of each code's row in the fused table. [D]"""
        return sum(self.audio_table[q * VOCAB + int(code)] for q, code in enumerate(row))

    def _slots(self, prompt: TalkerPrompt) -> dict[int, list[int]]:
        """Position -> reference row, from the prompt's structure: the rows follow <|ref_audio|>."""
        if not prompt.ref_rows:
            return {}
        first = list(prompt.token_ids).index(self.ids.ref_audio) + 1
        return {first + i: list(row) for i, row in enumerate(prompt.ref_rows)}

    def _prompt_embeddings(self, prompt: TalkerPrompt) -> torch.Tensor:
        table, slots = self.body.embed_tokens.weight, self._slots(prompt)
        rows = [self._row_embedding(slots[i]) if i in slots else table[t] for i, t in enumerate(prompt.token_ids)]
        return torch.stack(rows)[None]  # [1, L, D]

    @torch.no_grad()
    def teacher_forced_logits(self, prompt: TalkerPrompt, rows: list[list[int]]) -> torch.Tensor:
        """The audio logits of every step of a realised stream: step t sees the prompt and rows
        0..t-1 as audio feedback (teacher forcing), in one causal forward. [len(rows), 8, 1026]"""
        inputs = self._prompt_embeddings(prompt)
        if len(rows) > 1:
            fed = torch.stack([self._row_embedding(row) for row in rows[:-1]])[None]
            inputs = torch.cat([inputs, fed], dim=1)
        positions = torch.arange(inputs.shape[1])[None]
        hidden = self.body(inputs_embeds=inputs, position_ids=positions).last_hidden_state[0]
        first = len(prompt.token_ids) - 1  # the last prompt position predicts row 0
        return (hidden[first : first + len(rows)] @ self.audio_head.T).view(len(rows), N, VOCAB)

    @torch.no_grad()
    def generate(self, prompt: TalkerPrompt, max_steps: int, ramp_down: str = "training") -> OracleResult:
        """Greedy generation; `max_steps` bounds the LM tokens (as `max_tokens` does in vLLM)."""
        if ramp_down not in RAMP_DOWNS:
            raise ValueError(f"ramp_down must be one of {RAMP_DOWNS}, got {ramp_down!r}")
        result = OracleResult(rows=[], lm_tokens=[], finished=False)
        inputs = self._prompt_embeddings(prompt)
        positions = torch.arange(inputs.shape[1])[None]
        out = self.body(inputs_embeds=inputs, position_ids=positions, use_cache=True)
        cache, hidden = out.past_key_values, out.last_hidden_state[0, -1]
        remaining = None  # ramp-down counter, set when EOC appears
        for step in range(max_steps):
            logits = (self.audio_head @ hidden).view(N, VOCAB)  # [8, 1026]
            row, remaining = contract_row(logits, step, remaining, result.margins, ramp_down)
            if row is None:
                result.lm_tokens.append(self.ids.eos)
                result.finished = True
                break
            result.rows.append(row)
            result.lm_tokens.append(self.ids.audio)
            # Audio feedback: the next input is the fused embedding of the codes just produced.
            position = torch.tensor([[inputs.shape[1] + step]])
            out = self.body(inputs_embeds=self._row_embedding(row)[None, None], position_ids=position,
                            past_key_values=cache, use_cache=True)
            cache, hidden = out.past_key_values, out.last_hidden_state[0, -1]
        result.min_margin = min(result.margins, default=float("inf"))
        return result
