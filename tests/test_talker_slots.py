"""The V2 talker's step over slots (reference/talker/slots.py): what it reads and writes by slot, and
that its CUDA graphs replay it exactly."""

import pytest
import torch

from reference.codebooks import CODEBOOK_VOCAB, EOC, NUM_CODEBOOKS
from reference.talker import code_channel
from reference.talker.slots import TalkerSlots
from reference.talker.step import talker_step
from reference.talker.step_graphs import StepGraphs

pytestmark = pytest.mark.cpu

AUDIO, EOS = 151_000, 151_001
SLOTS, MAX_LEN = 8, 40


def _slots(device: str, seed: int = 0) -> TalkerSlots:
    """Slots holding random code rows and a mix of sampling parameters."""
    gen = torch.Generator().manual_seed(seed)
    slots = TalkerSlots(SLOTS, MAX_LEN, torch.tensor([AUDIO, EOS], device=device), device)
    slots.codes.copy_(torch.randint(0, 1024, slots.codes.shape, generator=gen, dtype=torch.int16))
    slots.temperature.copy_(torch.tensor([0.0, 1.0, 0.7, 1.0] * 2))
    slots.top_k.copy_(torch.tensor([0, 50, 1, 0] * 2))
    slots.top_p.copy_(torch.tensor([1.0, 0.95] * 4))
    slots.seed.copy_(torch.arange(SLOTS) * 7919 + seed)
    return slots


def _batch(slots: TalkerSlots, rows: list[tuple[int, int, int, int]], seed: int = 0) -> tuple:
    """sample's inputs for rows of (slot, position of the last input token, prompt length, sampled)."""
    device = slots.codes.device
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(len(rows), NUM_CODEBOOKS, CODEBOOK_VOCAB, generator=gen) * 5
    slot, pos, prompt_len, sampled = (torch.tensor(column) for column in zip(*rows))
    return (logits.to(device), slot.int().to(device), pos.to(device), prompt_len.int().to(device),
            sampled.int().to(device))


def test_sampling_rows_draw_the_talker_step_from_their_slots_and_write_the_next_position():
    slots = _slots("cpu")
    slots.codes[5, 20, :3] = EOC  # slot 5 is ramping down
    slots.codes[6, 30] = EOC  # slot 6 is done
    before = slots.codes.clone()
    rows = [(2, 11, 12, 1), (5, 20, 12, 1), (6, 30, 9, 1), (0, 15, 15, 1)]
    inputs = _batch(slots, rows)
    lm_tokens, ids = slots.sample(*inputs)

    slot, pos = inputs[1].long(), inputs[2]
    want, done = talker_step(inputs[0], before[slot, pos].long(), pos + 1 - inputs[3], slots.temperature[slot],
                             slots.top_k[slot], slots.top_p[slot], slots.seed[slot])
    assert torch.equal(slots.codes[slot, pos + 1].long(), want)
    after = slots.codes.clone()
    after[slot, pos + 1] = before[slot, pos + 1]
    assert torch.equal(after, before), "a position other than each row's next one was written"
    assert done.tolist() == [False, False, True, False]
    assert lm_tokens.tolist() == [AUDIO, AUDIO, EOS, AUDIO]
    steps = code_channel.decode(_flat(ids))
    assert steps == [(lm, codes) for lm, codes in zip(lm_tokens.tolist(), want.tolist())]


def test_rows_that_sample_nothing_write_only_the_discard_column():
    """A partial prefill chunk (its next position is prompt, maybe a voice-clone reference row) and a
    graph's padding row (slot 0, position 0, zeros) beside real rows of the same slots."""
    slots = _slots("cpu", seed=1)
    before = slots.codes.clone()
    rows = [(3, 10, 30, 0), (0, 0, 0, 0), (0, 0, 0, 0), (1, 12, 10, 1)]
    slots.sample(*_batch(slots, rows, seed=1))
    changed = {tuple(at) for at in (slots.codes != before).any(dim=-1).nonzero().tolist()}
    assert changed - {(s, slots.discard) for s in range(SLOTS)} == {(1, 13)}


def test_a_row_draws_the_same_codes_whatever_batch_it_is_in():
    alone, batched = _slots("cpu", seed=2), _slots("cpu", seed=2)
    row = (4, 18, 10, 1)
    inputs = _batch(alone, [row], seed=3)
    alone.sample(*inputs)
    others = _batch(batched, [(1, 9, 8, 1), (7, 25, 20, 1)], seed=4)
    together = tuple(torch.cat([a[:1], b]) for a, b in zip(inputs, others))
    batched.sample(*together)
    assert torch.equal(alone.codes[4], batched.codes[4])


def test_a_batch_padded_with_zero_rows_draws_and_writes_what_the_batch_alone_does():
    """What a graph's bucket does to a batch (reference/cuda_graphs.py): zero rows after it."""
    alone, padded = _slots("cpu", seed=6), _slots("cpu", seed=6)
    rows = [(2, 14, 10, 1), (5, 21, 12, 1), (0, 17, 9, 1)]
    inputs = _batch(alone, rows, seed=7)
    want = alone.sample(*inputs)
    got = padded.sample(*(torch.cat([x, torch.zeros((5, *x.shape[1:]), dtype=x.dtype)]) for x in inputs))
    assert all(torch.equal(g[: len(rows)], w) for g, w in zip(got, want))
    assert torch.equal(padded.codes[:, : padded.discard], alone.codes[:, : alone.discard])


def test_admitting_a_request_writes_its_slot_alone():
    slots, before = _slots("cpu", seed=8), _slots("cpu", seed=8)
    slots.reset_codes(3, (5, [[7] * NUM_CODEBOOKS, [9] * NUM_CODEBOOKS]))
    slots.set_sampling(3, 0.6, 40, 0.9, 123)
    want = torch.full_like(before.codes[3], -1)
    want[5], want[6] = 7, 9
    assert torch.equal(slots.codes[3], want)
    assert (slots.temperature[3].item(), slots.top_k[3].item(), slots.top_p[3].item(), slots.seed[3].item()) == (
        pytest.approx(0.6), 40, pytest.approx(0.9), 123)
    for name in ("codes", "temperature", "top_k", "top_p", "seed"):
        mine, theirs = getattr(slots, name), getattr(before, name)
        assert torch.equal(torch.cat([mine[:3], mine[4:]]), torch.cat([theirs[:3], theirs[4:]])), name
    slots.reset_codes(3)
    assert (slots.codes[3] == -1).all()


def _flat(ids: torch.Tensor):
    """The flat logprobs a request's output holds for these steps (what the caller decodes)."""

    class Flat:
        token_ids = ids.flatten().tolist()
        start_indices = list(range(0, ids.numel(), ids.shape[1]))
        end_indices = list(range(ids.shape[1], ids.numel() + 1, ids.shape[1]))

    return Flat


@pytest.mark.gpu
def test_on_cuda_the_replayed_step_over_slots_draws_and_writes_what_the_eager_one_does():
    replayed, eager = _slots("cuda", seed=5), _slots("cuda", seed=5)
    graphs = StepGraphs(replayed.sample, SLOTS, "cuda")
    for batch in (1, 3, 8, 5, 8):  # 3 and 5 replay a padded bucket, past the rows a larger batch left
        rows = [(s, 10 + batch, 10, int(s % 3 != 0)) for s in range(batch)]
        got = graphs(*_batch(replayed, rows, seed=batch))
        want = eager.sample(*_batch(eager, rows, seed=batch))
        assert all(torch.equal(g, w) for g, w in zip(got, want)), f"batch {batch}"
        assert torch.equal(replayed.codes[:, : replayed.discard], eager.codes[:, : eager.discard]), f"batch {batch}"
    assert graphs.buckets == [1, 2, 4, 8]
    assert graphs.replays == 5
    first = graphs(*_batch(replayed, [(1, 30, 10, 1)], seed=9))
    graphs(*_batch(replayed, [(2, 30, 10, 1)], seed=10))
    assert torch.equal(first[1], eager.sample(*_batch(eager, [(1, 30, 10, 1)], seed=9))[1]), \
        "a result outlives the next replay"


@pytest.mark.gpu
def test_on_cuda_admitting_a_request_never_waits_for_the_device():
    """An engine step that admits a request must not wait for the step in flight: CUDA's sync debug
    mode raises on any synchronising call, as it does on a Python number assigned into the slot."""
    slots = _slots("cuda", seed=11)
    torch.cuda.set_sync_debug_mode("error")
    try:
        slots.reset_codes(2, (4, [[5] * NUM_CODEBOOKS] * 3))
        slots.set_sampling(2, 0.8, 30, 0.95, 77)
        with pytest.raises(RuntimeError):
            slots.temperature[2] = 0.8
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert slots.codes[2, 4:7].eq(5).all() and slots.codes[2, 7:].eq(-1).all()
    assert (slots.top_k[2].item(), slots.seed[2].item()) == (30, 77)
