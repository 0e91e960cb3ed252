"""The replica's batch execution (``service.replica.step_runner.StepRunner``) over the fake
engine whose jobs are one ``forecast`` call each (``service_fakes.OneStepJob``): shards coalesced by
options, results sliced back, out-of-memory halves retried, the CUDA cache freed before them. The
step-at-a-time side (preemption, cancellation, OOM at a job's start or mid-decode, other errors not
split) is in test_scheduler_runner.py."""

import numpy as np
import torch
from service_fakes import FakePredictor, make_options, make_shard, run_shards

from service.replica.memory import is_out_of_memory
from service.replica.step_runner import StepRunner


def test_batch_runner_coalesces_compatible_shards_and_slices_back():
    pred = FakePredictor()
    runner = StepRunner(pred, "r1", "cpu")
    shards = [make_shard(3, index=0, start=0), make_shard(2, index=1, start=100)]
    results, reports = run_shards(runner, shards)
    assert pred.calls == [5]  # one engine call for both shards
    assert [r.index for r in results] == [0, 1]
    np.testing.assert_allclose(results[0].mean[:, 0, 0], [0, 1, 2])
    np.testing.assert_allclose(results[1].mean[:, 0, 0], [100, 101])
    (report,) = reports  # one job
    assert (
        report.series == 5
        and report.shards == 2
        and report.engine_calls == 1
        and report.oom_splits == 0
    )
    assert report.queue_depth == 0  # nothing waiting behind it when it finished
    assert report.tokens_generated == 5 * 4 and report.mem_peak > 0


def test_batch_runner_groups_by_sampling_options():
    pred = FakePredictor()
    runner = StepRunner(pred, "r1", "cpu")
    shards = [make_shard(2, 0), make_shard(3, 1, options=make_options(seed=7)), make_shard(1, 2)]
    results, reports = run_shards(runner, shards)
    assert sorted(pred.calls) == [3, 3]  # shards 0 and 2 share their options: one job
    assert [r.index for r in results] == [0, 1, 2]
    assert [r.mean.shape[0] for r in results] == [2, 3, 1]
    assert sorted((rep.series, rep.shards) for rep in reports) == [(3, 1), (3, 2)]


class _StandInCalibration:
    """Stands for the replica's Calibration: one file for every series (no groups), paths kept."""

    members: dict = {}

    def correct_paths(self, paths, identity):
        return paths


def test_batch_runner_passes_the_options_whole_with_the_calibration_only_when_asked():
    pred = FakePredictor()
    runner = StepRunner(pred, "r1", "cpu")
    runner.calibration = calibration = _StandInCalibration()
    options = make_options(horizon=3, sample_count=2, temperature=0.7, top_k=5, top_p=0.8, seed=9,
                           quantiles=(0.1, 0.9), repair=True, sliding="rolling")
    results, _ = run_shards(runner, [make_shard(1, 0, options=options),
                                     make_shard(1, 1, options=options, calibrate=True)])
    # the calibrated shard too: the engine offers its identity
    assert [r.error for r in results] == [None, None]
    plain, calibrated = sorted(pred.options, key=lambda o: o.calibration is not None)
    # every option reaches the engine, as given
    assert plain == options and plain.calibration is None
    assert calibrated.calibration is calibration and calibrated.with_(calibration=None) == options


def _cpu_oom() -> RuntimeError:
    try:
        torch.empty(2**62, dtype=torch.uint8)
    except RuntimeError as exc:
        return exc
    raise AssertionError("allocating 2**62 bytes on CPU succeeded")


def test_out_of_memory_is_recognised_on_cpu_and_cuda():
    cpu = _cpu_oom()
    # torch gives no own type
    assert type(cpu) is RuntimeError and "DefaultCPUAllocator" in str(cpu)
    assert is_out_of_memory(cpu)
    assert is_out_of_memory(
        torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    )
    # by type, whatever the text
    assert is_out_of_memory(torch.OutOfMemoryError("allocation failed"))
    assert not is_out_of_memory(
        RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x6 and 7x8)")
    )
    assert not is_out_of_memory(ValueError("DefaultCPUAllocator: can't allocate memory"))


def test_batch_runner_splits_on_cpu_oom_and_keeps_order():
    """The CPU allocator's plain RuntimeError, raised at the job's one step, halves the job like
    torch.OutOfMemoryError (whose halving at start and mid-decode test_scheduler_runner.py
    checks)."""
    pred = FakePredictor(oom_above=2, oom="cpu")
    runner = StepRunner(pred, "r1", "cpu")
    shards = [
        make_shard(3, 0, start=0, options=make_options(quantiles=(0.1, 0.9)), return_paths=True),
        make_shard(4, 1, start=10, options=make_options(quantiles=(0.1, 0.9)), return_paths=True),
    ]
    results, reports = run_shards(runner, shards)
    # whole, then 3 + 4, 1 + 2, 2 + 2
    assert pred.calls[0] == 7 and sorted(pred.calls[1:]) == [1, 2, 2, 2, 3, 4]
    assert sum(rep.oom_splits for rep in reports) == 3
    # every series answered once
    assert sum(rep.series for rep in reports if rep.tokens_generated) == 7
    np.testing.assert_allclose(results[0].mean[:, 0, 0], [0, 1, 2])
    np.testing.assert_allclose(results[1].mean[:, 0, 0], [10, 11, 12, 13])
    assert results[1].quantiles.shape == (2, 4, 4, 6) and results[1].paths.shape == (4, 1, 4, 6)
    np.testing.assert_allclose(
        results[1].quantiles[1, :, 0, 0], np.array([10, 11, 12, 13]) * 1.9, rtol=1e-6
    )


def test_batch_runner_single_series_oom_fails_only_that_group():
    pred = FakePredictor(oom_above=0)
    runner = StepRunner(pred, "r1", "cpu")
    results, reports = run_shards(
        runner, [make_shard(2, 0), make_shard(1, 1, options=make_options(seed=3))]
    )
    # group 1 split to single series that still fail (a half whose shard already failed is not run);
    # group 2 alone
    assert sorted(pred.calls) == [1, 1, 2]
    assert all(r.error and "can't allocate memory" in r.error and r.mean is None for r in results)
    assert sum(rep.oom_splits for rep in reports) == 1  # only the two-series job was halved


def test_cuda_replica_frees_its_cache_before_retrying_halves(monkeypatch):
    freed = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: freed.append(True))
    run_shards(
        StepRunner(FakePredictor(oom_above=2, oom="cuda"), "r1", "cuda:0"), [make_shard(4, 0)]
    )
    assert len(freed) == 1  # one split of 4 into 2 + 2
    run_shards(StepRunner(FakePredictor(oom_above=2), "r1", "cpu"), [make_shard(4, 0)])
    assert len(freed) == 1  # nothing to free on CPU
