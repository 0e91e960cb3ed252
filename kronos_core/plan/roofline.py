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
from dataclasses import dataclass, replace

from kronos_core.engine.memory import count_parameters
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


def infer_seconds(
    cfg: KronosConfig, tok: TokenizerConfig, plan: InferencePlan, series: int, device: Device,
    gpus: int = 1, max_context: int = 512, sliding: str = "exact", nodes: int = 1,
    node_link: float = NODE_LINK,
) -> dict[str, float]:
    """Seconds to forecast ``series`` series, ``plan.batch`` per engine call, on ``nodes`` nodes
    of ``gpus`` devices each (the series split evenly over all ``nodes * gpus`` devices).

    ``sliding``: ``exact`` recomputes the whole window at every step once it
    slides (history + generated > max_context); ``rolling`` keeps decoding from
    the cache over at most max_context keys. With ``nodes`` > 1 the shards of the
    other nodes cross ``node_link`` (bytes/s): their windows in (6 fp32 features a
    candle), the forecasts out (6 fp32 a step and sample), sent one after the other
    from the gateway's node (``network``; overlapped with compute in practice, so an
    upper bound).
    """
    p = plan.precision
    a = 4 if p == "fp32" else 2
    counts, tcounts = count_parameters(cfg), count_parameters(tok)
    n = plan.batch * plan.sample_count
    window = min(plan.lookback, max_context)
    d, layers = cfg.d_model, cfg.n_layers
    enc_tokens, dec_tokens = n * plan.lookback, n * min(plan.lookback + plan.horizon, max_context)
    tok_layers = tok.n_enc_layers + tok.n_dec_layers - 2
    tok_flops = 2 * tcounts.linear * (enc_tokens + dec_tokens) / 2
    tokenize = _phase(device, "fp32", tok_flops, 20 * (enc_tokens + dec_tokens) * tok.d_model * 4,
                      2 * OPS_PER_BLOCK * tok_layers)
    prefill = _phase(device, p, 2 * n * window * counts.linear + 2 * n * window**2 * d * layers,
                     counts.total * a + 20 * n * window * d * a * layers, OPS_PER_BLOCK * layers)
    steps = 0.0
    for step in range(plan.horizon):
        ctx = min(window + step, max_context)
        # the window slides: recompute it
        if plan.lookback + step > max_context and sliding == "exact":
            steps += _phase(
                device, p,
                2 * n * max_context * counts.linear + 2 * n * max_context**2 * d * layers,
                counts.total * a + 20 * n * max_context * d * a * layers,
                OPS_PER_BLOCK * layers + OPS_PER_DECODE_STEP,
            )
            continue
        flops = 2 * n * counts.linear + 4 * n * ctx * d * (layers + 1)
        nbytes = counts.total * a + 2 * (layers + 1) * n * ctx * d * a  # weights + cache reads
        # + sampling, s2 head
        steps += _phase(device, p, flops, nbytes, OPS_PER_BLOCK * layers + OPS_PER_DECODE_STEP)
    per_call = tokenize + prefill + steps
    devices = gpus * nodes
    calls = math.ceil(series / (plan.batch * devices)) if plan.batch else 0
    # series whose shard runs on another node than the gateway's
    remote = series * (nodes - 1) / nodes
    network = remote * 6 * 4 * (plan.lookback + plan.horizon * plan.sample_count) / node_link
    return {"per_call": per_call, "calls_per_device": calls, "devices": devices, "network": network,
            "total": per_call * calls + network,
            "tokenize_detokenize": tokenize, "prefill": prefill, "decode": steps}
