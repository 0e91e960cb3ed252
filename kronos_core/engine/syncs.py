"""Count the operations that make the host wait for the device (host-device synchronisation).

``HostSyncCounter`` is a ``TorchDispatchMode``: every aten op dispatched inside it is
looked at, so it counts on a CPU what would synchronise on a GPU:

* reads of a device value on the host: ``aten::item`` / ``_local_scalar_dense``
  (``.item()``, ``int(t)``, ``float(t)``), ``is_nonzero`` (``bool(t)``, ``if t:``),
  ``equal``, ``resolve_conj``/``resolve_neg`` (what ``.tolist()`` and ``.numpy()``
  dispatch);
* ops whose output size depends on the data: ``nonzero``, ``masked_select``,
  ``unique``..., and indexing or index-assignment by a boolean mask;
* host data entering the device: ``lift_fresh`` (``torch.tensor(list)``,
  ``torch.as_tensor``) and copies between devices (``.to(other_device)``).

The engine's test counts them per decode step (``tests/engine/test_host_syncs.py``);
``scripts/gpu-check.sh`` reports them next to the throughput.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

SYNC_OPS = frozenset(
    {
        "item", "_local_scalar_dense", "is_nonzero", "equal", "resolve_conj", "resolve_neg",
        "nonzero", "masked_select", "_unique", "_unique2", "unique_dim", "unique_consecutive",
        "unique_dim_consecutive", "lift_fresh", "allclose",
    }
)
INDEX_OPS = frozenset({"index", "index_put", "index_put_", "_index_put_impl_"})
COPY_OPS = frozenset({"_to_copy", "copy_", "to"})


def _tensors(tree: Any):
    if isinstance(tree, torch.Tensor):
        yield tree
    elif isinstance(tree, (list, tuple)):
        for item in tree:
            yield from _tensors(item)
    elif isinstance(tree, dict):
        for item in tree.values():
            yield from _tensors(item)


def _is_sync(name: str, args: tuple, kwargs: dict) -> bool:
    if name in SYNC_OPS:
        return True
    if name in INDEX_OPS:  # a boolean index needs nonzero (its size is data-dependent)
        indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
        return any(t.dtype == torch.bool for t in _tensors(indices))
    if name in COPY_OPS:
        devices = {t.device for t in _tensors((args, kwargs))}
        target = kwargs.get("device")
        if target is not None:
            devices.add(torch.device(target))
        return len(devices) > 1
    return False


class HostSyncCounter(TorchDispatchMode):
    """``with HostSyncCounter() as c: ...`` then ``c.total`` and ``c.ops`` (a Counter by op
    name)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    @property
    def total(self) -> int:
        return sum(self.ops.values())

    def reset(self) -> None:
        self.ops.clear()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if _is_sync(name, args, kwargs):
            self.ops[name] += 1
        return func(*args, **kwargs)


def syncs_per_step(job, counter: HostSyncCounter | None = None) -> list[int]:
    """Run ``job`` (a ``Generation`` or ``ForecastJob``) to the end -> the sync count of each
    step, as the step would synchronise on a GPU: the CPU's own top-p (which reads one number
    back per draw, ``kronos_core.engine.sampling.TOP_P_CANDIDATES``) is off while it counts."""
    from kronos_core.engine.sampling import sorting_whole_rows

    counter = counter or HostSyncCounter()
    counts = []
    with sorting_whole_rows():
        while not job.done:
            counter.reset()
            with counter:
                job.step()
            counts.append(counter.total)
    return counts


__all__ = ["HostSyncCounter", "SYNC_OPS", "syncs_per_step"]
