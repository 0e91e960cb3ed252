"""The replica's batch execution (``service.batch_runner``): shards coalesced by options,
results sliced back, out-of-memory halves retried, other errors not."""

import numpy as np
import pytest
import torch
from service_fakes import FakePredictor, make_options, make_shard

from service.batch_runner import BatchRunner, is_out_of_memory


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
    shards = [make_shard(2, 0), make_shard(3, 1, options=make_options(seed=7)), make_shard(1, 2)]
    results, report = runner.run(shards)
    assert sorted(pred.calls) == [3, 3]
    assert [r.index for r in results] == [0, 1, 2]
    assert [r.mean.shape[0] for r in results] == [2, 3, 1]


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
    shards = [make_shard(3, 0, start=0, options=make_options(quantiles=(0.1, 0.9)), return_paths=True),
              make_shard(4, 1, start=10, options=make_options(quantiles=(0.1, 0.9)), return_paths=True)]
    results, report = runner.run(shards)
    assert report.oom_splits >= 2 and max(c for c in pred.calls[1:]) <= 7
    np.testing.assert_allclose(results[0].mean[:, 0, 0], [0, 1, 2])
    np.testing.assert_allclose(results[1].mean[:, 0, 0], [10, 11, 12, 13])
    assert results[1].quantiles.shape == (2, 4, 4, 6) and results[1].paths.shape == (4, 1, 4, 6)
    np.testing.assert_allclose(results[1].quantiles[1, :, 0, 0], np.array([10, 11, 12, 13]) * 1.9, rtol=1e-6)


def test_batch_runner_single_series_oom_fails_only_that_group():
    pred = FakePredictor(oom_above=0)
    runner = BatchRunner(pred, "r1", "cpu")
    results, _ = runner.run([make_shard(2, 0), make_shard(1, 1, options=make_options(seed=3))])
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
