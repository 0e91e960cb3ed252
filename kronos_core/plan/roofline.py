"""Time estimates from a roofline: FLOPs and bytes of each phase against a device's peak figures.

Each phase (matrix products, element-wise/activation traffic, optimizer step,
decode step...) takes ``max(flops / (peak * COMPUTE_EFF), bytes / (bw * MEMORY_EFF))``
plus a fixed cost per kernel launch (``Device.op_overhead_s``); phases add up.
fp32 uses the FP32 (non-tensor-core) peak, as PyTorch keeps TF32 matmuls off
by default; bf16/fp16 use the dense tensor-core peak with FP32 accumulate.
The CPU has no datasheet here: ``probe_cpu`` measures its matmul rate and copy
bandwidth in about a second, and those measured rates serve as its peaks.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from kronos_core.engine.memory import count_parameters, shares_history
from kronos_core.model.config import KronosConfig, TokenizerConfig
from kronos_core.plan.planner import InferencePlan, TrainPlan

COMPUTE_EFF = 0.5  # assumed share of the peak FLOP rate real kernels reach (GPU)
# bytes/s between two nodes: 10 GbE, the slowest link a cluster is likely to have
NODE_LINK = 10 * 1e9 / 8
MEMORY_EFF = 0.7  # assumed share of the peak bandwidth
GB = 1e9


@dataclass(frozen=True)
class Device:
    name: str
    memory_bytes: int
    fp32_flops: float  # FLOP/s, FP32 (CUDA cores)
    half_flops: float  # FLOP/s, bf16/fp16 tensor cores, dense, FP32 accumulate
    bandwidth: float  # bytes/s of device memory
    link: float  # bytes/s one way between devices (all-reduce), PCIe 4.0 x16 where no NVLink
    source: str
    op_overhead_s: float = 5e-6  # per kernel launch
    compute_eff: float = COMPUTE_EFF
    memory_eff: float = MEMORY_EFF

    def flops(self, precision: str) -> float:
        return (self.fp32_flops if precision == "fp32" else self.half_flops) * self.compute_eff

    def bytes_per_s(self) -> float:
        return self.bandwidth * self.memory_eff

    @property
    def usable_bytes(self) -> int:
        """What tensors may use: minus the CUDA context (~0.5 GiB) and 5% allocator
        fragmentation."""
        if self.name == "cpu" or self.name == "budget":
            return self.memory_bytes
        return int(self.memory_bytes * 0.95 - 0.5 * 2**30)


PCIE4 = 32 * GB
# Sources: NVIDIA datasheets / architecture whitepapers (dense figures; the datasheets' "with
# sparsity" tensor numbers are twice these).
DEVICES: dict[str, Device] = {
    "rtx3080": Device(
        "rtx3080", 10 * 2**30, 29.8e12, 59.5e12, 760 * GB, PCIE4,
        "NVIDIA Ampere GA102 whitepaper (2020), GeForce RTX 3080 table",
    ),
    "rtx4090": Device(
        "rtx4090", 24 * 2**30, 82.6e12, 165.2e12, 1008 * GB, PCIE4,
        "NVIDIA Ada Lovelace architecture whitepaper (2022), GeForce RTX 4090 table",
    ),
    "a6000": Device(
        "a6000", 48 * 2**30, 38.7e12, 154.8e12, 768 * GB, 56 * GB,
        "NVIDIA RTX A6000 datasheet (2021); NVLink bridge 112.5 GB/s both ways",
    ),
    "a100-40gb": Device(
        "a100-40gb", 40 * 2**30, 19.5e12, 312e12, 1555 * GB, 300 * GB,
        "NVIDIA A100 Tensor Core GPU datasheet (2021), SXM4 40GB; NVLink 600 GB/s both ways",
    ),
    "a100-80gb": Device(
        "a100-80gb", 80 * 2**30, 19.5e12, 312e12, 2039 * GB, 300 * GB,
        "NVIDIA A100 Tensor Core GPU datasheet (2021), SXM4 80GB; NVLink 600 GB/s both ways",
    ),
    "h100": Device(
        "h100", 80 * 2**30, 67e12, 989.4e12, 3350 * GB, 450 * GB,
        "NVIDIA H100 Tensor Core GPU datasheet (2023), SXM5; NVLink 900 GB/s both ways",
    ),
    "h200": Device(
        "h200", 141 * 10**9, 67e12, 989.4e12, 4800 * GB, 450 * GB,
        "NVIDIA H200 Tensor Core GPU datasheet (2024), SXM; NVLink 900 GB/s both ways",
    ),
}


def probe_cpu(seconds: float = 0.5, clock=time.perf_counter) -> Device:
    """This machine's CPU as a ``Device``: measured fp32 matmul rate and copy bandwidth, available
    RAM.

    ``clock=time.process_time`` (with one torch thread) measures CPU time, which
    other processes sharing the machine do not inflate.
    """
    import psutil
    import torch

    a, b = torch.randn(512, 512), torch.randn(512, 512)
    a @ b
    n, t0 = 0, clock()
    while clock() - t0 < seconds / 2:
        a @ b
        n += 1
    flops = n * 2 * 512**3 / (clock() - t0)
    src, dst = torch.randn(8 * 2**20), torch.empty(8 * 2**20)  # 32 MiB each
    dst.copy_(src)
    n, t0 = 0, clock()
    while clock() - t0 < seconds / 2:
        dst.copy_(src)
        n += 1
    bandwidth = n * 2 * src.numel() * 4 / (clock() - t0)
    a, b = a.bfloat16(), b.bfloat16()  # bf16 matmul: fast only where the CPU has AMX / AVX512-BF16
    a @ b
    n, t0 = 0, clock()
    while clock() - t0 < seconds / 4:
        a @ b
        n += 1
    half = n * 2 * 512**3 / (clock() - t0)
    x, y = torch.randn(64), torch.randn(64)
    n, t0 = 0, clock()
    while clock() - t0 < seconds / 4:  # the fixed cost of one eager op (dispatch, allocation)
        for _ in range(100):
            torch.add(x, y)
        n += 100
    overhead = (clock() - t0) / n
    return Device(
        "cpu", int(psutil.virtual_memory().available), flops, half, bandwidth, 0.0,
        f"measured on this machine ({torch.get_num_threads()} threads): 512x512 fp32/bf16 matmul, "
        "32 MiB copy, one small add", op_overhead_s=overhead, compute_eff=1.0, memory_eff=1.0,
    )


def budget_device(nbytes: int, like: Device | None = None) -> Device:
    """A device with only a memory budget (``--device BYTES``); speed figures from ``like`` (or an
    A100-80GB)."""
    return replace(
        like or DEVICES["a100-80gb"], name="budget", memory_bytes=int(nbytes),
        source=f"memory budget {nbytes:,} bytes; speed figures of "
               f"{(like or DEVICES['a100-80gb']).name}",
    )


def _phase(device: Device, precision: str, flops: float, nbytes: float, ops: int) -> float:
    return (
        max(flops / device.flops(precision), nbytes / device.bytes_per_s())
        + ops * device.op_overhead_s
    )


# Eager ops (kernel launches), counted with a TorchDispatchMode counter on this code (torch 2.13):
# one cached decode step runs 70 per block + 140 (embedding, heads, sampling, bookkeeping); one
# training forward + backward runs 225 per block + 320; AdamW's per-tensor step runs ~10 per tensor
# (the multi-tensor step, on CUDA, ~15 in all); the model has 13 tensors per block + 23.
OPS_PER_BLOCK = 70
OPS_PER_DECODE_STEP = 140
TRAIN_OPS_PER_BLOCK, TRAIN_OPS_BASE = 225, 320


def train_step_seconds(cfg: KronosConfig, plan: TrainPlan, device: Device) -> dict[str, float]:
    """Seconds of one optimizer step (all micro-batches, all-reduce included) on ``plan.gpus``
    devices."""
    counts = count_parameters(cfg)
    tokens = plan.batch * plan.window
    a = 4 if plan.precision == "fp32" else 2
    attn = 2 * tokens * plan.window * cfg.d_model * (cfg.n_layers + 1)  # causal QK^T and AV
    fwd = 2 * tokens * counts.linear + attn
    # backward = 2 forwards; checkpointing recomputes one
    passes = 3 + (1 if plan.checkpointing else 0)
    weights_traffic = passes * counts.linear * a + 4 * counts.trainable  # read weights, write grads
    matmul = _phase(device, plan.precision, passes * fwd, weights_traffic, 0)
    saved = plan.activations_no_checkpointing
    ops = (
        TRAIN_OPS_PER_BLOCK * cfg.n_layers * (4 if plan.checkpointing else 3)
    ) // 3 + TRAIN_OPS_BASE
    elementwise = _phase(device, plan.precision, 0, 3 * saved, ops)
    micro = (matmul + elementwise) * plan.accumulation
    n_tensors = 13 * cfg.n_layers + 23
    optimizer = _phase(
        device, "fp32", 0, 28 * counts.trainable, 15 if device.name != "cpu" else 10 * n_tensors
    )
    allreduce = (
        2 * (plan.gpus - 1) / plan.gpus * 4 * counts.trainable / device.link
        if plan.gpus > 1
        else 0.0
    )
    return {"compute": micro, "optimizer": optimizer, "allreduce": allreduce,
            "total": micro + optimizer + allreduce}


@dataclass(frozen=True)
class SeriesWork:
    """The work of forecasting one series with its ``paths`` sample paths, by phase, as the
    engine runs it: what a series' paths share (tokenize its history, the trunk's prefill, the
    token-to-candle decoder over its history) once, what each path does on its own (its rows'
    decode steps, the copy of the prefill's caches into its row, its horizon's candles) once a
    path. FLOPs (multiply-add = 2) and bytes of memory traffic; ``precision`` sets the bytes of
    activations and caches."""

    tokenize_flops: float  # tokenizer encoder over the history, and decoder (history + paths)
    tokenize_bytes: float
    prefill_flops: float  # the trunk over the window, once for the series
    prefill_bytes: float  # its activations, and the caches spread into each path's row
    decode_flops: float  # every path's cached decode steps
    decode_bytes: float  # every step's cache reads
    recompute_flops: float = 0.0  # steps past the context (exact sliding): each row's window again
    recompute_bytes: float = 0.0

    def __add__(self, other: SeriesWork) -> SeriesWork:
        return SeriesWork(*(a + b for a, b in zip(self.astuple(), other.astuple(), strict=True)))

    def __mul__(self, k: float) -> SeriesWork:
        return SeriesWork(*(a * k for a in self.astuple()))

    def astuple(self) -> tuple[float, ...]:
        return (self.tokenize_flops, self.tokenize_bytes, self.prefill_flops, self.prefill_bytes,
                self.decode_flops, self.decode_bytes, self.recompute_flops, self.recompute_bytes)


def series_work(
    cfg: KronosConfig, tok: TokenizerConfig, lookback: int, horizon: int, paths: int,
    max_context: int = 512, precision: str = "fp32", sliding: str = "exact",
) -> SeriesWork:
    """``SeriesWork`` of one series of ``lookback`` history candles, ``horizon`` steps and
    ``paths`` sample paths (the counting of ``kronos_core.plan.portfolio.forecast_flops``, with
    the memory traffic beside it).

    The prefill runs once per series. With several paths and every row cached to the end
    (``kronos_core.engine.memory.shares_history``) its key/value caches are held once per series
    (``SharedHistoryKV``) and each decode step reads them once per series; otherwise they are
    copied into each path's row (``KVCache.write_spread``) and each row reads its own copy.
    Each decode step runs once per row (series x paths), attending to ``ctx`` keys in each
    layer and in the s2 head. With ``sliding="exact"`` a step whose window
    passes ``max_context`` recomputes the whole window, per row. The tokenizer encodes the
    history once and decodes the history part of the output window once and each path's
    ``horizon`` candles on their own (``KronosTokenizer.decode_after_shared_history``)."""
    a = 4 if precision == "fp32" else 2
    counts, tcounts = count_parameters(cfg), count_parameters(tok)
    d, layers = cfg.d_model, cfg.n_layers
    window = min(lookback, max_context)
    # the prefill runs neither head nor the s2 head's query and output projections
    prefill_linear = counts.linear - d * (2**cfg.s1_bits + 2**cfg.s2_bits) - 2 * d * d
    out_window = min(lookback + horizon, max_context)
    enc, dec = window, (out_window - min(horizon, out_window)) + paths * horizon
    # half the tokenizer's weights encode, half decode: 2 FLOPs a weight and candle
    tokenize_flops = tcounts.linear * (enc + dec)
    tokenize_bytes = 20.0 * (enc + dec) * tok.d_model * 4
    slots = min(window + horizon, max_context)  # each row's cache length
    prefill_flops = 2.0 * window * prefill_linear + 2.0 * window**2 * d * layers
    shared = shares_history(paths, lookback, horizon, max_context, sliding)
    copies = 1 if shared else paths  # copies of a series' history in the caches
    prefill_bytes = 20.0 * window * d * a * layers + copies * 2.0 * (layers + 1) * slots * d * a
    # the steps whose window slides past the context (exact: each recomputes the whole window,
    # per row), and the others, whose row attends to ctx = min(window + step + 1, max_context)
    # keys in each layer and the s2 head: their sum in closed form (a request may hold 10,000
    # series of different lengths, planned before it runs)
    first_slide = max(0, max_context - lookback + 1) if sliding == "exact" else horizon
    slides = max(0, horizon - first_slide)
    cached = horizon - slides
    growing = min(max(0, max_context - window - 1), cached)  # steps with ctx < max_context
    ctx_sum = (growing * (window + 1) + growing * (growing - 1) / 2
               + (cached - growing) * max_context)
    # trunk + both heads per row; attention over ctx keys in each layer and the s2 head
    decode_flops = paths * (cached * 2.0 * counts.linear + 4.0 * ctx_sum * d * (layers + 1))
    # each row reads its caches (a shared history once a series, each row its own tokens)
    read_slots = window * cached + paths * cached * (cached + 1) / 2 if shared else paths * ctx_sum
    decode_bytes = 2.0 * (layers + 1) * read_slots * d * a
    recompute_flops = paths * slides * (2.0 * max_context * counts.linear
                                        + 2.0 * max_context**2 * d * layers)
    recompute_bytes = paths * slides * 20.0 * max_context * d * a * layers
    return SeriesWork(tokenize_flops, tokenize_bytes, prefill_flops, prefill_bytes, decode_flops,
                      decode_bytes, recompute_flops, recompute_bytes)


def _call_seconds(
    cfg: KronosConfig, tok: TokenizerConfig, work: SeriesWork, horizon: int, device: Device,
    precision: str, calls: int = 1,
) -> dict[str, float]:
    """Seconds of ``calls`` engine calls that together do ``work``: each phase's roofline, plus
    each call's fixed costs (reading the weights, one kernel launch per op) in every phase."""
    counts = count_parameters(cfg)
    a = 4 if precision == "fp32" else 2
    layers = cfg.n_layers
    tok_layers = tok.n_enc_layers + tok.n_dec_layers - 2
    tokenize = _phase(device, "fp32", work.tokenize_flops, work.tokenize_bytes, 0) + calls * _phase(
        device, "fp32", 0, 0, 2 * OPS_PER_BLOCK * tok_layers)
    prefill = _phase(device, precision, work.prefill_flops, work.prefill_bytes, 0) + calls * _phase(
        device, precision, 0, counts.total * a, OPS_PER_BLOCK * layers)
    decode = _phase(device, precision, work.decode_flops, work.decode_bytes, 0) + (
        calls * horizon * _phase(device, precision, 0, counts.total * a,
                                 OPS_PER_BLOCK * layers + OPS_PER_DECODE_STEP))
    recompute = _phase(device, precision, work.recompute_flops, work.recompute_bytes, 0)
    return {"tokenize_detokenize": tokenize, "prefill": prefill, "decode": decode,
            "recompute": recompute, "total": tokenize + prefill + decode + recompute}


def infer_seconds(
    cfg: KronosConfig, tok: TokenizerConfig, plan: InferencePlan, series: int, device: Device,
    gpus: int = 1, max_context: int = 512, sliding: str = "exact", nodes: int = 1,
    node_link: float = NODE_LINK,
) -> dict[str, float]:
    """Seconds to forecast ``series`` series, ``plan.batch`` per engine call, on ``nodes`` nodes
    of ``gpus`` devices each (the series split evenly over all ``nodes * gpus`` devices).

    A call's work is ``plan.batch`` times one series' ``series_work``: the prefill and the
    tokenizer's history once per series, the decode steps once per row (series x
    ``plan.sample_count`` paths). ``sliding``: ``exact`` recomputes the whole window at every
    step once it slides (history + generated > max_context); ``rolling`` keeps decoding from
    the cache over at most max_context keys. With ``nodes`` > 1 the shards of the
    other nodes cross ``node_link`` (bytes/s): their windows in (6 fp32 features a
    candle), the forecasts out (6 fp32 a step and sample), sent one after the other
    from the gateway's node (``network``; overlapped with compute in practice, so an
    upper bound).
    """
    work = series_work(cfg, tok, plan.lookback, plan.horizon, plan.sample_count, max_context,
                       plan.precision, sliding) * plan.batch
    call = _call_seconds(cfg, tok, work, plan.horizon, device, plan.precision)
    per_call = call["total"]
    devices = gpus * nodes
    calls = math.ceil(series / (plan.batch * devices)) if plan.batch else 0
    # series whose shard runs on another node than the gateway's
    remote = series * (nodes - 1) / nodes
    network = remote * 6 * 4 * (plan.lookback + plan.horizon * plan.sample_count) / node_link
    return {"per_call": per_call, "calls_per_device": calls, "devices": devices, "network": network,
            "total": per_call * calls + network,
            "tokenize_detokenize": call["tokenize_detokenize"], "prefill": call["prefill"],
            # the window recomputed at the steps past the context counts as decoding, as before
            "decode": call["decode"] + call["recompute"]}


# The eager engine on a CPU against the roofline above, measured: ``scripts/plan-request-time.py``
# runs the bundled default model (d_model 128, 4 layers) in-process on one torch thread over the
# sample store's windows, ten workloads (lookback 64-400, horizon 5-24, 1-32 paths, two past the
# context), and fits its CPU time as one factor per part of ``forecast_seconds`` without factors
# (``probe_cpu`` of the same thread). On the 2-core development machine (2026-12-07, after the
# shared-history caches; quiet) the fits were 2.7 (tokenize and prefill), 3.4 (cached decode) and
# 1.6 (windows recomputed past the context); before them six runs had given 2.0-2.9, 4.4-6.0 and
# 1.6-1.8. What the roofline misses: in the decode, the attention kernels on one query row, top-p
# sampling twice a step and the element-wise ops around them, per row; in the prefill, the CPU
# attention kernel's speed at head size 32. With these factors each workload's estimate was
# 0.8-1.1 of its measured time (docs/planner.md, "A request's time"), which the service's refusal
# margin (``deadline_margin``, 1.5) covers. A loaded machine's wall time is longer than the
# estimate: the service took 2.2-2.9x it (two step loops as two lanes) in the figures of issue 53.
CPU_ENGINE_FACTORS = {"tokenize_detokenize": 2.7, "prefill": 2.7, "decode": 3.4,
                      "recompute": 1.6}
PARTS = ("tokenize_detokenize", "prefill", "decode", "recompute")


@dataclass(frozen=True)
class PlannedTime:
    """A forecast request's planned wall seconds (``forecast_seconds``) and what they rest on."""

    seconds: float  # the busiest lane's seconds: what the request is planned to take
    series: int
    rows: int  # series x paths
    lanes: int  # step loops that run its series side by side (replicas x step loops)
    calls: int  # engine calls of the busiest lane
    parts: dict[str, float]  # tokenize_detokenize, prefill, decode: the busiest lane's seconds
    factors: dict[str, float]  # the engine's time over the roofline applied, per part
    device: str  # the device's name (``cpu``, ``h100``...)

    def as_dict(self) -> dict:
        return {"seconds": self.seconds, "series": self.series, "rows": self.rows,
                "lanes": self.lanes, "calls": self.calls, "parts": dict(self.parts),
                "factors": dict(self.factors), "device": self.device}


def engine_factors(device: Device) -> dict[str, float]:
    """The engine's time over the roofline on ``device``, per part: ``CPU_ENGINE_FACTORS`` on a
    measured CPU; 1 on a GPU, whose figures already carry assumed efficiencies (not checked on a
    GPU here)."""
    return dict(CPU_ENGINE_FACTORS) if device.name == "cpu" else dict.fromkeys(PARTS, 1.0)


def forecast_seconds(
    cfg: KronosConfig, tok: TokenizerConfig, lengths: Sequence[int], horizon: int, paths: int,
    device: Device, lanes: int = 1, max_context: int = 512, batch: int | None = None,
    precision: str = "fp32", sliding: str = "exact", factors: dict[str, float] | None = None,
) -> PlannedTime:
    """Planned wall seconds of one forecast request: series of history ``lengths`` (a window of at
    most ``max_context``; a longer one slides), ``horizon`` steps, ``paths`` sample paths each,
    spread evenly over ``lanes`` step loops working side by side (the service's replicas x their
    step loops), each running its share in engine calls of at most ``batch`` series (None: one
    call).

    The work is ``series_work`` per series: the prefill and the tokenizer's history once per
    series, the decode steps once per row (series x paths) and step. Seconds are the roofline's
    (``_call_seconds``) on the busiest lane, at least one whole series (a series' paths are never
    split), each part times its factor in ``factors`` (default ``engine_factors(device)``). A
    quiet machine's figure: it counts neither other requests nor other processes, so a loaded
    machine takes longer."""
    factors = engine_factors(device) if factors is None else dict(factors)
    if horizon < 1 or paths < 1 or not len(lengths):
        return PlannedTime(0.0, len(lengths), len(lengths) * max(paths, 0), max(lanes, 1), 0,
                           dict.fromkeys(PARTS, 0.0), factors, device.name)
    n = len(lengths)
    # every length past the context plans alike: its window is the context, and it slides at once
    cut = [min(int(length), max_context + 1) for length in lengths]
    counts: dict[int, int] = {}
    for length in cut:
        counts[length] = counts.get(length, 0) + 1
    work = None
    for length, k in counts.items():
        one = series_work(cfg, tok, length, horizon, paths, max_context, precision, sliding) * k
        work = one if work is None else work + one
    assert work is not None
    lanes = max(1, min(int(lanes), n))
    share = math.ceil(n / lanes)  # series of the busiest lane
    calls = math.ceil(share / batch) if batch else 1
    lane = _call_seconds(cfg, tok, work * (1.0 / lanes), horizon, device, precision, calls)
    longest = series_work(cfg, tok, max(cut), horizon, paths, max_context, precision, sliding)
    alone = _call_seconds(cfg, tok, longest, horizon, device, precision, 1)
    parts = max(
        ({k: part[k] * factors[k] for k in PARTS} for part in (lane, alone)),
        key=lambda p: sum(p.values()),
    )
    return PlannedTime(sum(parts.values()), n, n * paths, lanes, calls, parts, factors,
                       device.name)


# torch.cuda.get_device_name() fragments -> the DEVICES entry with those datasheet figures
GPU_NAMES = (
    ("h200", "h200"), ("h100", "h100"), ("a100", "a100-80gb"), ("a6000", "a6000"),
    ("4090", "rtx4090"), ("3080", "rtx3080"),
)


def engine_device(device: str, clock=None, seconds: float = 0.25) -> Device | None:
    """The speed figures the service plans a request's time with, for the device a replica runs
    on: a CPU (``cpu``) is measured here (``probe_cpu``, ``seconds`` long, on the calling thread's
    torch threads; ``clock`` defaults to this thread's CPU time with one torch thread, so that
    other processes on a shared machine do not slow the figures, else the wall clock); a GPU
    (``cuda:N``) is looked up by name among ``DEVICES`` (an A100 by its memory), and an unknown
    GPU gets the fastest listed one's figures, so that its plans err toward a shorter time. None
    when neither applies."""
    import torch

    if device == "cpu":
        if clock is None:
            clock = time.thread_time if torch.get_num_threads() == 1 else time.perf_counter
        return probe_cpu(seconds, clock)
    if not device.startswith("cuda") or not torch.cuda.is_available():
        return None
    index = int(device.split(":", 1)[1]) if ":" in device else 0
    name = torch.cuda.get_device_name(index).lower()
    for fragment, key in GPU_NAMES:
        if fragment in name:
            if key == "a100-80gb" and torch.cuda.get_device_properties(index).total_memory < 60e9:
                key = "a100-40gb"
            return DEVICES[key]
    fastest = max(DEVICES.values(), key=lambda d: d.fp32_flops)
    return replace(fastest, source=f"{name}: not listed; the figures of {fastest.name}")
