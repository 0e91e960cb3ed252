"""The replica's batching policy (``service.replica.policy.BatchingPolicy``): each knob's device
default when its setting is unset, the setting over it, the live ``user_config`` over both, and
which live batches join a shared decode step."""

from __future__ import annotations

import pytest

from service.common.settings import Settings
from service.replica.policy import BatchingPolicy


def _policy(device: str, user_config=None, **settings) -> BatchingPolicy:
    return BatchingPolicy.for_replica(Settings(**settings), device, 1 << 30, 10_000, user_config)


@pytest.mark.parametrize(
    ("device", "rows", "prefill"), [("cpu", 20, 2048), ("cuda:0", 4096, 32768)]
)
def test_unset_knobs_take_the_device_default(device, rows, prefill):
    policy = _policy(device)
    assert (policy.max_step_rows, policy.max_prefill_tokens) == (rows, prefill)
    # a request's batches share steps with each other on a GPU, not on a CPU
    assert policy.share_within_request == device.startswith("cuda")
    assert policy.max_batch_tokens == 10_000 and policy.budget_bytes == 1 << 30


def test_a_setting_overrides_the_default_and_zero_turns_sharing_off():
    assert _policy("cpu", max_step_rows=64).max_step_rows == 64
    assert _policy("cuda:0", max_step_rows=0).max_step_rows == 0
    assert _policy("cpu", share_steps_within_request=True).share_within_request is True
    assert _policy("cuda:0", share_steps_within_request=False).share_within_request is False


@pytest.mark.parametrize(("live", "expected"), [(8, 8), (0, 0), (None, 0)])
def test_the_live_user_config_overrides_the_setting(live, expected):
    policy = _policy("cpu", {"max_step_rows": live}, max_step_rows=64)
    assert policy.max_step_rows == expected


def test_other_batches_join_in_priority_order_while_the_step_stays_within_the_cap():
    policy = BatchingPolicy(max_step_rows=32)
    # picked 5 rows; others (in priority order) 10, 20, 10, 3 rows: 5+10, +20 too many, +10, +3
    assert policy.shares(5, [10, 20, 10, 3]) == [0, 2, 3]
    assert policy.shares(40, [1]) == []  # a picked batch over the cap steps alone
    assert BatchingPolicy(max_step_rows=0).shares(1, [1]) == []


def test_batches_of_a_request_already_in_the_step_stay_out_unless_the_policy_lets_them_in():
    apart = BatchingPolicy(max_step_rows=32, share_within_request=False)
    big, small, other = frozenset({"big"}), frozenset({"small"}), frozenset({"other"})
    # picked: a part of "big"; others: another part of "big", "small", a batch carrying both
    # "other" and "big", then "other"
    requests = [big, small, other | big, other]
    assert apart.shares(10, [10, 5, 2, 3], big, requests) == [1, 3]
    # picked "small": one part of "big" joins, the next part of "big" stays out
    assert apart.shares(5, [10, 10, 3], small, [big, big, other]) == [0, 2]
    together = BatchingPolicy(max_step_rows=32, share_within_request=True)
    assert together.shares(5, [10, 10, 3], small, [big, big, other]) == [0, 1, 2]
