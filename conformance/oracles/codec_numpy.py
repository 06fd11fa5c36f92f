"""An independent numpy-only (float64) decode of the Higgs codec, the source of the codec goldens.

No torch, no transformers, nothing from `reference`: weight norm, Snake, convolutions, transposed
convolutions and the residual units are written out here from the architecture's description:

    codes [8, T] -> per codebook q: embed_q[codes[q]] @ project_out_q.T + b_q; sum over q
    -> fc2 -> conv k7 -> 5 x (Snake, ConvTranspose1d(k=2s, stride s, pad ceil(s/2), output_pad s % 2),
    3 residual units with dilations 1, 3, 9) -> Snake -> conv k7 to 1 channel (no tanh).
    Residual unit: x + conv_k1(Snake(conv_k7_dilated(Snake(x)))).
    Snake(x) = x + sin(alpha * x)^2 / (alpha + 1e-9).
    Weight norm: w = g * v / ||v||, the norm over every axis but the first.

Reads either key layout: transformers names (`acoustic_decoder.block.N...`, `quantizer.quantizers.N...`,
`fc2`) or boson-ai names (`decoder_2.model.N...`, `quantizer.vq.layers.N._codebook`, `fc_post2`),
with conv weights plain or as weight_g / weight_v.
"""

from __future__ import annotations

import math

import numpy as np

UPSAMPLING_RATIOS = (8, 5, 4, 2, 3)
# Own copies of the format's constants, on purpose: an independent oracle shares no code with reference/.
NUM_CODEBOOKS = 8
DILATIONS = (1, 3, 9)


class OracleWeights:
    """Looks tensors up by transformers-layout name in either layout, as float64 arrays."""

    def __init__(self, state: dict[str, np.ndarray], num_blocks: int = len(UPSAMPLING_RATIOS)) -> None:
        self.state = {k: np.asarray(v, dtype=np.float64) for k, v in state.items()}
        self.num_blocks = num_blocks
        self.boson = any(k.startswith(("decoder_2.", "quantizer.vq.")) for k in state)

    def _name(self, base: str) -> str:
        if not self.boson:
            return base
        parts = base.split(".")
        if parts[0] == "quantizer":  # quantizer.quantizers.i.{codebook,project_out}
            tail = "_codebook" if parts[3] == "codebook" else parts[3]
            return f"quantizer.vq.layers.{parts[2]}.{tail}"
        if base == "fc2":
            return "fc_post2"
        if parts[1] in ("conv1", "snake1", "conv2") and len(parts) == 2:
            index = {"conv1": 0, "snake1": self.num_blocks + 1, "conv2": self.num_blocks + 2}[parts[1]]
            return f"decoder_2.model.{index}"
        block = f"decoder_2.model.{int(parts[2]) + 1}"
        if len(parts) == 4:  # acoustic_decoder.block.b.{snake1,conv_t1}
            return f"{block}.block.{0 if parts[3] == 'snake1' else 1}"
        unit = int(parts[3].removeprefix("res_unit")) + 1
        return f"{block}.block.{unit}.block.{('snake1', 'conv1', 'snake2', 'conv2').index(parts[4])}"

    def get(self, base: str, suffix: str) -> np.ndarray:
        name = f"{self._name(base)}.{suffix}"
        if name not in self.state:
            raise KeyError(f"oracle: missing tensor {name}")
        return self.state[name]

    def conv_weight(self, base: str) -> np.ndarray:
        name = self._name(base)
        if f"{name}.weight" in self.state:
            return self.state[f"{name}.weight"]
        g, v = self.get(base, "weight_g"), self.get(base, "weight_v")
        norm = np.sqrt((v * v).reshape(v.shape[0], -1).sum(axis=1)).reshape(g.shape)
        return g * v / norm

    def codebook(self, i: int) -> np.ndarray:
        base = f"quantizer.quantizers.{i}.codebook"
        name = self._name(base)
        return self.state[f"{name}.embed"] if f"{name}.embed" in self.state else self.get(base, "weight")


def snake(x: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """x [C, L], alpha [1, C, 1] -> [C, L]."""
    a = alpha.reshape(-1, 1)
    return x + np.sin(a * x) ** 2 / (a + 1e-9)


def conv1d(x: np.ndarray, w: np.ndarray, b: np.ndarray, dilation: int = 1) -> np.ndarray:
    """Same-length convolution: x [Cin, L], w [Cout, Cin, K] (odd K), zero padding dilation*(K-1)/2."""
    k = w.shape[2]
    pad = dilation * (k - 1) // 2
    length = x.shape[1]
    xp = np.pad(x, ((0, 0), (pad, pad)))
    out = np.zeros((w.shape[0], length))
    for j in range(k):
        out += w[:, :, j] @ xp[:, j * dilation : j * dilation + length]
    return out + b[:, None]


def conv_transpose1d(x: np.ndarray, w: np.ndarray, b: np.ndarray, stride: int) -> np.ndarray:
    """x [Cin, L], w [Cin, Cout, 2*stride] -> [Cout, L*stride] (pad ceil(s/2), output_pad s % 2)."""
    cin, cout, k = w.shape
    length = x.shape[1]
    full = np.zeros((cout, (length - 1) * stride + k))
    for j in range(k):  # input sample i lands on full[:, i * stride + j]
        full[:, j : j + (length - 1) * stride + 1 : stride] += w[:, :, j].T @ x
    pad = math.ceil(stride / 2)
    out_len = (length - 1) * stride - 2 * pad + k + stride % 2
    return full[:, pad : pad + out_len] + b[:, None]


def residual_unit(x: np.ndarray, wts: OracleWeights, base: str, dilation: int) -> np.ndarray:
    y = snake(x, wts.get(f"{base}.snake1", "alpha"))
    y = conv1d(y, wts.conv_weight(f"{base}.conv1"), wts.get(f"{base}.conv1", "bias"), dilation)
    y = snake(y, wts.get(f"{base}.snake2", "alpha"))
    y = conv1d(y, wts.conv_weight(f"{base}.conv2"), wts.get(f"{base}.conv2", "bias"))
    return x + y


def rvq_fc2(codes: np.ndarray, wts: OracleWeights) -> np.ndarray:
    """codes [8, T] -> fc2 output [256, T]."""
    total = 0.0
    for q in range(codes.shape[0]):
        vectors = wts.codebook(q)[codes[q]]  # [T, 64]
        base = f"quantizer.quantizers.{q}.project_out"
        total = total + vectors @ wts.get(base, "weight").T + wts.get(base, "bias")  # [T, 1024]
    hidden = total @ wts.get("fc2", "weight").T + wts.get("fc2", "bias")  # [T, 256]
    return hidden.T


def decode(codes: np.ndarray, state: dict[str, np.ndarray], ratios: tuple[int, ...] = UPSAMPLING_RATIOS) -> np.ndarray:
    """codes int [8, T] (0 .. 1023) -> float64 PCM [T * prod(ratios)]."""
    codes = np.asarray(codes)
    if codes.ndim != 2 or codes.shape[0] != NUM_CODEBOOKS:
        raise ValueError(f"oracle: codes must be [{NUM_CODEBOOKS}, T], got {codes.shape}")
    if codes.min() < 0 or codes.max() > 1023:
        raise ValueError("oracle: codes must lie in [0, 1023]")
    wts = OracleWeights(state, len(ratios))
    x = rvq_fc2(codes, wts)
    x = conv1d(x, wts.conv_weight("acoustic_decoder.conv1"), wts.get("acoustic_decoder.conv1", "bias"))
    for b, stride in enumerate(ratios):
        base = f"acoustic_decoder.block.{b}"
        x = snake(x, wts.get(f"{base}.snake1", "alpha"))
        x = conv_transpose1d(x, wts.conv_weight(f"{base}.conv_t1"), wts.get(f"{base}.conv_t1", "bias"), stride)
        for u, dilation in enumerate(DILATIONS, start=1):
            x = residual_unit(x, wts, f"{base}.res_unit{u}", dilation)
    x = snake(x, wts.get("acoustic_decoder.snake1", "alpha"))
    x = conv1d(x, wts.conv_weight("acoustic_decoder.conv2"), wts.get("acoustic_decoder.conv2", "bias"))
    return x[0]
