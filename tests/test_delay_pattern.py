"""The delay pattern: apply, revert, and dropping non-real frames after the revert."""

import numpy as np
import pytest
import torch

from conformance.oracles import delay_numpy
from reference.codec.delay_pattern import BOC, EOC, apply_delay, real_frame_mask, real_frames, revert_delay, rows_to_frames

pytestmark = pytest.mark.cpu


def random_codes(frames: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 1024, (8, frames), generator=torch.Generator().manual_seed(seed))


def test_apply_delay_layout_matches_the_documented_rule():
    codes = random_codes(3)
    rows = apply_delay(codes)
    assert rows.shape == (10, 8)
    for t in range(10):
        for q in range(8):
            want = BOC if t < q else (int(codes[q, t - q]) if t < q + 3 else EOC)
            assert int(rows[t, q]) == want, (t, q)


def test_apply_delay_matches_the_independent_numpy_statement():
    codes = random_codes(17, seed=3)
    np.testing.assert_array_equal(apply_delay(codes).numpy(), delay_numpy.delayed_rows(codes.numpy()))


def test_revert_takes_rows_q_to_q_plus_l_minus_8_for_codebook_q():
    length = 12
    rows = torch.tensor([[100 * q + t for q in range(8)] for t in range(length)])  # rows[t, q] = 100q + t
    codes = revert_delay(rows)
    assert codes.shape == (8, length - 7)
    for q in range(8):
        assert codes[q].tolist() == [100 * q + t for t in range(q, q + length - 7)]
    np.testing.assert_array_equal(codes.numpy(), delay_numpy.undelayed_frames(rows.numpy()))


@pytest.mark.parametrize("frames", [0, 1, 7, 50])
def test_revert_undoes_apply(frames):
    codes = random_codes(frames, seed=frames)
    assert torch.equal(revert_delay(apply_delay(codes)), codes)
    assert torch.equal(rows_to_frames(apply_delay(codes)), codes)


def test_numpy_and_torch_agree():
    codes = random_codes(9, seed=4)
    rows_np = apply_delay(codes.numpy())
    assert isinstance(rows_np, np.ndarray)
    np.testing.assert_array_equal(rows_np, apply_delay(codes).numpy())
    np.testing.assert_array_equal(rows_to_frames(rows_np), codes.numpy())


def test_real_frames_drops_frames_with_any_special_or_negative_code():
    codes = random_codes(6, seed=5)
    codes[0, 1] = EOC
    codes[7, 3] = BOC
    codes[4, 5] = -1
    assert real_frame_mask(codes).tolist() == [True, False, True, False, True, False]
    assert torch.equal(real_frames(codes), codes[:, [0, 2, 4]])


def test_a_frame_stopped_mid_frame_is_dropped_after_the_revert():
    codes = random_codes(5, seed=6)
    partial = random_codes(1, seed=7)
    partial[:3] = EOC  # codebooks 0..2 stopped
    rows = torch.from_numpy(delay_numpy.delayed_rows(torch.cat([codes, partial], 1).numpy()))
    assert torch.equal(rows_to_frames(rows), codes)


def test_filtering_rows_before_the_revert_would_lose_frames():
    codes = random_codes(10, seed=8)
    rows = apply_delay(codes)
    filtered_first = rows[((rows >= 0) & (rows < 1024)).all(1)]  # the mistake the rule forbids
    assert filtered_first.shape[0] == 10 - 7 and not torch.equal(filtered_first, codes.T)
    assert torch.equal(rows_to_frames(rows), codes)


@pytest.mark.parametrize(
    "call, arg, message",
    [
        (apply_delay, torch.zeros(7, 4, dtype=torch.long), r"\[8, T\]"),
        (apply_delay, torch.zeros(8, dtype=torch.long), r"\[8, T\]"),
        (apply_delay, torch.zeros(8, 4), "integer"),
        (revert_delay, torch.zeros(10, 7, dtype=torch.long), r"\[L, 8\]"),
        (revert_delay, torch.zeros(6, 8, dtype=torch.long), "at least 7 rows"),
        (real_frames, np.zeros((4, 8), dtype=np.int64), r"\[8, T\]"),
    ],
)
def test_wrong_shapes_and_dtypes_raise_clear_errors(call, arg, message):
    with pytest.raises(ValueError, match=message):
        call(arg)


@pytest.mark.parametrize("pieces", [[1] * 49, [3, 7, 0, 1, 20, 9, 9], [49]], ids=["row_by_row", "uneven", "all_at_once"])
def test_rows_to_frames_streamed_in_any_pieces_equals_the_offline_revert(pieces):
    """The streaming path (reference/speech.py RowsToFrames: each frame as soon as its 8 rows are in,
    lead-in and ramp-down frames dropped) returns, piece by piece, exactly the offline path's frames."""
    from reference.speech import RowsToFrames

    codes = torch.randint(0, 1024, (8, 40), generator=torch.Generator().manual_seed(3))
    rows = [[BOC] * 8] + apply_delay(codes).tolist() + [[EOC] * 8]  # [49, 8]: frames of BOC or EOC to drop
    assert sum(pieces) == len(rows)
    streamed, frames, at = [], RowsToFrames(), 0
    for n in pieces:
        out = frames.add(rows[at:at + n])
        assert out.dtype == torch.long and out.shape[0] == 8
        streamed.append(out)
        at += n
    assert torch.equal(torch.cat(streamed, dim=1), codes)
    assert torch.equal(torch.cat(streamed, dim=1), torch.as_tensor(rows_to_frames(torch.tensor(rows))))
