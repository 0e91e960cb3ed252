"""``KronosTokenizer.decode_after_shared_history``: the token-to-candle decoder over a series'
shared history once, then each path's own last tokens, against ``decode`` over whole windows."""

from __future__ import annotations

import pytest
import torch

from kronos_core.model.layers import KVCache


def _ids(*shape: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randint(0, 2**10, shape), torch.randint(0, 2**10, shape)


@pytest.mark.parametrize("pad", [None, torch.tensor([0, 3, 17])])
def test_it_gives_what_decode_gives_on_the_whole_windows(tiny, pad):
    _, tok = tiny
    torch.manual_seed(0)
    series, paths, history, horizon = 3, 4, 40, 6
    hist = _ids(series, history)
    new = _ids(series * paths, horizon)
    whole = [torch.cat([h.repeat_interleave(paths, 0), n], dim=1) for h, n in zip(hist, new)]
    whole_pad = None if pad is None else pad.repeat_interleave(paths)
    with torch.inference_mode():
        expected = tok.decode(*whole, whole_pad)[:, -horizon:]  # (N, H, 6)
        got = tok.decode_after_shared_history(hist, new, pad, paths)
    assert got.shape == (series * paths, horizon, 6)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    # the paths of a series differ in their own tokens only: different tokens, different candles
    assert not torch.allclose(got[0], got[1])


def test_no_history_is_decode_of_the_new_tokens(tiny):
    _, tok = tiny
    torch.manual_seed(1)
    new = _ids(6, 5)
    empty = (new[0][:2, :0], new[1][:2, :0])
    with torch.inference_mode():
        torch.testing.assert_close(
            tok.decode_after_shared_history(empty, new, None, 3), tok.decode(*new),
            rtol=1e-5, atol=1e-6,
        )


def test_rows_that_are_not_runs_of_paths_are_refused(tiny):
    _, tok = tiny
    with pytest.raises(ValueError, match="not 2 series x 3 paths"):
        tok.decode_after_shared_history(_ids(2, 8), _ids(5, 2), None, 3)


def test_a_cache_zeroes_the_slots_its_caller_does_not_fill_and_spreads_a_series_over_paths():
    cache = KVCache(6, 2, 10, 4, torch.float32, "cpu", written=7)
    k, v = torch.randn(2, 2, 7, 4), torch.randn(2, 2, 7, 4)
    cache.write_spread(k, v, paths=3)
    assert torch.equal(cache.k[:, :, :7], k.repeat_interleave(3, 0))
    assert torch.equal(cache.v[:, :, :7], v.repeat_interleave(3, 0))
    assert not cache.k[:, :, 7:].any() and not cache.v[:, :, 7:].any()
    full = KVCache(2, 2, 5, 4, torch.float32, "cpu")  # nothing written yet: all zero
    assert not full.k.any() and not full.v.any()
