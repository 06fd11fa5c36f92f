"""Check that the talker and codec tests catch planted defects (a small mutation run).

    python -m conformance.mutations.talker [--baseline] [--list] [INDEX ...]

Each mutation copies the tree to a temporary directory, plants one defect in reference/ there (a
textual edit that must match exactly once), runs the smallest test selection that is meant to
catch it and reports RED (caught) or GREEN (survived). Exit status 1 if any mutation survives or
no longer applies. `--baseline` first checks that every selection passes on the unmutated tree.

Areas and their catchers:
- reference/talker/step.py (the generation contract, sampling noise): tests/test_talker_step.py;
  its filter (temperature -> top-k -> top-p, as plausible speed rewrites get it wrong): the draws
  on hand-made logits, tests/test_sampling_distribution.py, and the draws of a V1 engine against
  the teacher-forced oracle, conformance/talker/test_sampling_distribution.py (about a minute each);
- reference/talker/runner_v1.py, reference/talker/model.py and prompts.py (audio feedback, chunked
  prefill, reference rows and slots, the fused table, the heads as the tie flags say): the greedy
  engine streams against the oracle goldens, conformance/talker/test_talker_streams.py, one run each
  (a CPU engine boots in about 25 s, so one engine mutation costs about a minute);
- reference/talker/prompt_salt.py (prefix caching across requests): the prefix-sharing cases,
  conformance/talker/test_prefix_sharing.py; its repeat counter: tests/test_prompt_salt.py;
- reference/talker/worker.py (no silent runner fallback): tests/test_worker_runner_check.py;
- reference/codec/delay_pattern.py: tests/test_delay_pattern.py; reference/codec/model.py: the codec goldens,
  conformance/codec/test_codec_golden.py; reference/talker/code_channel.py: tests/test_code_channel.py.

Not collected by pytest (the name does not start with `test_`): one pytest run per mutation, about
seven minutes on a CPU. The mechanics live in conformance/mutations/run.py. The V2 route's
mutations need a GPU: conformance/mutations/gpu.py.
"""

from __future__ import annotations

import sys

from conformance.mutations.run import Mutation, main, mutations_from_table

TS, V1, TM = "reference/talker/step.py", "reference/talker/runner_v1.py", "reference/talker/model.py"
DP, CODEC, CC = "reference/codec/delay_pattern.py", "reference/codec/model.py", "reference/talker/code_channel.py"
PS = "reference/talker/prompt_salt.py"

STEP_TESTS = ("tests/test_talker_step.py",)
DELAY_TESTS = ("tests/test_delay_pattern.py",)
CODEC_TESTS = ("conformance/codec/test_codec_golden.py",)
CHANNEL_TESTS = ("tests/test_code_channel.py",)
SAMPLING_UNITS = ("tests/test_sampling_distribution.py",)
SAMPLING_ENGINE = ("conformance/talker/test_sampling_distribution.py", "-k", "v1")
PREFIX_SHARING = ("conformance/talker/test_prefix_sharing.py", "-k")
SALT_TESTS = ("tests/test_prompt_salt.py", "-k")


def streams(run_id: str, variant: str = "v1") -> tuple[str, ...]:
    """The engine-run check of conformance/cases/talker/engine_runs.yaml with this id, under one
    runner variant of conformance/talker/test_talker_streams.py (V1 here; conformance/mutations/gpu.py asks
    for the V2 ones)."""
    return ("conformance/talker/test_talker_streams.py", "-k",
            f"test_greedy_streams_equal_oracle_goldens and {run_id} and {variant}")


def tensor_parallel(layout_variant: str) -> tuple[str, ...]:
    """The tensor-parallel streams of conformance/talker/test_talker_parallel.py (V1 on two CPU cores
    here; conformance/mutations/gpu.py asks for the V2 ones on two GPUs)."""
    return ("conformance/talker/test_talker_parallel.py", "-k",
            f"test_streams_equal_the_single_device_goldens and {layout_variant} and concurrent")


# Under tensor parallel each rank holds half of the audio head: a head that skips the gather
# samples from its own half, padded out (the planted defect).
LOCAL_SHARD_AUDIO_HEAD = "audio head computed from the local shard only (tensor parallel)"
LOCAL_SHARD_EDIT = (
    "            local = tensor_model_parallel_all_gather(local, dim=-1)  # the shards in rank order",
    "            local = torch.nn.functional.pad(local, (0, local.shape[-1] * (self.tp_size - 1)))",
)

# (name, file, old text, new text, pytest arguments that must fail)
MUTATIONS: list[tuple[str, str, str, str, tuple[str, ...]]] = [
    # -- reference/talker/step.py ----------------------------------------------------------------
    ("lead-in one step too short", TS,
     "codes = torch.where(~ramping[:, None] & (q > step[:, None]), BOC, sampled)",
     "codes = torch.where(~ramping[:, None] & (q > step[:, None] + 1), BOC, sampled)", STEP_TESTS),
    ("EOC allowed on codebook 3", TS,
     "    allowed[1:, EOC] = False  # EOC only on codebook 0\n",
     "    allowed[[1, 2, 4, 5, 6, 7], EOC] = False\n", STEP_TESTS),
    ("ramp-down locks one codebook too few", TS,
     "codes = torch.where(ramping[:, None] & (q < (prev_eoc + 1)[:, None]), EOC, codes)",
     "codes = torch.where(ramping[:, None] & (q < prev_eoc[:, None]), EOC, codes)", STEP_TESTS),
    ("BOC allowed on active codebooks", TS,
     "    allowed[:, BOC] = False  # active codebooks never emit BOC\n",
     "", STEP_TESTS),
    ("gumbel noise identical for all codebooks", TS,
     "key = _mix32(key[:, None] ^ const.codebook_keys[None, :])",
     "key = _mix32(key[:, None] ^ const.codebook_keys[None, :] * 0)", STEP_TESTS),
    # -- reference/talker/step.py: the filter, as a speed rewrite might get it wrong ---------------
    # Each defect twice where the engine check sees it: once against the hand-made cases, once
    # against the V1 engine's draws alone. Three only the hand-made cases can see: an exact tie of
    # cumulative mass and p, and equal logits at the top-k edge, never happen on real logits; and
    # on the dummy checkpoint BOC / EOC rarely rank near the top, so masking them after the filter
    # changes too few engine draws (run 2026-11-30: the engine check passed with it).
    *[(f"{name} [{where}]", TS, old, new, selection)
      for name, old, new, engine_sees in [
          ("top-p applied before top-k (nucleus of the whole distribution)",
           'probs = torch.softmax(sorted_logits.masked_fill(~keep, float("-inf")), dim=-1)',
           "probs = torch.softmax(sorted_logits, dim=-1)", True),
          ("top-p drops the code that crosses p",
           "keep = keep & (mass_before < top_p[:, None, None])",
           "keep = keep & ((mass_before + probs < top_p[:, None, None]) | (rank == 0))", True),
          ("temperature applied after the filter",
           "    scaled = masked / torch.where(greedy, 1.0, temperature)[:, None, None]\n"
           "    filtered = filter_top_k_top_p(scaled, top_k, top_p)\n",
           "    filtered = filter_top_k_top_p(masked, top_k, top_p) / torch.where(greedy, 1.0, temperature)[:, None, None]\n",
           True),
          ("top-k ignored",
           "k = torch.where((top_k <= 0) | (top_k >= logits.shape[-1]), logits.shape[-1], top_k)  # [B]",
           "k = torch.full_like(top_k, logits.shape[-1])", True),
          ("temperature ignored",
           "    scaled = masked / torch.where(greedy, 1.0, temperature)[:, None, None]\n",
           "    scaled = masked\n", True),
          ("contract masks applied after the filter (BOC / EOC take top-k places and top-p mass)",
           '    masked = logits.masked_fill(~allowed_codes(ramping), float("-inf"))\n'
           "    greedy = temperature <= 0\n"
           "    scaled = masked / torch.where(greedy, 1.0, temperature)[:, None, None]\n"
           "    filtered = filter_top_k_top_p(scaled, top_k, top_p)\n",
           "    greedy = temperature <= 0\n"
           "    scaled = logits / torch.where(greedy, 1.0, temperature)[:, None, None]\n"
           '    filtered = filter_top_k_top_p(scaled, top_k, top_p).masked_fill(~allowed_codes(ramping), float("-inf"))\n',
           False),
          ("top-p keeps a code whose preceding mass equals p (non-strict)",
           "keep = keep & (mass_before < top_p[:, None, None])",
           "keep = keep & (mass_before <= top_p[:, None, None])", False),
          ("top-k keeps every code tied with the k-th (a threshold instead of a count)",
           "keep = (rank[None, None, :] < k[:, None, None]).expand_as(logits)",
           "keep = sorted_logits >= sorted_logits.gather(-1, (k - 1)[:, None, None].expand(*logits.shape[:2], 1))",
           False),
      ]
      for where, selection in [("hand-made cases", SAMPLING_UNITS), ("V1 engine draws", SAMPLING_ENGINE)]
      if engine_sees or selection is SAMPLING_UNITS],
    # -- reference/talker/runner_v1.py ------------------------------------------------------------------
    ("V1 sampler stores a step's row one position late (feedback from the wrong step)", V1,
     "host.codes[host.prompt_len + index] = codes_host[i]",
     "host.codes[host.prompt_len + index + 1] = codes_host[i]", streams("one_zero_shot")),
    ("V1 token_codes read one position early (feedback from the wrong step)", V1,
     "chunks.append(host.codes[start:end])",
     "chunks.append(host.codes[start - 1 : end - 1])", streams("one_zero_shot")),
    ("partial prefill chunks treated as real samples", V1,
     "real = end >= req_state.num_tokens",
     "real = True", streams("long_prompt_chunked")),
    ("reference rows one slot late", V1,
     "codes[slots.start : slots.stop] = np.asarray(rows, dtype=np.int64)",
     "codes[slots.start + 1 : slots.stop + 1] = np.asarray(rows, dtype=np.int64)",
     streams("one_voice_clone")),
    ("reference rows located by a token id again (the <|tts|> id the slots hold)", V1,
     "        slots = reference_slots(prompt_len, ref_start, len(rows))\n"
     "        codes[slots.start : slots.stop] = np.asarray(rows, dtype=np.int64)",
     "        slots = [i for i, t in enumerate(req_state.prompt_token_ids) if t == req_state.prompt_token_ids[0]]\n"
     "        codes[slots] = np.asarray(rows, dtype=np.int64)",
     streams("one_voice_clone")),
    # -- reference/talker/prompts.py and reference/talker/code_channel.py --------------------------
    ("reference codes enter the prompt without the delay pattern", "reference/talker/prompts.py",
     "for row in apply_delay(ref_codes).tolist())",
     "for row in ref_codes.T.tolist())",
     ("tests/test_speech_prompts.py",)),
    ("the cache salt ignores the voice (voice clones with equal token ids share KV blocks)", PS,
     'return f"{voice}.{self.instance}.{repeat}"',
     'return f"{self.instance}.{repeat}"',
     PREFIX_SHARING + ("equal_token_ids_never_share and v1",)),
    # -- reference/talker/model.py ---------------------------------------------------------------
    ("fused codebook offsets wrong", TM,
     "torch.arange(NUM_CODEBOOKS, dtype=torch.long) * CODEBOOK_VOCAB",
     "torch.arange(NUM_CODEBOOKS, dtype=torch.long) * (CODEBOOK_VOCAB - 1)", streams("one_zero_shot")),
    ("audio head read codebook-interleaved", TM,
     "return local[:, : NUM_CODEBOOKS * CODEBOOK_VOCAB].view(-1, NUM_CODEBOOKS, CODEBOOK_VOCAB)",
     "return local[:, : NUM_CODEBOOKS * CODEBOOK_VOCAB].view(-1, CODEBOOK_VOCAB, NUM_CODEBOOKS).transpose(1, 2)",
     streams("one_zero_shot")),
    (LOCAL_SHARD_AUDIO_HEAD, TM, *LOCAL_SHARD_EDIT, tensor_parallel("tp2-v1")),
    ("audio head always tied (a separate head in the checkpoint ignored)", TM,
     "        if self.ties.audio_head:\n            self.audio_head = self.audio_embedding",
     "        if True:\n            self.audio_head = self.audio_embedding", streams("audio_head_untied")),
    ("text head always separate (a tied checkpoint fails to load)", TM,
     "        if self.ties.text_head:\n            self.text_head = self.body.embed_tokens",
     "        if False:\n            self.text_head = self.body.embed_tokens", streams("text_head_tied")),
    ("audio feedback disabled (is_audio always False)", TM,
     "is_audio = codes[:, :1] >= 0",
     "is_audio = codes[:, :1] < -1", streams("one_zero_shot")),
    # -- reference/talker/worker.py --------------------------------------------------------------------
    ("a V1 engine accepted when V2 was asked for (silent fallback)", "reference/talker/worker.py",
     "        if built != wanted:\n",
     "        if built != wanted and wanted == \"v1\":\n", ("tests/test_worker_runner_check.py",)),
    # -- reference/codec/delay_pattern.py --------------------------------------------------------------
    ("revert off by one (codebook q read with delay q - 1)", DP,
     "parts = [rows[q : q + t, q] for q in range(n)]",
     "parts = [rows[max(q - 1, 0) : max(q - 1, 0) + t, q] for q in range(n)]", DELAY_TESTS),
    ("BOC counted as a real code", DP,
     "real = (codes >= 0) & (codes < CODEBOOK_SIZE)",
     "real = (codes >= 0) & (codes <= CODEBOOK_SIZE)", DELAY_TESTS),
    # -- reference/codec/model.py ----------------------------------------------------------------------
    ("DAC decoder keeps its tanh", CODEC,
     "    decoder.tanh = nn.Identity()\n",
     "", CODEC_TESTS),
    ("transposed convs without output_padding", CODEC,
     "module.output_padding = (module.stride[0] % 2,)",
     "module.output_padding = (0,)", CODEC_TESTS),
    ("project_out bias dropped", CODEC,
     "+ self.project_out_bias.sum(0)", "", CODEC_TESTS),
    # -- reference/talker/code_channel.py ---------------------------------------------------------------
    ("codebook offset dropped from the code ids", CC,
     "offsets = CODE_ID_OFFSET + torch.arange(NUM_CODEBOOKS, device=codes.device) * CODEBOOK_VOCAB",
     "offsets = CODE_ID_OFFSET + torch.zeros(NUM_CODEBOOKS, dtype=torch.long, device=codes.device)",
     CHANNEL_TESTS),
    ("code ids share the LM token's id space", CC,
     "CODE_ID_OFFSET = 1 << 24",
     "CODE_ID_OFFSET = 0", CHANNEL_TESTS),
    ("the cache salt drops the repeat count (a re-prefill reads another request's generated rows)", PS,
     'return f"{voice}.{self.instance}.{repeat}"',
     'return f"{voice}.{self.instance}"',
     PREFIX_SHARING + ("preempted_requests_rebuild_their_own_rows and v1",)),
    ("the salt's repeat counter wraps at 16 bits (a prompt's 65,537th salt is its first)", PS,
     "            self._repeats[slot] += 1",
     "            self._repeats[slot] = (self._repeats[slot] + 1) % (1 << 16)",
     SALT_TESTS + ("past_a_16_bit_counter",)),
    ("the salt's repeat counter reset when another prompt takes its slot", PS,
     "        with self._lock:\n            repeat = int(self._repeats[slot])",
     "        with self._lock:\n"
     "            owner = self.__dict__.setdefault(\"owner\", {})\n"
     "            if owner.get(slot) != (voice, prompt.token_ids):\n"
     "                owner[slot], self._repeats[slot] = (voice, prompt.token_ids), 0\n"
     "            repeat = int(self._repeats[slot])",
     SALT_TESTS + ("sharing_a_counter",)),
    ("the salt's repeat counter read and raised without the lock (two threads, one salt)", PS,
     "        with self._lock:\n            repeat = int(self._repeats[slot])\n            self._repeats[slot] += 1",
     "        repeat = int(self._repeats[slot])\n        self._repeats[slot] += 1",
     SALT_TESTS + ("threads_salting",)),
]


def mutations() -> list[Mutation]:
    return mutations_from_table(MUTATIONS)


if __name__ == "__main__":
    raise SystemExit(main(mutations(), sys.argv[1:], prefix="mutate_talker_"))
