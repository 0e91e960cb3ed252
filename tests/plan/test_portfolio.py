"""The portfolio workload's arithmetic (``kronos_core.plan.portfolio.forecast_flops``)."""

from __future__ import annotations

import pytest

from kronos_core.engine.memory import count_parameters
from kronos_core.model.config import KronosConfig, TokenizerConfig
from kronos_core.plan.portfolio import forecast_flops

CFG = KronosConfig(s1_bits=10, s2_bits=10, n_layers=4, d_model=128, n_heads=4, ff_dim=256)
TOK = TokenizerConfig(d_in=6, d_model=64, n_heads=4, ff_dim=128, n_enc_layers=3, n_dec_layers=3,
                      s1_bits=10, s2_bits=10)


def test_what_a_series_paths_share_is_counted_once():
    one = forecast_flops(CFG, TOK, [251] * 10, 5, 1, 256)
    many = forecast_flops(CFG, TOK, [251] * 10, 5, 32, 256)
    assert many.tokenize == one.tokenize and many.prefill == one.prefill
    assert many.decode == pytest.approx(32 * one.decode)
    # the history part of the token-to-candle window once, each path's horizon on its own
    per_token = count_parameters(TOK).linear  # 2 FLOPs a weight, half the weights decode
    assert many.detokenize == pytest.approx(10 * per_token * (251 + 32 * 5))
    assert many.total == pytest.approx(many.tokenize + many.prefill + many.decode
                                       + many.detokenize)


def test_the_prefill_counts_the_trunk_not_the_heads_and_grows_with_the_window():
    f = forecast_flops(CFG, TOK, [100], 1, 1, 256)
    counts = count_parameters(CFG)
    heads = 128 * (2**10 + 2**10)
    trunk = counts.linear - heads - 2 * 128 * 128
    assert f.prefill == pytest.approx(2 * 100 * trunk + 2 * 100**2 * 128 * 4)
    # a window longer than the context is cut to it
    assert forecast_flops(CFG, TOK, [400], 1, 1, 256).prefill == pytest.approx(
        forecast_flops(CFG, TOK, [256], 1, 1, 256).prefill
    )
    assert forecast_flops(CFG, TOK, [200], 1, 1, 256).prefill > f.prefill
