"""Fakes for the service unit tests (imported as ``service_fakes``): they stand in for the store,
the replicas and the engine so that the gateway, sharding, batching and metrics logic run without a
model or Ray. Each implements the protocol of ``service.common.interfaces`` that the production
piece does (``tests/service/test_interfaces.py`` checks it). The real pieces are exercised in
tests/integration/."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from kronos_core.base.errors import ErrorCode
from kronos_core.base.options import ForecastOptions
from kronos_core.data.store_reader import SymbolWindow
from service.common.errors import ReplicaGone
from service.common.messages import BatchReport, ReplicaInfo, Shard, ShardResult
from service.common.metrics import Metrics
from service.common.settings import Settings
from service.gateway import ForecastPipeline, FutureTimestamps
from service.replica.step_runner import StepRunner


@dataclass
class FakeSymbolError:
    """A ``SymbolFailure``."""

    symbol: str
    code: ErrorCode
    message: str


@dataclass
class FakeWindowBatch:
    """``Windows``: what ``FakeStore.read_windows`` returns."""

    windows: list[SymbolWindow]  # the real value type: a fake of it would buy nothing
    errors: list[FakeSymbolError] = field(default_factory=list)
    store_version: int = 0

    @property
    def symbols(self):
        return [w.symbol for w in self.windows]


class FakeStore:
    """A ``CandleStore``: symbols S000..S{n-1}; hourly candles whose close encodes the symbol
    number. ``as_of`` (naive) cuts the history like the real store."""

    def __init__(self, n: int = 20, length: int = 300, root: str = "/srv/fake-store"):
        self.n, self.length, self.root = n, length, root
        self.version = 0  # one version: the fake's data never changes
        self.idx = pd.date_range("2024-01-01", periods=length, freq="h")

    def symbols(self, frequency=None):
        return [f"S{i:03d}" for i in range(self.n)]

    def metadata(self, symbol, frequency=None):
        if symbol not in self.symbols():
            raise KeyError(symbol)
        return {
            "frequency": "1h", "timezone": None, "first": str(self.idx[0]),
            "last": str(self.idx[-1]),
        }

    def read_windows(self, symbols, lookback, as_of=None, frequency=None):
        windows, errors = [], []
        end = (
            self.length
            if as_of is None
            else int(self.idx.searchsorted(pd.Timestamp(as_of), "right"))
        )
        for s in symbols:
            if s not in self.symbols():
                errors.append(
                    FakeSymbolError(s, ErrorCode.UNKNOWN_SYMBOL, f"{s} is not in the store")
                )
                continue
            if end == 0:
                errors.append(
                    FakeSymbolError(s, ErrorCode.NO_DATA, f"{s}: no candles at or before {as_of}")
                )
                continue
            k = int(s[1:])
            v = np.full((end, 6), 100.0 + k, np.float32)
            ts = self.idx[:end][-lookback:].to_numpy(dtype="datetime64[ns]")
            windows.append(SymbolWindow(s, v[-lookback:], ts, {"timezone": None},
                                        self.idx[-1].to_datetime64(), held=end))
        return FakeWindowBatch(windows, errors)


def fake_future(history: pd.DatetimeIndex, horizon: int) -> pd.DatetimeIndex:
    step = history[-1] - history[-2]
    return pd.DatetimeIndex([history[-1] + step * (i + 1) for i in range(horizon)])


@dataclass
class FakeResult:
    """An ``EngineResult``."""

    paths: np.ndarray
    mean: np.ndarray
    quantiles: np.ndarray
    stats: object


@dataclass
class FakeStats:
    tokens_generated: int


class FakePredictor:
    """A ``ForecastEngine``. forecast(): each series' forecast = its last close, so results identify
    their inputs. Above ``oom_above`` series it runs out of memory for real: ``oom="cpu"`` asks the
    CPU allocator for 2**62 bytes (a plain RuntimeError, "DefaultCPUAllocator: can't allocate
    memory ..."), ``oom="cuda"`` raises torch.OutOfMemoryError (what CUDA raises; no GPU here)."""

    def __init__(self, oom_above: int | None = None, oom: str = "cpu"):
        self.oom_above = oom_above
        self.oom = oom
        self.calls: list[int] = []
        self.options: list[ForecastOptions] = []  # what each call was given
        self.price_limits: list = []  # the price-limit rules each call was given
        # a ForecastEngine's model identity: none, as a predictor not built by the loader
        self.identity = None

    def forecast(
        self, series, x_timestamps, y_timestamps, options: ForecastOptions, *, series_keys=None,
        price_limits=None, verbose=False,
    ):
        import torch

        horizon, sample_count, quantiles = options.horizon, options.sample_count, options.quantiles
        self.options.append(options)
        self.price_limits.append(price_limits)
        self.calls.append(len(series))
        if self.oom_above is not None and len(series) > self.oom_above:
            if self.oom == "cpu":
                torch.empty(2**62, dtype=torch.uint8)  # raises the CPU allocator's RuntimeError
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        last = np.stack([s[-1] for s in series]).astype(np.float32)  # (B, 6)
        # (B, S, H, 6)
        paths = np.repeat(last[:, None, None, :], sample_count, 1).repeat(horizon, 2)
        mean = paths.mean(1)
        q = (
            np.stack([mean * (1 + lv) for lv in quantiles])
            if quantiles
            else np.zeros((0,) + mean.shape, np.float32)
        )
        return FakeResult(paths, mean, q, FakeStats(len(series) * sample_count * horizon))

    def start_forecast(
        self, series, x_timestamps, y_timestamps, options: ForecastOptions, *, series_keys=None,
        price_limits=None, verbose=False,
    ) -> OneStepJob:
        """The whole ``forecast`` as one step (its out-of-memory error raised at that step)."""
        return OneStepJob(self, series, x_timestamps, y_timestamps, options, price_limits)

    def step_together(self, jobs) -> None:
        """Each job's step in turn (a fake job's steps share nothing)."""
        for job in jobs:
            job.step()


class OneStepJob:
    """A ``ForecastJob`` of a fake engine: the whole ``forecast`` call is its one step."""

    def __init__(self, predictor, series, x_ts, y_ts, options: ForecastOptions,
                 price_limits=None):
        self._call = (predictor, series, x_ts, y_ts, options)
        self._price_limits = price_limits
        self.rows = len(series) * options.sample_count
        self.steps_left = 1
        self.done = False
        self.shares_steps = False  # its one step is the whole forecast
        self._result = None

    def step(self) -> None:
        predictor, series, x_ts, y_ts, options = self._call
        self._result = predictor.forecast(series, x_ts, y_ts, options,
                                          price_limits=self._price_limits)
        self.steps_left, self.done = 0, True

    def close(self) -> None:
        self._result = None

    def result(self):
        return self._result


def make_options(**kw) -> ForecastOptions:
    """Forecast options of a test shard: horizon 4, one sample, unless ``kw`` says otherwise."""
    return ForecastOptions(**{"horizon": 4, **kw})


def make_shard(
    n: int, index: int = 0, length: int = 10, options: ForecastOptions | None = None,
    start: float = 0.0, request_id: str = "r", return_paths: bool = False, calibrate: bool = False,
) -> Shard:
    options = options or make_options()
    ts = pd.date_range("2024-01-01", periods=length, freq="h").to_numpy()
    yts = pd.date_range(ts[-1], periods=options.horizon + 1, freq="h")[1:].to_numpy()
    values = [np.full((length, 6), start + i, np.float32) for i in range(n)]
    return Shard(request_id, index, values, [ts] * n, [yts] * n, options, return_paths=return_paths,
                 calibrate=calibrate)


def run_shards(
    runner: StepRunner, shards: list[Shard]
) -> tuple[list[ShardResult], list[BatchReport]]:
    """Run ``shards`` through ``runner`` as the replica does (submitted together: with no batch wait
    they coalesce at the first tick), until it is idle: (their results in shard order, the reports
    taken, one ``BatchReport`` per job it ran)."""
    assert runner.policy.batch_wait_timeout_s == 0, (
        "shards submitted together must coalesce at one tick"
    )
    results: list[ShardResult | None] = [None] * len(shards)
    for i, shard in enumerate(shards):
        runner.submit(shard, lambda res, i=i: results.__setitem__(i, res))
    runner.run_until_idle()
    missing = [i for i, res in enumerate(results) if res is None]
    assert not missing, f"shards {missing} got no answer"
    return [res for res in results if res is not None], runner.take_reports()


def fake_info(
    budget: int = 1 << 30, max_context: int = 64, max_batch_tokens: int = 1 << 20
) -> ReplicaInfo:
    return ReplicaInfo("fake-replica", "cpu", budget, max_batch_tokens, max_context, None, None,
                       {"name": "fake", "bundled": True})


def fake_gateway(replicas=None, num_replicas: int = 2, **settings):
    """(gateway, metrics, replicas): a ForecastPipeline over ``FakeStore`` and ``replicas`` (default
    ``FakeReplicas``), 2 replicas, shards of at most 3 series (no floor: min_shard_tokens 0), fake
    future timestamps."""
    replicas = replicas or FakeReplicas()
    s = Settings(**{"max_context": 64, "shards_per_replica": 2, "min_shard_tokens": 0, **settings})
    m = Metrics()
    gw = ForecastPipeline(
        s, FakeStore(), replicas, m, num_replicas=num_replicas,
        fit_factory=lambda info, h, sc: lambda L: 3, future=FutureTimestamps(fake_future),
    )
    return gw, m, replicas


def sample_value(m: Metrics, name, labels=None) -> float:
    """A metric's value, 0 when it was never set."""
    v = m.registry.get_sample_value(name, labels or {})
    return 0.0 if v is None else v


class FakeReplicas:
    """``Replicas``: forecast_shard() runs the shard through a real StepRunner + FakePredictor;
    the first ``die_first`` calls raise ReplicaGone; each call can be delayed."""

    def __init__(self, die_first: int = 0, delay: float = 0.0, info: ReplicaInfo | None = None):
        self.runner = StepRunner(FakePredictor(), "fake-replica", "cpu")
        self.die_first = die_first
        self.delay = delay
        self.info = info or fake_info()
        self.calls = 0

    async def forecast_shard(self, shard: Shard) -> ShardResult:
        self.calls += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.calls <= self.die_first:
            raise ReplicaGone("ActorDiedError: killed")
        results, reports = run_shards(self.runner, [shard])
        results[0].reports = reports
        return results[0]

    async def describe(self) -> ReplicaInfo:
        return self.info


class RoutedReplicas:
    """``Replicas`` shaped like a Serve handle over named replicas: each call goes to the
    replica holding the fewest calls (Serve's power-of-two choice, which with two replicas
    compares both queues), ties to the first listed. ``delays``: seconds a replica takes to
    answer, None for one that never answers (only cancellation ends its calls). Records (shard
    index, replica) of every call sent, answered and cancelled, and when each was sent."""

    def __init__(
        self, delays: dict[str, float | None] | None = None, info: ReplicaInfo | None = None
    ):
        self.runner = StepRunner(FakePredictor(), "fake-replica", "cpu")
        self.delays = delays if delays is not None else {"slow": None, "fast": 0.005}
        self.ongoing = dict.fromkeys(self.delays, 0)
        self.info = info or fake_info()
        self.sent: list[tuple[int, str]] = []
        self.sent_at: list[float] = []  # event-loop time of each call in ``sent``
        self.answered: list[tuple[int, str]] = []
        self.cancelled: list[tuple[int, str]] = []

    async def forecast_shard(self, shard: Shard) -> ShardResult:
        # fewest calls held; ties: first listed
        name = min(self.ongoing, key=lambda n: self.ongoing[n])
        self.ongoing[name] += 1
        self.sent.append((shard.index, name))
        self.sent_at.append(asyncio.get_running_loop().time())
        try:
            if self.delays[name] is None:
                await asyncio.Event().wait()
            await asyncio.sleep(self.delays[name])
        except asyncio.CancelledError:
            self.cancelled.append((shard.index, name))
            raise
        finally:
            self.ongoing[name] -= 1
        results, reports = run_shards(self.runner, [shard])
        results[0].reports = reports
        self.answered.append((shard.index, name))
        return results[0]

    async def describe(self) -> ReplicaInfo:
        return self.info
