"""``service.common.messages``: what crosses between gateway and replicas."""

from __future__ import annotations

import pytest
from service_fakes import make_options, make_shard

from service.common.messages import shard_tokens


def test_shard_tokens():
    assert shard_tokens([10, 20], 5, 3) == 3 * 15 + 3 * 25
    assert (
        make_shard(2, length=10, options=make_options(horizon=4, sample_count=2)).tokens
        == 2 * 2 * 14
    )


def test_a_shard_carries_no_calibration_and_is_sized_by_its_series():
    shard = make_shard(3, options=make_options(horizon=2), calibrate=True)
    assert shard.size == 3 and shard.calibrate and shard.options.calibration is None
    with pytest.raises(ValueError, match="calibrate=True"):
        make_shard(1, options=make_options(calibration=object()))
