"""``kronos eval``'s ``tokenizer_fidelity`` section: each model's tokenizer round trip
(``kronos_core.eval.fidelity``) on the contexts of the evaluated windows, per (market, frequency)
group and over all of them.

The windows are exactly what the model was given (each window's ``--lookback`` context,
normalised on its own rows with the predictor's clip), so the figures say how much of one bar's
move the model can resolve on the data it is scored on.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from kronos_core.base.candles import FEATURES
from kronos_core.eval.fidelity import FIDELITY_GOAL, tokenizer_fidelity
from kronos_core.eval.sources import SeriesInfo
from kronos_core.eval.windows import Windows

ALL = "all"


class _OnDevice:
    """A tokenizer seen through the ``RoundTrip`` protocol, its inputs moved to its device."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.device = next(tokenizer.parameters()).device

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.tokenizer.encode(x.to(self.device))

    def decode(self, s1: torch.Tensor, s2: torch.Tensor) -> torch.Tensor:
        return self.tokenizer.decode(s1, s2)


def fidelity_by_group(tokenizer, w: Windows, info: Sequence[SeriesInfo], clip: float) -> dict:
    """{"market/frequency": {feature: figures}, ..., "all": ...} over the windows' contexts."""
    rt = _OnDevice(tokenizer)
    groups = np.array(["/".join(info[int(k)].group) for k in w.series_index])
    out = {}
    for g in sorted(set(groups)):
        out[g] = tokenizer_fidelity(rt, w.context[groups == g], clip=clip)
    if len(out) > 1:
        out[ALL] = tokenizer_fidelity(rt, w.context, clip=clip)
    return out


def _f(v) -> str:
    return "—" if v is None else f"{v:.3f}"


def markdown(section: dict) -> str:
    """One row per model and group: the close's round-trip error and one-step move (window-std
    units) and their ratio, then every other feature's ratio."""
    others = [f for f in FEATURES if f != "close"]
    head = ["model", "group", "windows", "close error (σ)", "close move (σ)", "close error / move",
            *[f"{f} error / move" for f in others]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for model, groups in section["models"].items():
        for g, figures in groups.items():
            c = figures["close"]
            cells = [model, g, str(c["windows"]), _f(c["error_std"]), _f(c["move_std"]),
                     _f(c["error_over_move"]), *[_f(figures[f]["error_over_move"]) for f in others]]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def section(runs, w: Windows, info: Sequence[SeriesInfo]) -> dict:
    """The report section for every model run (``ModelRun``: ``name``, ``predictor``)."""
    return {"goal_close_error_over_move": FIDELITY_GOAL,
            "units": "mean |decoded - input| in window-std units; move = mean |one-step change|",
            "models": {r.name: fidelity_by_group(r.predictor.tokenizer, w, info, r.predictor.clip)
                       for r in runs}}
