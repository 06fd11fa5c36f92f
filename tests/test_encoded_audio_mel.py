"""The encoded answers' log-mel (conformance/serving/encoded_audio.py, transformers' numpy STFT and
Slaney filter bank) is librosa's melspectrogram, the judge's definition until 2026-12-04, within
1e-4 dB on noise, a tone, silence and a clip shorter than one window.

librosa's numba code compiles when librosa.util is first imported: 13-20 s on the CPU machine in a
fresh environment. numba caches it beside librosa where that is writable, and the quality checks'
Resemblyzer compiles the same code: whichever of the two comes second in a run takes about 1.6 s."""

import numpy as np
import pytest

from conformance.serving.encoded_audio import RATE, _log_mel

librosa = pytest.importorskip("librosa")

SECONDS = np.arange(2 * RATE) / RATE
SIGNALS = {
    "noise": 0.2 * np.random.default_rng(0).standard_normal(2 * RATE),
    "tone": 0.5 * np.sin(2 * np.pi * 440.0 * SECONDS),
    "silence": np.zeros(2 * RATE),
    "shorter_than_a_window": 0.1 * np.random.default_rng(1).standard_normal(300),
}


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:n_fft=960 is too large")  # librosa on the 300-sample clip
@pytest.mark.parametrize("signal", sorted(SIGNALS))
def test_log_mel_is_librosas(signal):
    samples = SIGNALS[signal].astype(np.float32)  # the judge's samples are float32
    mel = librosa.feature.melspectrogram(y=samples, sr=RATE, n_fft=960, hop_length=240, n_mels=64, fmax=8000.0)
    expected = 10.0 * np.log10(mel + 1e-12)
    ours = _log_mel(samples)
    assert ours.shape == expected.shape
    np.testing.assert_allclose(ours, expected, rtol=0, atol=1e-4)
