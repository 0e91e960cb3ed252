"""The CPU's top-p draw as one compiled pass per row (numba), for ``sampling.sample_tokens``.

It draws the tokens ``sampling._draw_from_candidates`` draws, from the same numbers: the kept
set is the most likely tokens whose probability before them (their float32 cumulative sum in
descending order, accumulated in float64 as torch's CPU ``cumsum`` does) is within ``top_p``,
ties of the least likely kept logit all kept; the draw is inverse-CDF over the kept tokens'
float32 probabilities in vocabulary order, in float64. Tokens can differ in two cases only.
A flat row whose 128 tensor candidates fall short of ``top_p`` goes to the tensor path's
whole-row sort, which sums a softmax of the sorted logits (other roundings: its cut can move by
a token where a cumulative sum lies within rounding of ``top_p``) and may keep some tokens tied
with the threshold only; this draw keeps to the candidates' numbers there too, as the definition
written out in ``tests/engine/test_top_p_rows.py`` does. And ``u x total`` rounding up to the
total: this draw takes the last kept token, the tensor one the row's last id.

A row's candidates are the tokens whose probability lies within ``BINADES`` powers of two of
its most likely one (within ``WIDE_BINADES`` where those fall short of ``top_p``, as they can
near 1), grouped by power of two (a counting sort on the float's exponent); the groups are
sorted one by one, most likely first, until the cumulative sum passes ``top_p``, so the
unlikely tail is never sorted. A row the candidates do not settle (a NaN row, a mass spread
below them) comes back as -1 for the tensor path. Without numba (or with
``KRONOS_TOP_P_ROWS=0``) ``available()`` is False and the tensor path draws every row.
"""

from __future__ import annotations

import contextlib
import logging
import os

import numpy as np
import torch

try:
    import numba
except Exception:  # not installed, or not for this numpy: the tensor path draws every row
    numba = None  # type: ignore[assignment]

# candidates: tokens whose probability's binary exponent is within this many of the row's largest;
# a row they leave short of top_p tries again with the wider set
BINADES = 14
WIDE_BINADES = 40
# a group up to this size is sorted by insertion, a larger one by np.sort of packed keys
INSERTION_SORT_MAX = 128
_ID_BITS = 21  # packed sort keys: (descending logit order << 21) | token id; V <= 2**21

ENV = "KRONOS_TOP_P_ROWS"  # "0": the tensor draw for every row
log = logging.getLogger(__name__)
_off_because: list[str] = []  # why the compiled draw failed and is off in this process


def available() -> bool:
    """Whether the compiled draw can run here (numba importable, not switched off, not failed)."""
    return (numba is not None and not _off_because
            and os.environ.get(ENV, "1") != "0")


def draw(scaled: torch.Tensor, top_p: float, u: torch.Tensor) -> torch.Tensor:
    """(N, V) float32 logits / T on a CPU, top_p in (0, 1), u (N,) float64 in [0, 1) -> (N,)
    int64 tokens, -1 where the row's candidates do not settle it."""
    assert numba is not None, "top_p_rows.draw without numba: check available() first"
    if scaled.shape[-1] > 1 << _ID_BITS:
        raise ValueError(f"vocabulary of {scaled.shape[-1]} tokens over {1 << _ID_BITS}")
    logits = scaled.detach().contiguous().numpy()  # (N, V) float32
    probs = torch.softmax(scaled.detach(), -1).numpy()  # (N, V) float32
    out = np.full(logits.shape[0], -1, dtype=np.int64)
    # top_p as float32, as torch compares a float32 tensor with a Python number; the floats'
    # bits as int32 order them (a probability's exponent groups it)
    _run(logits, logits.view(np.int32), probs, probs.view(np.int32), u.contiguous().numpy(),
         float(np.float32(top_p)), out)
    return torch.from_numpy(out)


def _run(*arrays) -> None:
    """``_draw_rows(*arrays)``. A first failure flushes this module's numba caches and compiles
    afresh (an index left by an older version of this file can name functions it no longer has);
    a second switches the compiled draw off in this process with a warning, its rows left -1
    for the tensor draw."""
    for attempt in range(2):
        try:
            _draw_rows(*arrays)
            return
        except Exception as error:  # any numba failure: the tensor draw serves the rows
            if attempt:
                _off_because.append(f"{type(error).__name__}: {error}")
                log.warning("the compiled top-p draw is off in this process (%s); the tensor "
                            "draw runs, with the same tokens, slower", _off_because[-1])
                return
            for compiled in (_draw_rows, _cut, _sort_desc):
                with contextlib.suppress(Exception):
                    compiled._cache.flush()  # numba's on-disk cache of it, emptied


def _jit(fn):
    """numba's compiled function, cached on disk where numba finds a writable place (else
    compiled again in each process), or the Python one without numba."""
    if numba is None:
        return fn
    try:
        return numba.njit(cache=True, nogil=True, boundscheck=False)(fn)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return numba.njit(nogil=True, boundscheck=False)(fn)


@_jit
def _draw_rows(logits, logit_bits, probs, prob_bits, u, top_p, out):
    """Each row's token into out (N,), -1 where its candidates do not settle it."""
    n, v = logits.shape
    cand = np.empty(v, np.int64)  # candidates, vocabulary order
    group = np.empty(v, np.int64)  # each candidate's group: binades below the row's largest
    desc = np.empty(v, np.int64)  # candidates by group, then sorted most likely first
    keys = np.empty(v, np.int64)  # scratch for the sort
    cdf = np.empty(v, np.float64)
    starts = np.empty(WIDE_BINADES + 1, np.int64)
    for r in range(n):
        for binades in (BINADES, WIDE_BINADES):
            out[r] = _cut(logits[r], logit_bits[r], probs[r], prob_bits[r], u[r], top_p, binades,
                          cand, group, desc, keys, cdf, starts)
            if out[r] >= 0:
                break


@_jit
def _sort_desc(lbits, desc, lo, hi, keys):
    """Sort desc[lo:hi] (token ids) by logit, descending, ties by id: as packed int64 keys
    (descending float order << _ID_BITS | id), by insertion when few, else np.sort."""
    m = hi - lo
    for k in range(m):
        i = desc[lo + k]
        bits = np.int64(lbits[i])
        order = bits if bits >= 0 else bits ^ 0x7FFFFFFF  # float order as signed ints
        keys[k] = ((0x7FFFFFFF - order) << _ID_BITS) | i
    if m <= INSERTION_SORT_MAX:
        for k in range(1, m):
            x = keys[k]
            q = k
            while q > 0 and keys[q - 1] > x:
                keys[q] = keys[q - 1]
                q -= 1
            keys[q] = x
        ordered = keys[:m]
    else:
        ordered = np.sort(keys[:m])
    for k in range(m):
        desc[lo + k] = ordered[k] & ((1 << _ID_BITS) - 1)


@_jit
def _cut(lr, lbits, pr, pbits, ur, top_p, binades, cand, group, desc, keys, cdf, starts):
    """One row: its drawn token, or -1 when its candidates (``binades`` powers of two below its
    most likely token) do not settle it."""
    v = lr.shape[0]
    top = 0  # the largest probability's bits (non-negative floats order as their bits)
    for i in range(v):
        top = max(top, pbits[i])
    top_exponent = top >> 23
    if top == 0 or top_exponent == 255:  # a NaN row
        return -1
    # the candidates in vocabulary order, and their groups counted
    for b in range(binades + 1):
        starts[b] = 0
    m = 0
    for i in range(v):
        b = top_exponent - (pbits[i] >> 23)
        if b < binades:
            cand[m] = i
            group[m] = b
            starts[b + 1] += 1
            m += 1
    for b in range(binades):
        starts[b + 1] += starts[b]
    # counting sort into the groups (vocabulary order within each); starts shift by one group
    for k in range(m):
        b = group[k]
        desc[starts[b]] = cand[k]
        starts[b] += 1
    # group b now spans [starts[b - 1], starts[b]); the cumulative probability in descending
    # order (float64 sums read as float32); the kept count is 1 + how many of the first m - 1
    # sums are within top_p
    acc = 0.0
    within = 0
    passed = False
    lo = 0
    for b in range(binades):
        hi = starts[b]
        _sort_desc(lbits, desc, lo, hi, keys)
        for k in range(lo, hi):
            acc += pr[desc[k]]
            if np.float32(acc) > top_p:
                passed = True
                break
            if k < m - 1:
                within += 1
        if passed:
            break
        lo = hi
    if not passed:
        return -1  # the candidates fall short
    threshold = lr[desc[within]]
    # inverse CDF over the kept tokens (logit >= threshold) in vocabulary order
    n = 0
    total = 0.0
    last = -1
    for k in range(m):
        i = cand[k]
        if lr[i] >= threshold:
            total += np.float64(pr[i])
            cdf[n] = total
            desc[n] = i
            n += 1
            last = i
    target = ur * total
    for k in range(n):
        if cdf[k] > target:
            return desc[k]
    return last
