"""Training configuration: a pydantic model read from YAML, with command-line overrides.

``load_config(path, overrides)`` validates the YAML file (unknown keys are errors
that name the key) and applies dotted overrides such as ``{"optim.lr": 1e-3}``.
Defaults describe a small model that trains on a CPU in minutes. The ``tokenizer:`` and
``model:`` sections are derived from the checkpoint configs (``kronos_core/model/config.py``):
the same fields, types and defaults, with CPU-sized defaults for the sizes a checkpoint requires.
"""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from kronos_core.model.config import KronosConfig, TokenizerConfig


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def _fields_of(checkpoint: type, derived: set[str], sizes: dict[str, int]) -> type[_Strict]:
    """A strict section with the fields of the checkpoint config ``checkpoint``
    (``kronos_core/model/config.py``) less the ``derived`` ones training fills in itself: the
    checkpoint's types and defaults, and ``sizes`` (CPU-sized) as defaults of the fields it
    requires (first, in this order)."""
    hints = typing.get_type_hints(checkpoint)
    fields = {f.name: f for f in dataclasses.fields(checkpoint) if f.name not in derived}
    required = {n for n, f in fields.items() if f.default is dataclasses.MISSING}
    if set(sizes) != required:  # a new required field needs a training default here
        raise TypeError(
            f"{checkpoint.__name__}: training defaults for {sorted(required)} needed, got "
            f"{sorted(sizes)}"
        )
    spec: dict[str, Any] = {n: (hints[n], sizes[n]) for n in sizes}
    spec.update({n: (hints[n], f.default) for n, f in fields.items() if n not in sizes})
    return create_model(
        f"_{checkpoint.__name__}Fields", __base__=_Strict, __module__=__name__, **spec
    )


# CPU-sized defaults of the sizes a checkpoint config requires
TOKENIZER_SIZES = {"d_model": 64, "n_heads": 4, "ff_dim": 128, "n_enc_layers": 3, "n_dec_layers": 3,
                   "s1_bits": 8, "s2_bits": 8}
MODEL_SIZES = {"d_model": 96, "n_layers": 3, "n_heads": 4, "ff_dim": 192}


class TokenizerSize(_fields_of(TokenizerConfig, {"d_in"}, TOKENIZER_SIZES)):  # type: ignore[misc]
    """Constructor keywords of a new ``KronosTokenizer`` (when not starting from a checkpoint):
    ``TokenizerConfig``'s fields but ``d_in`` (always the 6 candle features)."""


class ModelSize(_fields_of(KronosConfig, {"s1_bits", "s2_bits"}, MODEL_SIZES)):  # type: ignore[misc]
    """Constructor keywords of a new ``Kronos`` predictor: ``KronosConfig``'s fields but the bit
    widths (they come from the tokenizer)."""


RepairName = Literal["drop_nan", "drop_duplicates", "sort", "fix_high_low", "clip_negative"]


def _sort_only() -> list[RepairName]:
    return ["sort"]


class DataConfig(_Strict):
    """Where the candles come from and how they are cut into windows."""

    paths: list[str] = Field(default_factory=list, description="CSV/Parquet files")
    corpus: str | None = Field(
        None,
        description="corpus folder (instruments.csv + Parquet): training "
        "reads only its split=train instruments' training rows",
    )
    markets: list[str] | None = Field(
        None, description="corpus markets (US, CN, FX, ...); None = all"
    )
    frequencies: list[str] | None = Field(
        None, description="corpus frequencies (1d, 1h, 5min, 1min)"
    )
    max_windows_per_series: int | None = Field(
        None, ge=1, description="cap on training windows per series (a long 1-minute series would "
        "otherwise outweigh hundreds of daily ones); the stride widens to fit")
    store: str | None = Field(None, description="Arrow store root (KlineStore)")
    symbols: list[str] | None = Field(None, description="store symbols; None = whole universe")
    frequency: str | None = None
    # "timestamps": auto-detected (timestamps, date, ...; any case)
    timestamp_column: str = "timestamps"
    columns: dict[str, str] = Field(
        default_factory=dict, description="our column -> the file's (--column)"
    )
    repairs: list[RepairName] = Field(
        default_factory=_sort_only,
        description="reader repairs (--sort, --drop-nan, ...; rows are sorted)",
    )
    lookback: int = 96
    horizon: int = 32
    stride: int = 16
    val_fraction: float = Field(0.15, ge=0.0, lt=1.0)
    clip: float = 5.0
    reflect: bool = Field(
        False, description="also train on every window's price reflection (prices mirrored, "
        "high and low swapped): a drift-free prior, the model cannot learn a direction the "
        "data does not hold")
    num_workers: int = Field(0, ge=0)

    @property
    def window(self) -> int:
        return self.lookback + self.horizon


class LossConfig(_Strict):
    """Weights of the six features (open, high, low, close, volume, amount) in the tokenizer's
    reconstruction MSE. Equal by default, as the reference trains; the bundled default puts more on
    the prices so that the close resolves one step's move."""

    feature_weights: tuple[float, float, float, float, float, float] = (
        1.0, 1.0, 1.0, 1.0, 1.0, 1.0,
    )


class OptimConfig(_Strict):
    lr: float = Field(1e-3, description="a run from init without it: FINE_TUNE_LR")
    weight_decay: float = 0.05
    betas: tuple[float, float] = (0.9, 0.95)
    warmup_steps: int = 20
    min_lr_ratio: float = 0.1
    grad_clip: float | None = 1.0


FINE_TUNE_LR = 1e-4  # a run from a checkpoint (init) without optim.lr: a tenth of the default


class ForecastCheckConfig(_Strict):
    """The forecasting check of a predictor run from a checkpoint (``init``): the close's CRPS
    and MASE on fixed validation windows before and after training; ``best/`` keeps the better
    weights (``kronos_core/train/forecast_check.py``, docs/training.md)."""

    enabled: bool | None = Field(None, description="None: on for a predictor run from init")
    windows: int = Field(64, ge=1, description="validation windows forecast")
    paths: int = Field(16, ge=1, description="sample paths per window")
    horizon: int = Field(5, ge=1, description="steps forecast (at most data.horizon)")
    metric: Literal["crps_scaled", "mase"] = "crps_scaled"
    alpha: float = Field(
        0.05, gt=0, lt=1, description="the starting weights are put back only when the trained "
        "ones forecast worse with a one-sided paired p-value below this")
    keep_trained: bool = Field(
        False, description="keep the trained weights whatever the check finds (--keep-trained); "
        "the check still runs and is reported")
    seed: int = 0


class TrainConfig(_Strict):
    """Everything one training run needs; see ``docs/training.md``."""

    kind: Literal["tokenizer", "predictor"] = "predictor"
    out: str = "runs/train"
    init: str | None = Field(
        None,
        description="checkpoint to start from (folder with model/ and tokenizer/, or a model "
                    "folder / Hub id)",
    )
    tokenizer_init: str | None = Field(
        None, description="tokenizer folder / Hub id (predictor runs: frozen)"
    )
    tokenizer: TokenizerSize = Field(default_factory=TokenizerSize)
    model: ModelSize = Field(default_factory=ModelSize)
    data: DataConfig = Field(default_factory=DataConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    loss: LossConfig = Field(default_factory=LossConfig)
    forecast_check: ForecastCheckConfig = Field(default_factory=ForecastCheckConfig)
    batch_size: int | Literal["auto"] = 16
    micro_batch_size: int | None = Field(None, description="None = batch_size (no accumulation)")
    accum_steps: int = Field(1, ge=1)
    max_steps: int = Field(200, ge=1)
    max_minutes: float | None = Field(
        None, gt=0, description="wall-clock cap of this sitting (--minutes): the run stops at a "
        "checkpoint once past it and --resume continues it")
    eval_every: int = Field(50, ge=1)
    save_every: int = Field(50, ge=1)
    log_every: int = Field(10, ge=1)
    early_stopping_patience: int | None = Field(
        None, description="evaluations without improvement before stopping"
    )
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    grad_checkpointing: bool = False
    seed: int = 0
    device: str = "auto"
    threads: int | None = Field(
        1, ge=1, description="torch CPU threads (None = torch's default, one per core). 1 by "
        "default: on the project's shared 2-core machine one thread trained faster than two "
        "(kronos train bench --compare-threads 1 2, docs/training.md); raise it on a machine "
        "with idle cores"
    )
    max_context: int = 512
    name: str = "kronos-custom"
    val_batches: int | None = Field(None, description="cap on validation batches (None = all)")
    tensorboard: bool = True

    @field_validator("batch_size")
    @classmethod
    def _positive_batch(cls, v):
        if v != "auto" and v < 1:
            raise ValueError("batch_size must be >= 1 or 'auto'")
        return v

    @property
    def checks_forecasts(self) -> bool:
        """Does this run evaluate forecasts before and after (``forecast_check``)?"""
        on = self.forecast_check.enabled
        return bool(self.kind == "predictor" and self.init) if on is None else on

    @model_validator(mode="after")
    def _check(self):
        if self.data.window > self.max_context + 1 and self.kind == "predictor":
            raise ValueError(
                f"data.lookback + data.horizon = {self.data.window} exceeds max_context + 1 = "
                f"{self.max_context + 1}; shorten the window or raise max_context"
            )
        return self


class ConfigFileError(ValueError):
    """A training config that does not validate; the message names the file and field."""


def _set_dotted(tree: dict, dotted: str, value: Any) -> None:
    node = tree
    *parents, leaf = dotted.split(".")
    for key in parents:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise ConfigFileError(f"override {dotted}: {key} is not a section")
    node[leaf] = value


def load_config(
    path: str | Path | None = None, overrides: dict[str, Any] | None = None
) -> TrainConfig:
    """Read ``path`` (YAML; None = defaults), apply dotted ``overrides`` (None values skipped),
    validate."""
    import yaml

    tree: dict[str, Any] = {}
    source = "defaults"
    if path is not None:
        source = str(path)
        try:
            tree = yaml.safe_load(Path(path).read_text()) or {}
        except FileNotFoundError as exc:
            raise ConfigFileError(f"config file {path} not found") from exc
        except yaml.YAMLError as exc:
            raise ConfigFileError(f"{path}: not valid YAML: {exc}") from exc
        if not isinstance(tree, dict):
            raise ConfigFileError(f"{path}: expected a mapping of keys at the top level")
    for key, value in (overrides or {}).items():
        if value is not None:
            _set_dotted(tree, key, value)
    try:
        return TrainConfig.model_validate(tree)
    except ValidationError as exc:
        lines = [f"  {'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
        raise ConfigFileError(f"{source}: invalid training config:\n" + "\n".join(lines)) from exc


DEFAULT_CONFIG_DIR = Path(__file__).parent / "configs"
