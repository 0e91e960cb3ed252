"""Sampling: filtering semantics, greedy, and the counter-based seeded generator."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kronos_core.engine.sampling import (
    TOP_P_CANDIDATES,
    SamplingParams,
    _splitmix64,
    _top_p_kept_by_sort,
    _top_p_kept_from_candidates,
    counter_uniforms,
    filter_logits,
    row_keys,
    sample_tokens,
)


def test_top_k_keeps_exactly_k():
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.0, -1.0]])
    out = filter_logits(logits, SamplingParams(top_k=2, top_p=0.5))  # top_p ignored when top_k > 0
    assert torch.isfinite(out).tolist() == [[False, True, False, True, False]]


def test_top_p_keeps_smallest_set_reaching_p():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    logits = probs.log()
    kept = torch.isfinite(filter_logits(logits, SamplingParams(top_p=0.7)))
    assert kept.tolist() == [[True, True, False, False]]  # 0.5 < 0.7, 0.5 + 0.3 reaches it
    kept = torch.isfinite(filter_logits(logits, SamplingParams(top_p=0.4)))
    assert kept.tolist() == [[True, False, False, False]]  # the most likely token is always kept
    kept = torch.isfinite(filter_logits(logits, SamplingParams(top_p=1.0)))
    assert kept.all()


@pytest.mark.parametrize("sharpness", [0.5, 2.0, 4.0, 8.0])
def test_top_p_from_candidates_keeps_the_set_a_whole_row_sort_keeps(sharpness):
    """The CPU path sorts only the most likely logits; on rows peaked enough for them to reach
    top_p it keeps exactly the tokens sorting the whole row keeps, and the other rows take the
    sort's set. The sharpnesses cover batches where every row, some rows and no row reach it."""
    gen = torch.Generator().manual_seed(7)
    logits = torch.randn(64, 1024, generator=gen) * sharpness  # (N, V)
    reached = []
    for top_p in (0.5, 0.9, 0.99):
        fast = _top_p_kept_from_candidates(logits, top_p)
        by_sort = _top_p_kept_by_sort(logits, top_p)
        top = logits.softmax(-1).topk(TOP_P_CANDIDATES, dim=-1).values.sum(-1)  # (N,)
        reached.append(float((top > top_p).float().mean()))
        assert torch.equal(fast, by_sort)
        assert torch.equal(filter_logits(logits, SamplingParams(top_p=top_p)), by_sort)
    assert reached == sorted(reached, reverse=True)  # fewer rows reach a larger top_p


def test_a_rows_top_p_set_does_not_depend_on_the_rows_beside_it():
    """A flat row, whose 128 candidates fall short of top_p, beside peaked rows that reach it:
    each row keeps in the batch exactly what it keeps alone (a shared decode step samples the
    rows of several jobs together)."""
    gen = torch.Generator().manual_seed(3)
    peaked = torch.randn(6, 1024, generator=gen) * 8.0  # (6, V): candidates reach 0.9
    flat = torch.randn(2, 1024, generator=gen) * 0.1  # (2, V): they do not
    batch = torch.cat([peaked[:3], flat[:1], peaked[3:], flat[1:]])  # (8, V)
    params = SamplingParams(top_p=0.9)
    together = filter_logits(batch, params)
    alone = torch.cat([filter_logits(row[None], params) for row in batch])
    assert torch.equal(together, alone)
    assert torch.isfinite(together[3]).sum() > TOP_P_CANDIDATES  # the flat row: sorted whole
    assert torch.isfinite(together[0]).sum() < TOP_P_CANDIDATES


def test_temperature_scales_logits():
    logits = torch.tensor([[1.0, 2.0]])
    out = filter_logits(logits, SamplingParams(temperature=0.5, top_p=1.0))
    torch.testing.assert_close(out, torch.tensor([[2.0, 4.0]]))


def test_greedy_is_argmax():
    logits = torch.randn(16, 1024)
    assert torch.equal(sample_tokens(logits, SamplingParams(top_k=1), None), logits.argmax(-1))


def test_inverse_cdf_follows_the_distribution():
    probs = torch.tensor([0.1, 0.2, 0.7])
    logits = probs.log().expand(20000, 3)
    u = torch.from_numpy(np.random.default_rng(0).random(20000))
    tokens = sample_tokens(logits, SamplingParams(top_p=1.0), u)
    freq = torch.bincount(tokens, minlength=3).double() / 20000
    torch.testing.assert_close(freq, probs.double(), atol=0.015, rtol=0)


def test_counter_uniforms_depend_only_on_row_key():
    keys = row_keys(42, [11, 22, 33], sample_count=2)  # 6 rows
    assert len(set(keys.tolist())) == 6
    u_all = counter_uniforms(keys, step=5, kind=1)
    u_one = counter_uniforms(keys[3:4], step=5, kind=1)
    assert u_all[3].item() == u_one[0].item()
    assert ((u_all >= 0) & (u_all < 1)).all()
    assert not torch.equal(counter_uniforms(keys, 5, 0), u_all)
    assert not torch.equal(counter_uniforms(keys, 6, 1), u_all)
    # the same series key gives the same row keys whatever else is in the list
    assert row_keys(42, [22], 2).tolist() == keys[2:4].tolist()


@pytest.mark.parametrize(
    "bad, named",
    [
        (dict(temperature=0), "temperature"), (dict(top_k=-1), "top_k"), (dict(top_p=0), "top_p"),
        (dict(top_p=1.5), "top_p"),
    ],
)
def test_invalid_params(bad, named):
    with pytest.raises(ValueError, match=named):  # the message names the parameter and its value
        SamplingParams(**bad)


# --- the seeded generator, pinned: a change here changes every seeded forecast ever served ---

_M64 = (1 << 64) - 1


def _splitmix64_int(x: int) -> int:
    """SplitMix64's output function (Steele, Lea & Flood 2014; Vigna's splitmix64.c) in plain
    Python integers: the state after one golden-ratio increment, finalised."""
    z = (x + 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def test_splitmix64_matches_the_published_sequence():
    # the generator seeded with 0 yields 0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f:
    # output n is the finaliser applied to n golden-ratio increments of the state
    golden = 0x9E3779B97F4A7C15
    states = np.array([0, golden, (2 * golden) & _M64], dtype=np.uint64)
    assert _splitmix64(states).tolist() == [
        0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F,
    ]
    xs = np.random.default_rng(3).integers(0, 2**63, size=64, dtype=np.uint64) * np.uint64(
        2
    ) + np.uint64(1)
    assert _splitmix64(xs).tolist() == [_splitmix64_int(int(x)) for x in xs]


def test_row_keys_and_uniforms_follow_the_documented_construction():
    seed, series, paths = 2**40 + 7, [5, 2**63 + 9, 77], 3
    base = _splitmix64_int(seed)
    expected_keys = [_splitmix64_int(_splitmix64_int(k ^ base) ^ _splitmix64_int(p + base))
                     for k in series for p in range(paths)]  # series-major
    keys = row_keys(seed, series, paths)
    assert keys.tolist() == expected_keys
    for step, kind in [(0, 0), (0, 1), (13, 0), (200, 1)]:
        counter = _splitmix64_int((step << 1) | kind)
        want = [(_splitmix64_int(k ^ counter) >> 11) / 2**53 for k in expected_keys]
        assert counter_uniforms(keys, step, kind).tolist() == want


def test_counter_uniforms_fill_the_unit_interval():
    u = counter_uniforms(row_keys(0, list(range(500)), 8), step=3, kind=0)  # 4,000 draws
    assert 0 <= u.min() < 0.01 and 0.99 < u.max() < 1
    assert abs(u.mean().item() - 0.5) < 0.02


def test_top_k_of_one_and_of_three():
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.0, -1.0]])
    assert torch.isfinite(filter_logits(logits, SamplingParams(top_k=1))).tolist() == [
        [False, True, False, False, False]
    ]
    assert torch.isfinite(filter_logits(logits, SamplingParams(top_k=3))).tolist() == [
        [False, True, True, True, False]
    ]


def test_a_filtered_token_is_never_drawn_even_at_u_zero():
    # the two most likely tokens survive top-k; the first tokens of the vocabulary are filtered,
    # so the CDF starts flat at 0: u = 0 must land on the first kept token, not on token 0
    logits = torch.tensor([[-5.0, -4.0, 3.0, 2.0, -6.0]]).expand(3, 5)
    u = torch.tensor([0.0, 0.5, 1 - 2**-53], dtype=torch.float64)
    tokens = sample_tokens(logits, SamplingParams(top_k=2), u)
    assert tokens.tolist()[0] == 2 and set(tokens.tolist()) <= {2, 3} and tokens.tolist()[2] == 3


def test_the_candidates_draw_equals_the_whole_row_draw():
    """``_draw_from_candidates`` (the CPU's top-p draw from each row's most likely tokens) gives
    the tokens of the inverse-CDF draw over whole rows with the same kept set and weights: peaked
    rows, flat rows whose candidates fall short of top_p (drawn over the whole row), ties at the
    threshold, a NaN row, a temperature."""
    from kronos_core.engine.sampling import _draw_from_candidates, _inverse_cdf, _top_p_candidates

    g = torch.Generator().manual_seed(3)
    for trial in range(40):
        scale = [0.5, 2.0, 6.0, 12.0][trial % 4]  # flat ... peaked
        logits = torch.randn(96, 1024, generator=g) * scale
        if trial % 5 == 0:
            logits = logits.round()  # ties everywhere
        if trial % 7 == 0:
            logits[5] = float("nan")
        scaled = logits / (0.7 if trial % 3 == 0 else 1.0)
        u = torch.rand(96, generator=g, dtype=torch.float64)
        whole = _inverse_cdf(_top_p_candidates(scaled, 0.9)[1].double(), u)
        fast = _draw_from_candidates(scaled, 0.9, u)
        ok = ~torch.isnan(scaled).any(-1)
        assert torch.equal(fast[ok], whole[ok]), trial
        kept = _top_p_candidates(scaled, 0.9)[0]
        assert bool(kept[ok].gather(-1, fast[ok, None]).all())  # every token drawn was kept


def test_rows_settled_by_the_first_the_wider_or_no_candidates_draw_as_alone():
    """One batch whose rows settle at ``TOP_P_FIRST_CANDIDATES``, at ``TOP_P_CANDIDATES`` and at
    neither (whole row): each row draws the token it draws alone and the whole-row draw's."""
    from kronos_core.engine.sampling import (
        TOP_P_CANDIDATES,
        TOP_P_FIRST_CANDIDATES,
        _draw_from_candidates,
        _inverse_cdf,
        _top_p_candidates,
    )

    g = torch.Generator().manual_seed(4)
    scales = torch.tensor([12.0, 0.3, 2.5, 6.0, 0.3, 12.0, 2.5, 1.5] * 12)[:, None]  # (96, 1)
    logits = torch.randn(96, 1024, generator=g) * scales
    kept = torch.isfinite(filter_logits(logits, SamplingParams(top_p=0.9))).sum(-1)  # (96,)
    assert (kept <= TOP_P_FIRST_CANDIDATES).any()
    assert ((kept > TOP_P_FIRST_CANDIDATES) & (kept < TOP_P_CANDIDATES)).any()
    assert (kept > TOP_P_CANDIDATES).any()
    u = torch.rand(96, generator=g, dtype=torch.float64)
    together = _draw_from_candidates(logits, 0.9, u)
    whole = _inverse_cdf(_top_p_candidates(logits, 0.9)[1].double(), u)
    assert torch.equal(together, whole)
    alone = torch.cat([_draw_from_candidates(logits[i:i + 1], 0.9, u[i:i + 1]) for i in range(96)])
    assert torch.equal(together, alone)


def test_a_route_skips_a_first_cut_that_settles_few_rows_and_tries_it_again_later():
    """``CandidateRoute``: after a draw whose first candidates settled under half of the rows,
    the next ``REPROBE`` draws skip them, then try them again; a peaked head keeps them. Every
    draw gives the whole-row draw's tokens."""
    from kronos_core.engine.sampling import (
        CandidateRoute,
        _draw_from_candidates,
        _inverse_cdf,
        _top_p_candidates,
    )

    g = torch.Generator().manual_seed(6)
    flat, peaked = CandidateRoute(), CandidateRoute()
    skipped = []
    for _ in range(CandidateRoute.REPROBE + 2):
        for route, scale in ((flat, 2.0), (peaked, 12.0)):
            logits = torch.randn(64, 1024, generator=g) * scale
            u = torch.rand(64, generator=g, dtype=torch.float64)
            whole = _inverse_cdf(_top_p_candidates(logits, 0.9)[1].double(), u)
            assert torch.equal(_draw_from_candidates(logits, 0.9, u, route), whole)
        skipped.append(flat.skip_first)
        assert peaked.skip_first == 0
    # tried, then REPROBE draws skipped (counting down), then tried again and skipping anew
    assert skipped == [8, 7, 6, 5, 4, 3, 2, 1, 0, 8]
