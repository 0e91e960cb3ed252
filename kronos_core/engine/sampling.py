"""Token sampling: temperature, top-k / top-p filtering and seeded, batch-invariant draws.

Seeded draws come from a counter-based generator: the uniform number used for a
row at a given step depends only on (row key, step, token kind), never on which
other rows share the batch or on the batch size. Sampling is inverse-CDF with
that number, so a row's tokens are reproducible in any batch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from kronos_core.base.options import ForecastOptions

_MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class SamplingParams:
    """How tokens are drawn; built from ``ForecastOptions`` (``from_options``)."""

    temperature: float = 1.0  # logits are divided by this before the softmax
    top_k: int = 0  # > 0: keep only the top_k logits (then top_p is ignored)
    top_p: float = 0.9  # < 1: keep the smallest most-likely set reaching this probability

    def __post_init__(self):
        if not self.temperature > 0:
            raise ValueError(f"temperature (T) must be > 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

    @classmethod
    def from_options(cls, options: ForecastOptions) -> SamplingParams:
        """The token-sampling part of a forecast's options (validated here)."""
        if options.temperature is None or options.top_p is None:
            raise ValueError("ForecastOptions with temperature or top_p None reached the engine: "
                             "resolve them first (options.with_defaults(predictor.sampling))")
        return cls(temperature=options.temperature, top_k=options.top_k, top_p=options.top_p)

    @property
    def greedy(self) -> bool:
        return self.top_k == 1


def _candidates_apply(logits: torch.Tensor, params: SamplingParams) -> bool:
    """Whether top-p runs on the CPU's candidates (``_top_p_candidates``)."""
    return (params.top_k == 0 and params.top_p < 1.0 and logits.device.type == "cpu"
            and TOP_P_CANDIDATES > 0)


def filter_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """(N, V) logits / T with filtered-out entries set to -inf."""
    logits = logits.float() / params.temperature
    if params.top_k > 0:
        k = min(params.top_k, logits.shape[-1])
        kth = torch.topk(logits, k, dim=-1).values[..., -1:]  # (N, 1)
        return logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1.0:
        if _candidates_apply(logits, params):
            return _top_p_kept_from_candidates(logits, params.top_p)
        return _top_p_kept_by_sort(logits, params.top_p)
    return logits


# CPU top-p: the candidates (most likely logits) sorted first; a whole-row sort costs ~36 us per
# 1,024 logits on a CPU, the top 128 about a tenth of that. A trained model's kept set is far
# smaller (the bundled one's largest was 98 tokens on its sample data); a flatter row falls back.
# 0: every row sorted whole, as on a GPU.
TOP_P_CANDIDATES = 128
# The draw tries this many candidates first, then TOP_P_CANDIDATES for the rows they do not
# settle: the bundled model's s1 rows keep at most 8 tokens (top 32 of 1,024: 0.3 ms for 256 rows
# against 3.2 ms for the top 128), its s2 rows 20-103. Same tokens either way; only speed.
TOP_P_FIRST_CANDIDATES = 32
# From this many candidates a draw places their weights in a row of zeros and draws over it,
# which on a CPU costs half of sorting their ids into vocabulary order (0.3 against 0.8 ms for
# 256 rows of 128); fewer are sorted.
DRAW_OVER_ROW_FROM = 64


class CandidateRoute:
    """Whether a kind of draw (a model's s1 or s2 head) tries ``TOP_P_FIRST_CANDIDATES`` first:
    after a draw where the first candidates settled under half of the rows, the next
    ``REPROBE`` draws go straight to ``TOP_P_CANDIDATES``, then the first cut is tried again.
    Speed only: every route draws the same tokens. Shared by a model's generations (racy
    updates between step loops cost time, never tokens)."""

    REPROBE = 8

    def __init__(self) -> None:
        self.skip_first = 0  # draws left that skip the first cut

    def first_cut(self) -> bool:
        """Whether this draw tries the first cut (counts a skipped draw)."""
        if self.skip_first > 0:
            self.skip_first -= 1
            return False
        return True

    def settled(self, rows: int, of: int) -> None:
        """The first cut settled ``rows`` of ``of`` rows."""
        if 2 * rows < of:
            self.skip_first = self.REPROBE


@contextlib.contextmanager
def sorting_whole_rows() -> Iterator[None]:
    """Within it, top-p sorts whole rows on every device, as it does on a GPU: what a count of
    host-device synchronisations made on a CPU should see (``kronos_core.engine.syncs``). Not
    for concurrent use: it sets the module's ``TOP_P_CANDIDATES``."""
    global TOP_P_CANDIDATES
    saved, TOP_P_CANDIDATES = TOP_P_CANDIDATES, 0
    try:
        yield
    finally:
        TOP_P_CANDIDATES = saved


def _top_p_kept_by_sort(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """(N, V) -> the smallest most-likely set reaching ``top_p`` kept, the rest -inf: the whole
    row sorted."""
    ordered, order = torch.sort(logits, dim=-1, descending=True)  # (N, V)
    cumulative = ordered.softmax(-1).cumsum(-1)
    before = torch.cat([torch.zeros_like(cumulative[..., :1]), cumulative[..., :-1]], dim=-1)
    drop_sorted = before > top_p  # the most likely token has before == 0: always kept
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def _top_p_kept_from_candidates(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """As ``_top_p_kept_by_sort`` from the ``TOP_P_CANDIDATES`` largest logits of each row; a
    row whose candidates do not reach ``top_p`` takes the whole-row sort's set
    (``_top_p_kept_by_sort``).

    Which way a row goes depends on its own logits only, so a row keeps the same set in any
    batch (a shared step samples several jobs' rows at once). The kept set is the sort's but for
    rounding: the probabilities' normalizer is summed in vocabulary order (not sorted order), and
    logits tied with the last kept one are all kept. A host read: CPU only."""
    kept, _weights = _top_p_candidates(logits, top_p)
    return logits.masked_fill(~kept, float("-inf"))


class _CandidateCut(NamedTuple):
    """Where top-p cuts each row, found from its k most likely tokens (its candidates)."""

    values: torch.Tensor  # (N, k) the candidates' logits, descending
    tokens: torch.Tensor  # (N, k) their token ids
    probs: torch.Tensor  # (N, V) every token's probability (the row's softmax)
    candidate_probs: torch.Tensor  # (N, k) the candidates' probabilities
    cumulative: torch.Tensor  # (N, k) the candidates' cumulative probability
    threshold: torch.Tensor  # (N, 1) the least likely kept logit


def _candidate_cut(logits: torch.Tensor, top_p: float, width: int = 0) -> _CandidateCut:
    """(N, V) float32 logits -> each row's top-p cut from its ``width`` (default
    ``TOP_P_CANDIDATES``) candidates: a candidate is kept when the probability before it is
    within ``top_p``, as in the whole-row sort. A row's cut is the same at any width its
    candidates settle (``_draw_settled``): the cumulative sum of a prefix does not depend on what
    follows it."""
    k = min(width or TOP_P_CANDIDATES, logits.shape[-1])
    values, tokens = torch.topk(logits, k, dim=-1)  # (N, k) descending, their ids
    # the fused softmax runs row by row in cache: a fifth of the time of exp(logit - max) over
    # the whole (N, V) and a sum (the same numbers but for rounding)
    probs = torch.softmax(logits, -1)  # (N, V)
    candidate_probs = probs.gather(-1, tokens)  # (N, k)
    cumulative = candidate_probs.cumsum(-1)  # (N, k)
    kept_after_first = (cumulative[:, :-1] <= top_p).sum(-1, keepdim=True)  # (N, 1)
    threshold = values.gather(-1, kept_after_first)  # (N, 1)
    return _CandidateCut(values, tokens, probs, candidate_probs, cumulative, threshold)


def _top_p_candidates(logits: torch.Tensor, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, V) float32 logits on a CPU -> the top-p kept set (N, V) bool, as
    ``_top_p_kept_from_candidates`` keeps it, and each token's weight (N, V) float32:
    its probability where kept, 0 elsewhere."""
    cut = _candidate_cut(logits, top_p)
    kept = logits >= cut.threshold  # (N, V)
    if cut.values.shape[-1] < logits.shape[-1] and not float(cut.cumulative[:, -1].min()) > top_p:
        # some rows' candidates fall short (NaN rows among them): those take the whole-row sort
        short = ~(cut.cumulative[:, -1:] > top_p)  # (N, 1)
        by_sort = torch.isfinite(_top_p_kept_by_sort(logits, top_p))  # (N, V)
        kept = torch.where(short, by_sort, kept)
    return kept, cut.probs.masked_fill_(~kept, 0.0)


def sample_tokens(
    logits: torch.Tensor, params: SamplingParams, uniforms: torch.Tensor | None,
    route: CandidateRoute | None = None,
) -> torch.Tensor:
    """Draw one token per row. logits (N, V); uniforms (N,) in [0, 1) or None (global RNG);
    route: which candidates a CPU's top-p draw tries first (None: the first cut always).

    Greedy (top_k == 1) is an arg-max and ignores the uniforms. The draw is inverse-CDF over the
    kept tokens' probabilities in vocabulary order; a CPU's top-p draw runs compiled, row by row
    (``top_p_rows``), where numba is installed.
    """
    if params.greedy:
        return logits.argmax(-1)
    if uniforms is None:
        uniforms = torch.rand(logits.shape[0], dtype=torch.float64, device=logits.device)
    u = uniforms.to(device=logits.device, dtype=torch.float64)  # (N,)
    if _candidates_apply(logits, params):
        scaled = logits.float()
        if params.temperature != 1.0:
            scaled = scaled / params.temperature
        compiled = _draw_compiled(scaled, params.top_p, u, route)
        if compiled is not None:
            return compiled
        return _draw_from_candidates(scaled, params.top_p, u, route)
    probs = filter_logits(logits, params).softmax(-1).double()  # (N, V)
    return _inverse_cdf(probs, u)


def _draw_compiled(scaled: torch.Tensor, top_p: float, u: torch.Tensor,
                   route: CandidateRoute | None = None) -> torch.Tensor | None:
    """``_draw_from_candidates``' tokens, each row drawn in one compiled pass
    (``top_p_rows.draw``; numba imported at first use), the rows its candidates do not settle the
    tensor way; None where the compiled draw does not run (``top_p_rows.available``)."""
    from kronos_core.engine import top_p_rows

    if not top_p_rows.available():
        return None
    tokens = top_p_rows.draw(scaled, top_p, u)  # (N,), -1: not settled
    short = (tokens < 0).nonzero()[:, 0]  # (r,)
    if len(short):
        tokens[short] = _draw_from_candidates(scaled[short], top_p, u[short], route)
    return tokens


def _inverse_cdf(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """weights (N, V) float64, each row's tokens' probabilities up to a factor, in vocabulary
    order; u (N,) in [0, 1) -> (N,) the first token whose cumulative weight passes u x the row's
    total."""
    cdf = weights.cumsum(-1)  # (N, V)
    idx = torch.searchsorted(cdf, u[:, None] * cdf[:, -1:], right=True)[:, 0]
    return idx.clamp_(max=weights.shape[-1] - 1)


def _draw_from_candidates(scaled: torch.Tensor, top_p: float, u: torch.Tensor,
                          route: CandidateRoute | None = None) -> torch.Tensor:
    """Top-p draws on a CPU from each row's most likely tokens: (N, V) float32 logits / T,
    u (N,) -> (N,) tokens.

    The same tokens as the draw over whole rows (``_top_p_candidates``' weights, inverse-CDF in
    vocabulary order): the kept set is found the same way, each kept token's weight is the same
    float32 softmax probability, and the cumulative sum over the kept tokens in vocabulary
    order is the whole row's at those tokens (the others add zeros). Rows try
    ``TOP_P_FIRST_CANDIDATES`` candidates, then those they leave unsettled
    ``TOP_P_CANDIDATES``; a row neither settles (its mass falls short of top_p, or the least
    kept token ties the last candidate) is drawn over its whole row. ``route`` may skip the
    first cut where it has been settling too few rows to pay."""
    first = TOP_P_FIRST_CANDIDATES if route is None or route.first_cut() else 0
    widths = [w for w in (first, TOP_P_CANDIDATES) if 0 < w < scaled.shape[-1]]
    picked: torch.Tensor | None = None  # (N,) every row's token, once a cut has run
    rows = torch.arange(scaled.shape[0])  # (r,) the rows still to draw
    for width in dict.fromkeys(widths):  # distinct widths, in order
        part, part_u = (scaled, u) if picked is None else (scaled[rows], u[rows])
        drawn, settled = _draw_settled(part, top_p, part_u, width)  # (r,), (r,)
        if route is not None and width == first:
            route.settled(int(settled.sum()), len(settled))
        if picked is None:
            picked = drawn
        else:
            picked[rows] = drawn
        rows = rows[~settled]
        if not len(rows):
            return picked
    # rows no candidates settle: drawn over their whole rows
    whole = _top_p_candidates(scaled[rows], top_p)[1].double()  # (r, V)
    drawn = _inverse_cdf(whole, u[rows])
    if picked is None:
        return drawn
    picked[rows] = drawn
    return picked


def _draw_settled(scaled: torch.Tensor, top_p: float, u: torch.Tensor,
                  width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(n, V) logits / T, u (n,) -> each row's draw from its ``width`` candidates (n,) and
    whether those candidates settle it (n,) bool; an unsettled row's draw means nothing."""
    cut = _candidate_cut(scaled, top_p, width)
    vals, idx, threshold, cumulative = cut.values, cut.tokens, cut.threshold, cut.cumulative
    weights = torch.where(vals >= threshold, cut.candidate_probs, 0.0)  # (n, k)
    if width >= DRAW_OVER_ROW_FROM:  # the zeros add nothing to the sums
        row = torch.zeros(scaled.shape, dtype=torch.float64, device=scaled.device)  # (n, V)
        picked = _inverse_cdf(row.scatter_(-1, idx, weights.double()), u)  # (n,)
    else:
        order = idx.argsort(-1)  # the candidates in vocabulary order
        tokens = idx.gather(-1, order)  # (n, k)
        drawn = _inverse_cdf(weights.gather(-1, order).double(), u)  # (n,) positions among them
        picked = tokens.gather(-1, drawn[:, None])[:, 0]  # (n,)
    settled = (cumulative[:, -1] > top_p) & (vals[:, -1] < threshold[:, 0])  # (n,)
    return picked, settled


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser on uint64 arrays (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def row_keys(seed: int, series_keys: list[int], sample_count: int) -> np.ndarray:
    """uint64 key per (series, sample path) row, series-major: (len(series_keys) *
    sample_count,)."""
    base = _splitmix64(np.array([seed & _MASK64], dtype=np.uint64))[0]
    # (B,)
    series = _splitmix64(np.array([k & _MASK64 for k in series_keys], dtype=np.uint64) ^ base)
    paths = np.arange(sample_count, dtype=np.uint64)  # (S,)
    return _splitmix64(series[:, None] ^ _splitmix64(paths + base)[None, :]).reshape(-1)


def counter_uniforms(keys: np.ndarray, step: int, kind: int) -> torch.Tensor:
    """Uniform [0, 1) float64 per row for (step, kind); kind 0 = s1, 1 = s2."""
    counter = np.uint64((step << 1) | kind)
    with np.errstate(over="ignore"):
        bits = _splitmix64(keys ^ _splitmix64(np.array([counter], dtype=np.uint64)))
    return torch.from_numpy((bits >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53)))


def counter_uniforms_table(keys: np.ndarray, horizon: int) -> np.ndarray:
    """(H, 2, N) float64: ``counter_uniforms(keys, step, kind)`` of every step and kind at once
    (what a generation job moves to the device once, before its first step)."""
    steps = np.arange(horizon, dtype=np.uint64)[:, None]  # (H, 1)
    kinds = np.arange(2, dtype=np.uint64)[None, :]  # (1, 2)
    counters = (steps << np.uint64(1)) | kinds  # (H, 2)
    with np.errstate(over="ignore"):
        bits = _splitmix64(
            np.asarray(keys, dtype=np.uint64)[None, None, :] ^ _splitmix64(counters)[:, :, None]
        )
    return (bits >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))  # (H, 2, N)
