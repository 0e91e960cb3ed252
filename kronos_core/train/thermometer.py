"""A tokenizer built, not learned: a residual thermometer code for the close in the Kronos layout.

Why. A tokenizer trained by gradient descent on this 2-core machine stalled at a close round-trip
error of about 0.08 window-std, 60% of a typical one-step move (0.13): twenty sign bits learned
with a straight-through gradient carve the close axis into too few cells. A forecast can be no
finer than its tokenizer, so the bundled default uses a code whose resolution is set by design
and still loads as an ordinary ``KronosTokenizer`` checkpoint (same modules, same ``encode`` and
``decode``; nothing in the engine or the service knows the difference).

The code, in normalised units (each window's own mean and std, clipped to +-5):

* **close, 15 bits, three nested levels.** Level 1 cuts [-5, 5] into 6 cells of width 10/6 with
  5 thresholds; the thermometer bits say how many thresholds the close passed. The residual inside
  the cell is cut the same way (level 2, width 10/36), and its residual again (level 3, width
  10/216 = 0.046). The close comes back as the centre of its level-3 cell: a mean absolute error
  of about 0.012 window-std, under a tenth of a one-step move.
* **candle shape and volume, 5 bits.** A thermometer of ``open - close`` at its terciles (2 bits),
  one bit each for the upper and the lower wick above their medians, and one for the volume above
  its median. Amount has no bit of its own: it follows volume and price (the fitted head, below).

How the encoder computes it with the checkpoint's modules: ``embed`` writes the close, the
shape differences and a large constant channel into the residual stream; each encoder block's
attention is switched off (zero output projection) and its SwiGLU feed-forward subtracts the cell
staircase of one level from the residual channels (each step is ``silu(k u + 1) - silu(k u)``,
a ramp 1/k wide: ``STEEPNESS``); the constant channel keeps every RMSNorm's scale fixed, so a
norm weight of ``C / sqrt(d_model)`` passes values through unchanged. ``quant_embed`` turns
``value - threshold`` into each bit. The decoder's blocks start as the identity and its head is a
ridge least-squares fit from the 20 code bits to the six features on sample windows
(``fit_decoder_head``); ``kronos train tokenizer`` may fine-tune the decoder further with the
encoder frozen.

Bit order: s1 = level 1 (5 bits) + level 2 (5 bits); s2 = level 3 (5 bits) + shape (5 bits), so
the coarse token carries the close to 10/36 = 0.28 window-std and the fine one refines it.
"""

from __future__ import annotations

import math
from typing import cast

import numpy as np
import torch

from kronos_core.model import KronosTokenizer
from kronos_core.model.config import TokenizerConfig
from kronos_core.model.layers import SwiGLU, TransformerBlock

CLIP = 5.0
CONST = 1000.0  # the constant channel: keeps every RMSNorm's scale fixed to 1e-4
STEEPNESS = 1000.0  # ramp of a staircase step, 1/STEEPNESS wide (float32-safe: gates stay < 1e4)
RELU_STEEPNESS = 100.0  # silu(k u) / k stands for relu(u) in the wick channels
LEVEL_THRESHOLDS = 5  # per level; cells = thresholds + 1
LEVELS = 3
CLOSE_BITS = LEVEL_THRESHOLDS * LEVELS  # 15
SHAPE_BITS = 5
TOTAL_BITS = CLOSE_BITS + SHAPE_BITS  # 20 = s1 10 + s2 10

# residual-stream channels of the encoder
CH_CONST, CH_CLOSE, CH_R1, CH_R2, CH_BODY, CH_WICK_UP, CH_WICK_DOWN, CH_VOLUME = range(8)
OPEN, HIGH, LOW, CLOSE, VOLUME = 0, 1, 2, 3, 4


def thermometer_config(d_model: int = 64, ff_dim: int = 128, n_heads: int = 4) -> TokenizerConfig:
    """The tokenizer config the construction fills: 20 bits (s1 10 + s2 10), two encoder blocks."""
    return TokenizerConfig(d_in=6, d_model=d_model, n_heads=n_heads, ff_dim=ff_dim, n_enc_layers=3,
                           n_dec_layers=3, s1_bits=10, s2_bits=10, group_size=5)


def level_widths() -> list[float]:
    """Cell width of each close level: 10/6, 10/36, 10/216."""
    cells = LEVEL_THRESHOLDS + 1
    return [2 * CLIP / cells ** (i + 1) for i in range(LEVELS)]


def shape_thresholds(sample: np.ndarray) -> dict[str, list[float]]:
    """Terciles of open - close and medians of the wicks and of the volume, from normalised
    windows (N, L, 6)."""
    o, h, lo, c, v = (sample[..., i] for i in (OPEN, HIGH, LOW, CLOSE, VOLUME))
    body = o - c
    return {"body": [float(x) for x in np.percentile(body, [100 / 3, 200 / 3])],
            "wick_up": [float(np.median(h - np.maximum(o, c)))],
            "wick_down": [float(np.median(np.minimum(o, c) - lo))],
            "volume": [float(np.median(v))]}


class _Units:
    """Fills one SwiGLU's hidden units: ``w2(silu(w1 n) * w3 n)`` with ``n`` the normed stream."""

    def __init__(self, ffn: SwiGLU):
        self.w1, self.w2, self.w3 = ffn.w1.weight, ffn.w2.weight, ffn.w3.weight
        self.next = 0

    def unit(self, gate: dict[int, float], writes: dict[int, float]) -> None:
        """One hidden unit: gate = sum(gate[ch] * n[ch]) (value 1), adds writes[ch] * silu(gate)."""
        u = self.next
        if u >= self.w1.shape[0]:
            raise ValueError(f"ff_dim {self.w1.shape[0]} too small for the thermometer tokenizer")
        for ch, w in gate.items():
            self.w1[u, ch] = w
        self.w3[u, CH_CONST] = 1.0 / CONST
        for ch, w in writes.items():
            self.w2[ch, u] = w
        self.next += 1

    def step(self, source: int, threshold: float, height: float, targets: list[int]) -> None:
        """Subtract ``height`` * step(n[source] > threshold) from every target channel."""
        k = STEEPNESS
        # clamp(k (x - t) + 1, 0, 1) = relu(k (x - t) + 1) - relu(k (x - t)): 1 from x >= t on
        for offset, sign in ((1.0, -1.0), (0.0, 1.0)):
            self.unit({source: k, CH_CONST: (offset - k * threshold) / CONST},
                      {t: sign * height for t in targets})


def _blocks(blocks: torch.nn.ModuleList) -> list[TransformerBlock]:
    return [cast(TransformerBlock, b) for b in blocks]


@torch.no_grad()
def build_encoder(tok: KronosTokenizer, shape: dict[str, list[float]]) -> None:
    """Set ``tok``'s encoder (embed, two blocks, quant_embed) to the code of the module
    docstring."""
    c = tok.config
    if c.s1_bits + c.s2_bits != TOTAL_BITS or c.n_enc_layers != 3 or c.d_model < 9:
        raise ValueError(
            "the thermometer tokenizer needs s1_bits + s2_bits = 20, n_enc_layers = 3, "
            "d_model >= 9 (thermometer_config())"
        )
    for p in (*tok.embed.parameters(), *tok.encoder.parameters(), *tok.quant_embed.parameters()):
        p.zero_()
    e_w, e_b = tok.embed.weight, tok.embed.bias  # (d, 6), (d,)
    e_b[CH_CONST] = CONST
    e_w[CH_CLOSE, CLOSE] = 1.0
    for ch in (CH_R1, CH_R2):  # residuals start at close + 5, the distance from the bottom edge
        e_w[ch, CLOSE], e_b[ch] = 1.0, CLIP
    e_w[CH_BODY, OPEN], e_w[CH_BODY, CLOSE] = 1.0, -1.0  # open - close
    # high - close, minus relu(o - c) below
    e_w[CH_WICK_UP, HIGH], e_w[CH_WICK_UP, CLOSE] = 1.0, -1.0
    e_w[CH_WICK_DOWN, CLOSE], e_w[CH_WICK_DOWN, LOW] = 1.0, -1.0  # close - low, minus relu(c - o)
    e_w[CH_VOLUME, VOLUME] = 1.0
    scale = CONST / math.sqrt(c.d_model)  # RMSNorm weight that undoes its division
    widths = level_widths()
    for i, block in enumerate(_blocks(tok.encoder)):
        block.norm1.weight.fill_(scale)
        block.norm2.weight.fill_(scale)  # attention is off: its output projection stays zero
        units = _Units(block.ffn)
        if i == 0:
            for j in range(1, LEVEL_THRESHOLDS + 1):  # level-1 staircase out of both residuals
                units.step(CH_CLOSE, -CLIP + widths[0] * j, widths[0], [CH_R1, CH_R2])
            kr = RELU_STEEPNESS
            units.unit({CH_BODY: kr}, {CH_WICK_UP: -1.0 / kr})  # wick up = h - c - relu(o - c)
            units.unit({CH_BODY: -kr}, {CH_WICK_DOWN: -1.0 / kr})  # wick down = c - l - relu(c - o)
        else:
            for j in range(1, LEVEL_THRESHOLDS + 1):  # level-2 staircase out of the last residual
                units.step(CH_R1, widths[1] * j, widths[1], [CH_R2])
    q_w, q_b = tok.quant_embed.weight, tok.quant_embed.bias  # (20, d), (20,)
    bit = 0
    for level, source in enumerate((CH_CLOSE, CH_R1, CH_R2)):
        base = -CLIP if level == 0 else 0.0
        for j in range(1, LEVEL_THRESHOLDS + 1):
            q_w[bit, source], q_b[bit] = 1.0, -(base + widths[level] * j)
            bit += 1
    for source, cuts in ((CH_BODY, shape["body"]), (CH_WICK_UP, shape["wick_up"]),
                         (CH_WICK_DOWN, shape["wick_down"]), (CH_VOLUME, shape["volume"])):
        for cut in cuts:
            q_w[bit, source], q_b[bit] = 1.0, -cut
            bit += 1
    assert bit == TOTAL_BITS


@torch.no_grad()
def fit_decoder_head(
    tok: KronosTokenizer, sample: np.ndarray, batch: int = 256
) -> dict[str, float]:
    """Identity decoder blocks, code bits copied into channels 0..19, and ``head`` fitted by least
    squares from those bits (and a constant) to the six normalised features of ``sample``
    (N, L, 6). Returns each feature's mean absolute round-trip error on the sample."""
    c = tok.config
    for p in (*tok.post_quant_embed.parameters(), *tok.post_quant_embed_pre.parameters(),
              *tok.decoder.parameters(), *tok.head.parameters()):
        p.zero_()
    for block in _blocks(tok.decoder):  # identity: attention and feed-forward outputs stay zero
        block.norm1.weight.fill_(1.0)
        block.norm2.weight.fill_(1.0)
    bits_scale = math.sqrt(TOTAL_BITS)  # code entries are +-1/sqrt(20): channels become +-1
    for j in range(TOTAL_BITS):
        tok.post_quant_embed.weight[j, j] = bits_scale
    for j in range(c.s1_bits):  # the coarse path (training only) sees the s1 bits the same way
        tok.post_quant_embed_pre.weight[j, j] = bits_scale
    x = torch.from_numpy(np.ascontiguousarray(sample, dtype=np.float32))
    codes = []
    for start in range(0, len(x), batch):
        s1, s2 = tok.encode(x[start:start + batch])
        codes.append(tok.ids_to_code(s1, s2) * bits_scale)  # (b, L, 20) of +-1
    design = torch.cat(codes).reshape(-1, TOTAL_BITS).double()  # (N L, 20)
    design = torch.cat([design, torch.ones(len(design), 1, dtype=torch.float64)], dim=1)
    target = x.reshape(-1, x.shape[-1]).double()  # (N L, 6)
    # ridge normal equations: bits that never flip in the sample equal the constant column, which
    # leaves plain least squares rank-deficient (LAPACK's rank guess then fails on some samples)
    gram = design.T @ design + 1e-6 * len(design) * torch.eye(design.shape[1], dtype=torch.float64)
    coef = torch.linalg.solve(gram, design.T @ target)  # (21, 6)
    tok.head.weight[:, :TOTAL_BITS] = coef[:TOTAL_BITS].T.float()
    tok.head.bias[:] = coef[TOTAL_BITS].float()
    fitted = design @ coef
    return {name: float((fitted[:, i] - target[:, i]).abs().mean())
            for i, name in enumerate(("open", "high", "low", "close", "volume", "amount"))}


def build_thermometer_tokenizer(sample: np.ndarray, d_model: int = 64,
                                ff_dim: int = 128) -> tuple[KronosTokenizer, dict[str, float]]:
    """The whole construction from normalised sample windows (N, L, 6): the tokenizer and each
    feature's mean absolute round-trip error on the sample."""
    tok = KronosTokenizer(thermometer_config(d_model, ff_dim)).eval()
    build_encoder(tok, shape_thresholds(sample))
    errors = fit_decoder_head(tok, sample)
    return tok, errors
