"""The Higgs Audio v3 talker as a vLLM model: vLLM's own Qwen3 layers plus the audio side.

Audio side: one fused codebook table [8 * 1026, D]; a row of 8 codes embeds as the sum of its
codes' rows (code c of codebook q is row q * 1026 + c). The audio head (hidden -> [8, 1026]
logits) is the same table or a table of its own, and the text head the text embedding or a
head of its own, as the config's tie flags say (reference/talker/weights.py).

The forward reads `token_codes`, a persistent buffer with one codebook row per input token
(-1 where the token is plain text). The runner side fills it before every forward: the V1 runner
from host-side request state, the V2 model state from device slot buffers. Reading a persistent
buffer keeps the forward free of Python branching, so it can be captured in a CUDA graph.

Sampling belongs to the model too (reference/talker/step.py): `compute_logits` keeps the audio
logits for the talker's sampler and returns LM logits in which only `<|audio|>` and EOS are
finite, so the full-vocabulary head is never computed.

Tensor parallel: every table is a vLLM vocab-parallel layer, so each rank holds a shard of rows.
The audio head multiplies by the local shard and all-gathers the logits (every rank samples, so
every rank needs the whole [8, 1026]); the two LM rows are looked up through the layer's own
masked lookup and all-reduce. Every rank then holds the same logits and draws the same codes,
which keeps the ranks' talker states (reference/talker/runner_v1.py, runner_v2.py) identical.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn
from vllm.config import VllmConfig
from vllm.distributed import get_tensor_model_parallel_world_size, tensor_model_parallel_all_gather
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding
from vllm.model_executor.model_loader.weight_utils import default_weight_loader
from vllm.model_executor.models.qwen3 import Qwen3Model
from vllm.model_executor.models.utils import maybe_prefix

from reference.codebooks import CODEBOOK_VOCAB, NUM_CODEBOOKS
from reference.talker.special_tokens import load_tokenizer, special_ids
from reference.talker.weights import TieFlags, check_complete, weight_target



class HiggsMultimodalQwen3ForConditionalGeneration(nn.Module):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        config = vllm_config.model_config.hf_config
        text = config.get_text_config()
        self.config = config
        self.ties = TieFlags.from_config(config)
        self.body = Qwen3Model(vllm_config=vllm_config, prefix=maybe_prefix(prefix, "body"))
        if self.ties.text_head:
            self.text_head = self.body.embed_tokens
        else:
            self.text_head = ParallelLMHead(text.vocab_size, text.hidden_size, prefix=maybe_prefix(prefix, "text_head"))
        self.audio_embedding = VocabParallelEmbedding(
            NUM_CODEBOOKS * CODEBOOK_VOCAB, text.hidden_size, prefix=maybe_prefix(prefix, "audio_embedding")
        )
        if self.ties.audio_head:
            self.audio_head = self.audio_embedding
        else:
            self.audio_head = ParallelLMHead(
                NUM_CODEBOOKS * CODEBOOK_VOCAB, text.hidden_size, prefix=maybe_prefix(prefix, "audio_head")
            )
        tokenizer = load_tokenizer(vllm_config.model_config.tokenizer)
        self.special = special_ids(tokenizer)
        self.vocab_size = text.vocab_size
        max_tokens = vllm_config.scheduler_config.max_num_batched_tokens
        codes = torch.full((max_tokens, NUM_CODEBOOKS), -1, dtype=torch.long)
        self.register_buffer("token_codes", codes, persistent=False)
        # The body's input lives at a fixed address: piecewise CUDA graphs replay reading the
        # addresses they were captured with, so a freshly allocated embedding would be missed.
        self.register_buffer(
            "inputs_embeds", torch.zeros(max_tokens, text.hidden_size, dtype=vllm_config.model_config.dtype),
            persistent=False,
        )
        offsets = torch.arange(NUM_CODEBOOKS, dtype=torch.long) * CODEBOOK_VOCAB
        self.register_buffer("codebook_offsets", offsets, persistent=False)
        self.register_buffer(
            "lm_ids", torch.tensor([self.special.audio, self.special.eos], dtype=torch.long), persistent=False
        )
        self.last_audio_logits: torch.Tensor | None = None  # [num_logits, 8, 1026] float32
        self.tp_size = get_tensor_model_parallel_world_size()
        self.make_empty_intermediate_tensors = self.body.make_empty_intermediate_tensors

    # -- V2: the model owns its state and sampler --------------------------------------------
    @classmethod
    def get_model_state_cls(cls):
        from reference.talker.runner_v2 import TalkerModelState

        return TalkerModelState

    # -- embeddings --------------------------------------------------------------------------
    def embed_codes(self, codes: torch.Tensor) -> torch.Tensor:
        """Sum over codebooks of the fused table's rows. [T, 8] -> [T, D]"""
        return self.audio_embedding(codes.clamp(min=0) + self.codebook_offsets).sum(dim=1)

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.body.embed_input_ids(input_ids)

    def forward(
        self,
        input_ids: torch.Tensor | None,
        positions: torch.Tensor,
        intermediate_tensors=None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs,
    ) -> torch.Tensor:
        if inputs_embeds is None:
            num_tokens = input_ids.shape[0]
            codes = self.token_codes[:num_tokens]  # [T, 8]
            is_audio = codes[:, :1] >= 0
            mixed = torch.where(is_audio, self.embed_codes(codes), self.embed_input_ids(input_ids))
            inputs_embeds = self.inputs_embeds[:num_tokens]
            inputs_embeds.copy_(mixed)
        return self.body(None, positions, intermediate_tensors, inputs_embeds)

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        self.last_audio_logits = self.audio_logits(hidden_states)
        allowed = hidden_states @ self.lm_rows().t()  # [T, 2]
        logits = torch.full(
            (hidden_states.shape[0], self.vocab_size), float("-inf"), dtype=allowed.dtype, device=allowed.device
        )
        return logits.index_copy_(1, self.lm_ids, allowed)

    def audio_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """The whole audio head's logits on every rank, in float32. [T, D] -> [T, 8, 1026]"""
        local = hidden_states.float() @ self.audio_head.weight.float().t()  # [T, this rank's rows (padded)]
        if self.tp_size > 1:
            local = tensor_model_parallel_all_gather(local, dim=-1)  # the shards in rank order
        return local[:, : NUM_CODEBOOKS * CODEBOOK_VOCAB].view(-1, NUM_CODEBOOKS, CODEBOOK_VOCAB)

    def lm_rows(self) -> torch.Tensor:
        """The text head's rows of `<|audio|>` and EOS, whole on every rank. [2, D]
        The head may be an LM head, whose forward refuses lookups: its parent class's lookup is
        the same masked gather plus all-reduce over the shards."""
        return VocabParallelEmbedding.forward(self.text_head, self.lm_ids)

    # -- weights -----------------------------------------------------------------------------
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Loads the real checkpoint's names (reference/talker/weights.py), heads tied as the config
        says; a tensor the talker needs that the checkpoint lacks fails here, by name."""
        body_weights: list[tuple[str, torch.Tensor]] = []
        loaded, seen = set(), set()
        for name, tensor in weights:
            seen.add(name)
            target = weight_target(name, self.ties)
            if target is None:
                continue
            if target.startswith("body."):
                body_weights.append((target.removeprefix("body."), tensor))
            else:
                param = self.get_parameter(target)
                getattr(param, "weight_loader", default_weight_loader)(param, tensor)
                loaded.add(target)
        check_complete(seen, self.ties, self.config.get_text_config().num_hidden_layers)
        loaded |= {f"body.{n}" for n in self.body.load_weights(body_weights)}
        unset = sorted({name for name, _ in self.named_parameters()} - loaded)
        if unset:  # a head built apart from its tied table, say: never serve random weights
            raise ValueError(f"talker parameters {unset} got no checkpoint tensor (tie flags: {self.ties})")
        return loaded
