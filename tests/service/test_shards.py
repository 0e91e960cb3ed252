import numpy as np
import pytest
import torch
from service_fakes import FakePredictor, make_key, make_shard

from service.shards import BatchRunner, TooLargeError, is_out_of_memory, plan_shards, shard_tokens


def _sizes(slices):
    return [s.stop - s.start for s in slices]


def test_plan_covers_request_in_order():
    slices = plan_shards([100] * 1000, 10, 1, fit=lambda L: 10_000, num_replicas=2, shards_per_replica=2)
    assert _sizes(slices) == [250] * 4
    assert slices[0].start == 0 and slices[-1].stop == 1000
    assert all(a.stop == b.start for a, b in zip(slices, slices[1:], strict=False))


def test_plan_capped_by_memory_model_of_longest_series():
    seen = []

    def fit(lookback):
        seen.append(lookback)
        return 7

    slices = plan_shards([5, 50, 20] * 10, 4, 3, fit=fit, num_replicas=1, shards_per_replica=1)
    assert seen == [50]
    assert max(_sizes(slices)) == 7 and sum(_sizes(slices)) == 30


def test_plan_capped_by_token_budget():
    # each series: 2 samples x (10 + 5) = 30 tokens; 100 tokens -> 3 series per shard
    slices = plan_shards([10] * 10, 5, 2, fit=lambda L: 1000, num_replicas=1, shards_per_replica=1, max_batch_tokens=100)
    assert _sizes(slices) == [3, 3, 3, 1]


def test_plan_rejects_a_series_that_cannot_fit():
    with pytest.raises(TooLargeError, match="lookback=64"):
        plan_shards([64], 8, 1, fit=lambda L: 0, num_replicas=1)
    with pytest.raises(TooLargeError, match="token budget"):
        plan_shards([64], 8, 1, fit=lambda L: 10, num_replicas=1, max_batch_tokens=50)


def test_plan_empty_and_tiny():
    assert plan_shards([], 4, 1, fit=lambda L: 1, num_replicas=2) == []
    assert _sizes(plan_shards([3], 4, 1, fit=lambda L: 10, num_replicas=4)) == [1]


def test_shard_tokens():
    assert shard_tokens([10, 20], 5, 3) == 3 * 15 + 3 * 25
    assert make_shard(2, length=10, key=make_key(horizon=4, sample_count=2)).tokens == 2 * 2 * 14


def test_batch_runner_coalesces_compatible_shards_and_slices_back():
    pred = FakePredictor()
    runner = BatchRunner(pred, "r1", "cpu")
    shards = [make_shard(3, index=0, start=0), make_shard(2, index=1, start=100)]
    results, report = runner.run(shards, queue_depth=5)
    assert pred.calls == [5]  # one engine call for both shards
    assert [r.index for r in results] == [0, 1]
    np.testing.assert_allclose(results[0].mean[:, 0, 0], [0, 1, 2])
    np.testing.assert_allclose(results[1].mean[:, 0, 0], [100, 101])
    assert report.series == 5 and report.shards == 2 and report.queue_depth == 5
    assert report.tokens_generated == 5 * 4 and report.mem_peak > 0


def test_batch_runner_groups_by_sampling_options():
    pred = FakePredictor()
    runner = BatchRunner(pred, "r1", "cpu")
    shards = [make_shard(2, 0), make_shard(3, 1, key=make_key(seed=7)), make_shard(1, 2)]
    results, report = runner.run(shards)
    assert sorted(pred.calls) == [3, 3]
    assert [r.index for r in results] == [0, 1, 2]
    assert [r.mean.shape[0] for r in results] == [2, 3, 1]


def test_batch_runner_passes_the_options_whole_with_the_calibration_only_when_asked():
    pred = FakePredictor()
    runner = BatchRunner(pred, "r1", "cpu")
    runner.calibration = calibration = object()  # stands for the replica's Calibration
    key = make_key(horizon=3, sample_count=2, temperature=0.7, top_k=5, top_p=0.8, seed=9, quantiles=(0.1, 0.9),
                   repair=True)
    runner.run([make_shard(1, 0, key=key), make_shard(1, 1, key=make_key(calibrate=True, quantiles=(0.5,)))])
    plain, calibrated = pred.options
    assert (plain.horizon, plain.sample_count, plain.temperature, plain.top_k, plain.top_p, plain.seed,
            plain.quantiles, plain.repair, plain.calibration) == (3, 2, 0.7, 5, 0.8, 9, (0.1, 0.9), True, None)
    assert calibrated.calibration is calibration and calibrated.quantiles == (0.5,)


def _cpu_oom() -> RuntimeError:
    try:
        torch.empty(2**62, dtype=torch.uint8)
    except RuntimeError as exc:
        return exc
    raise AssertionError("allocating 2**62 bytes on CPU succeeded")


def test_out_of_memory_is_recognised_on_cpu_and_cuda():
    cpu = _cpu_oom()
    assert type(cpu) is RuntimeError and "DefaultCPUAllocator" in str(cpu)  # torch gives no own type
    assert is_out_of_memory(cpu)
    assert is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert is_out_of_memory(torch.OutOfMemoryError("allocation failed"))  # by type, whatever the text
    assert not is_out_of_memory(RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x6 and 7x8)"))
    assert not is_out_of_memory(ValueError("DefaultCPUAllocator: can't allocate memory"))


@pytest.mark.parametrize("oom", ["cpu", "cuda"])
def test_batch_runner_splits_on_oom_and_keeps_order(oom):
    pred = FakePredictor(oom_above=2, oom=oom)
    runner = BatchRunner(pred, "r1", "cpu")
    shards = [make_shard(3, 0, start=0, key=make_key(quantiles=(0.1, 0.9), return_paths=True)),
              make_shard(4, 1, start=10, key=make_key(quantiles=(0.1, 0.9), return_paths=True))]
    results, report = runner.run(shards)
    assert report.oom_splits >= 2 and max(c for c in pred.calls[1:]) <= 7
    np.testing.assert_allclose(results[0].mean[:, 0, 0], [0, 1, 2])
    np.testing.assert_allclose(results[1].mean[:, 0, 0], [10, 11, 12, 13])
    assert results[1].quantiles.shape == (2, 4, 4, 6) and results[1].paths.shape == (4, 1, 4, 6)
    np.testing.assert_allclose(results[1].quantiles[1, :, 0, 0], np.array([10, 11, 12, 13]) * 1.9, rtol=1e-6)


def test_batch_runner_single_series_oom_fails_only_that_group():
    pred = FakePredictor(oom_above=0)
    runner = BatchRunner(pred, "r1", "cpu")
    results, _ = runner.run([make_shard(2, 0), make_shard(1, 1, key=make_key(seed=3))])
    assert pred.calls == [2, 1, 1]  # group 1 split to a single series that still fails; group 2 alone
    assert all(r.error and "can't allocate memory" in r.error and r.mean is None for r in results)
    cuda = BatchRunner(FakePredictor(oom_above=0, oom="cuda"), "r1", "cpu").run([make_shard(1, 0)])[0][0]
    assert cuda.error.startswith("OutOfMemoryError")


class ShapeBug(FakePredictor):
    def forecast(self, series, *a, **kw):
        self.calls.append(len(series))
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x6 and 7x8)")


def test_batch_runner_does_not_split_other_errors():
    pred = ShapeBug()
    results, report = BatchRunner(pred, "r1", "cpu").run([make_shard(4, 0)])
    assert pred.calls == [4] and report.oom_splits == 0
    assert results[0].error.startswith("RuntimeError: mat1 and mat2")


def test_cuda_replica_frees_its_cache_before_retrying_halves(monkeypatch):
    freed = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: freed.append(True))
    BatchRunner(FakePredictor(oom_above=2, oom="cuda"), "r1", "cuda:0").run([make_shard(4, 0)])
    assert len(freed) == 1  # one split of 4 into 2 + 2
    BatchRunner(FakePredictor(oom_above=2), "r1", "cpu").run([make_shard(4, 0)])
    assert len(freed) == 1  # nothing to free on CPU


def test_plan_with_room_for_exactly_one_series_per_shard():
    """A replica that fits one long series (memory or token budget) still gets work, one each."""
    assert _sizes(plan_shards([64] * 3, 8, 1, fit=lambda L: 1, num_replicas=1, shards_per_replica=1)) == [1, 1, 1]
    # 72 tokens per series, budget 72: exactly one
    assert _sizes(plan_shards([64] * 3, 8, 1, fit=lambda L: 99, num_replicas=1, shards_per_replica=1,
                              max_batch_tokens=72)) == [1, 1, 1]
    with pytest.raises(TooLargeError, match="does not fit one replica's device budget"):
        plan_shards([64], 8, 1, fit=lambda L: 0, num_replicas=1)


def test_plan_one_replica_one_shard_and_the_default_split():
    assert _sizes(plan_shards([10] * 5, 4, 1, fit=lambda L: 99, num_replicas=1, shards_per_replica=1)) == [5]
    # default: two shards per replica
    assert _sizes(plan_shards([10] * 12, 4, 1, fit=lambda L: 99, num_replicas=2)) == [3, 3, 3, 3]
