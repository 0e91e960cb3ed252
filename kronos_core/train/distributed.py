"""Process-group set-up: one process needs nothing; torchrun and Ray Train set the environment.

``torchrun`` exports RANK / LOCAL_RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT;
Ray Train's ``TorchTrainer`` initialises the process group itself. Either way
``init_distributed`` returns who we are; a plain ``python``/``kronos`` call is
rank 0 of 1 with no process group.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    local_rank: int = 0
    world: int = 1
    owns_group: bool = False  # True when we created the process group (and so destroy it)

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(device: str = "auto") -> DistInfo:
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if dist.is_available() and dist.is_initialized():
        return DistInfo(dist.get_rank(), local_rank, dist.get_world_size(), False)
    world = int(os.environ.get("WORLD_SIZE", 1))
    if world <= 1:
        return DistInfo()
    use_cuda = torch.cuda.is_available() and device != "cpu"
    dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    return DistInfo(dist.get_rank(), local_rank, world, True)


def pick_device(device: str, info: DistInfo) -> torch.device:
    """``auto``: this rank's GPU when there is one, else the CPU."""
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", info.local_rank % torch.cuda.device_count())
        return torch.device("cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None and info.world > 1:
        return torch.device("cuda", info.local_rank)
    return dev


def all_reduce_sum(values: list[float], info: DistInfo, device: torch.device) -> list[float]:
    """Sum a few floats over ranks (identity with one process)."""
    if info.world <= 1:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.tolist()


def shutdown(info: DistInfo) -> None:
    if info.owns_group and dist.is_initialized():
        dist.destroy_process_group()
