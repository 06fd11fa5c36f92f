"""The batched talker step (reference/talker/step.py) against the oracle's literal contract."""

import pytest
import torch

from conformance.oracles.talker_contract import contract_row
from reference.codebooks import BOC, CODEBOOK_VOCAB, EOC, NUM_CODEBOOKS
from reference.talker.step import gumbel_noise, leading_eoc, talker_step
from reference.talker.step_graphs import StepGraphs

pytestmark = pytest.mark.cpu


def _random_logits(generator: torch.Generator, eoc_boost: float) -> torch.Tensor:
    logits = torch.randn(NUM_CODEBOOKS, CODEBOOK_VOCAB, generator=generator) * 5
    logits[0, EOC] += eoc_boost
    return logits


def _greedy(logits, prev_rows, steps):
    batch = len(steps)
    return talker_step(
        logits,
        prev_rows,
        torch.tensor(steps),
        temperature=torch.zeros(batch),
        top_k=torch.zeros(batch, dtype=torch.long),
        top_p=torch.ones(batch),
        seed=torch.zeros(batch, dtype=torch.long),
    )


@pytest.mark.parametrize("eoc_step", [0, 3, 7, 12])
def test_greedy_rows_follow_the_contract_through_lead_in_and_ramp_down(eoc_step):
    gen = torch.Generator().manual_seed(eoc_step)
    remaining, prev = None, torch.full((1, NUM_CODEBOOKS), -1)
    for step in range(eoc_step + NUM_CODEBOOKS + 2):
        logits = _random_logits(gen, eoc_boost=100.0 if step == eoc_step else -100.0)
        expected, remaining = contract_row(logits, step, remaining)
        codes, done = _greedy(logits[None], prev, [step])
        if expected is None:
            assert bool(done[0]) and codes[0].tolist() == [EOC] * NUM_CODEBOOKS
            break
        assert not bool(done[0])
        assert codes[0].tolist() == expected, f"step {step}"
        prev = codes
    else:
        pytest.fail("the request never finished")
    assert step == eoc_step + NUM_CODEBOOKS  # EOC row, 7 ramp-down rows, then EOS


def test_batch_rows_are_independent():
    gen = torch.Generator().manual_seed(1)
    logits = torch.stack([_random_logits(gen, 0.0) for _ in range(3)])
    prev = torch.tensor([[-1] * NUM_CODEBOOKS, [5] * NUM_CODEBOOKS, [EOC, EOC, 3, 4, 5, 6, 7, 8]])
    steps = [0, 9, 20]
    codes, done = _greedy(logits, prev, steps)
    for i in range(3):
        alone, _ = _greedy(logits[i : i + 1], prev[i : i + 1], steps[i : i + 1])
        assert codes[i].tolist() == alone[0].tolist()
    assert codes[0, 1:].eq(BOC).all()  # lead-in
    assert codes[2, :3].eq(EOC).all() and not codes[2, 3:].ge(1024).any()  # ramp-down
    assert not done.any()


def test_only_codebook_zero_may_sample_eoc_and_no_active_codebook_boc():
    logits = torch.zeros(1, NUM_CODEBOOKS, CODEBOOK_VOCAB)
    logits[0, :, EOC] = 1e4
    logits[0, :, BOC] = 1e4
    logits[0, :, 17] = 1.0
    codes, _ = _greedy(logits, torch.full((1, NUM_CODEBOOKS), 7), [20])
    assert codes[0].tolist() == [EOC] + [17] * (NUM_CODEBOOKS - 1)
    assert leading_eoc(codes).item() == 1  # the ramp-down starts


def test_seeded_sampling_is_batch_invariant_and_seed_dependent():
    gen = torch.Generator().manual_seed(2)
    logits = torch.stack([_random_logits(gen, 0.0) for _ in range(4)])
    prev = torch.full((4, NUM_CODEBOOKS), 3)

    def sample(rows, seeds):
        b = len(rows)
        codes, _ = talker_step(logits[rows], prev[rows], torch.full((b,), 10), torch.ones(b),
                               torch.full((b,), 50), torch.full((b,), 0.95), torch.tensor(seeds))
        return codes

    together = sample([0, 1, 2, 3], [11, 12, 13, 14])
    assert sample([2], [13])[0].tolist() == together[2].tolist()
    assert sample([0, 1, 2, 3], [11, 12, 13, 14]).tolist() == together.tolist()
    assert sample([2], [99])[0].tolist() != together[2].tolist()


def test_top_k_one_is_greedy_and_noise_differs_per_codebook():
    gen = torch.Generator().manual_seed(3)
    logits = _random_logits(gen, 0.0)[None]
    prev = torch.full((1, NUM_CODEBOOKS), 3)
    greedy, _ = _greedy(logits, prev, [10])
    top1, _ = talker_step(logits, prev, torch.tensor([10]), torch.ones(1), torch.ones(1, dtype=torch.long),
                          torch.ones(1), torch.tensor([5]))
    assert top1.tolist() == greedy.tolist()
    noise = gumbel_noise(torch.tensor([5]), torch.tensor([10]))
    assert not torch.equal(noise[0, 0], noise[0, 1])


def _mixed_batch(batch: int, device: str, seed: int) -> tuple:
    """talker_step's inputs for `batch` requests at every stage of a stream: lead-in, steady,
    ramp-down and done, greedy and sampled, with and without top-k / top-p."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, NUM_CODEBOOKS, CODEBOOK_VOCAB, generator=gen) * 5
    prev = torch.randint(0, 1024, (batch, NUM_CODEBOOKS), generator=gen)
    prev[::4, :3] = EOC  # ramping down
    prev[1::4] = EOC  # done
    step = torch.randint(0, 40, (batch,), generator=gen)
    temperature = torch.tensor([0.0, 1.0, 0.7]).repeat(batch)[:batch]
    top_k = torch.tensor([0, 50, 1]).repeat(batch)[:batch]
    top_p = torch.tensor([1.0, 0.95]).repeat(batch)[:batch]
    seeds = torch.arange(batch) * 7919 + seed
    inputs = (logits, prev, step, temperature, top_k, top_p, seeds)
    return tuple(x.to(device) for x in inputs)


def test_step_graphs_need_a_cuda_device():
    with pytest.raises(ValueError, match="StepGraphs: CUDA graphs need a CUDA device, got cpu"):
        StepGraphs(talker_step, 8, "cpu")


@pytest.mark.gpu
def test_on_cuda_the_replayed_step_draws_what_the_eager_step_draws():
    graphs = StepGraphs(talker_step, 16, "cuda")
    for batch in (1, 3, 8, 13, 16, 17):  # 3 and 13 replay a padded bucket; 17 is past the largest
        inputs = _mixed_batch(batch, "cuda", seed=batch)
        codes, done = graphs(*inputs)
        want_codes, want_done = talker_step(*inputs)
        assert torch.equal(codes, want_codes) and torch.equal(done, want_done), f"batch {batch}"
    assert graphs.buckets == [1, 2, 4, 8, 16]
    assert graphs.replays == 5  # every batch but the 17
    first, _ = graphs(*_mixed_batch(3, "cuda", seed=3))
    graphs(*_mixed_batch(3, "cuda", seed=4))
    assert torch.equal(first, talker_step(*_mixed_batch(3, "cuda", seed=3))[0]), "a result outlives the next replay"
