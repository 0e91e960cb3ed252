"""One way to build a ready ``KronosPredictor``: ``PredictorConfig`` → ``load_predictor``.

Every command, the service, the benchmarks and the tests build predictors here, so
the choice of checkpoint, device, precision, compile and sliding mode is written once.

Where a model comes from (``PredictorConfig.model``):

* ``None`` or ``kronos-default`` (``BUNDLED_ALIAS``): the embedded default
  (``kronos_core/assets/models/kronos-default``), a small model trained by this project on
  real data (see ``docs/model-card.md``).
* an alias, ``kronos-mini`` / ``kronos-small`` / ``kronos-base``: the published NeoQuasar
  checkpoint with the tokenizer and context it was trained with (``ALIASES``).
* a folder holding ``model/`` and ``tokenizer/`` (what ``kronos train`` writes, and the
  embedded default), optionally with ``kronos.json`` (``name``, ``max_context``,
  ``random_weights``, ``sampling``, ``moves``: the move correction, ``kronos_core.base.moves``).
* a checkpoint folder (``config.json`` + ``model.safetensors``) or a Hub id; then the
  tokenizer must be given too.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from kronos_core.base.moves import MoveCorrection
from kronos_core.base.options import SLIDING_MODES, SamplingDefaults
from kronos_core.model import CheckpointError, Kronos, KronosTokenizer
from kronos_core.model.checkpoint import WEIGHTS_NAME, resolve_checkpoint
from kronos_core.predictor import KronosPredictor

log = logging.getLogger(__name__)

MODELS_DIR = Path(__file__).parent / "assets" / "models"
DEFAULT_MODEL_DIR = MODELS_DIR / "kronos-default"  # model/ + tokenizer/ + kronos.json
BUNDLE_MANIFEST = "kronos.json"


@dataclass(frozen=True)
class Alias:
    """A published checkpoint with the tokenizer and context it was trained with."""

    model: str  # Hub id of the predictor
    tokenizer: str  # Hub id of its tokenizer
    max_context: int  # longest window the model was trained on


# From the published model table (Kronos paper and NeoQuasar model cards).
ALIASES: dict[str, Alias] = {
    "kronos-mini": Alias("NeoQuasar/Kronos-mini", "NeoQuasar/Kronos-Tokenizer-2k", 2048),
    "kronos-small": Alias("NeoQuasar/Kronos-small", "NeoQuasar/Kronos-Tokenizer-base", 512),
    "kronos-base": Alias("NeoQuasar/Kronos-base", "NeoQuasar/Kronos-Tokenizer-base", 512),
}

BUNDLED_ALIAS = "kronos-default"  # the embedded default, by name: --model, --init, --model-dir


def model_aliases() -> list[str]:
    """Every model name the loader knows, the bundled one first (for help texts and errors)."""
    return [BUNDLED_ALIAS, *ALIASES]


DTYPES: dict[str, torch.dtype | None] = {
    "float32": None, "bfloat16": torch.bfloat16, "float16": torch.float16,
}
DTYPE_SPELLINGS = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16"}


@dataclass(frozen=True)
class PredictorConfig:
    """Everything needed to build a predictor; plain values, so it pickles and prints."""

    model: str | None = None  # folder, Hub id, alias, bundle folder; None = embedded default
    tokenizer: str | None = None  # folder or Hub id; None = the alias's / bundle's tokenizer
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    dtype: str = "float32"  # float32 | bfloat16 | float16 (autocast); fp32/bf16/fp16 accepted
    compile: bool = False  # torch.compile the single-token decode step
    # CUDA: torch.compile(mode="reduce-overhead") the decode step; CPU: ignored (logged)
    cuda_graphs: bool = False
    sliding: str = "exact"  # exact | rolling | recompute
    max_context: int | None = None  # None: the alias's / bundle's / 512
    revision: str | None = None  # Hub revision (branch, tag or commit)

    def __post_init__(self):
        dtype = DTYPE_SPELLINGS.get(str(self.dtype).lower(), str(self.dtype).lower())
        if dtype not in DTYPES:
            raise ValueError(
                f"dtype must be one of {sorted(DTYPES)} (or fp32/bf16/fp16), got {self.dtype!r}"
            )
        object.__setattr__(self, "dtype", dtype)
        if self.sliding not in SLIDING_MODES:
            raise ValueError(f"sliding must be one of {SLIDING_MODES}, got {self.sliding!r}")
        if self.max_context is not None and self.max_context < 1:
            raise ValueError(f"max_context must be >= 1, got {self.max_context}")
        if self.device != "auto" and not str(self.device).startswith(("cpu", "cuda", "mps")):
            raise ValueError(f"device must be auto, cpu, cuda or cuda:N, got {self.device!r}")

    def torch_dtype(self) -> torch.dtype | None:
        """The autocast dtype, or None for float32."""
        return DTYPES[self.dtype]

    def torch_device(self) -> torch.device:
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.device)


@dataclass(frozen=True)
class ModelIdentity:
    """What users pin and audit: which weights answered."""

    name: str  # alias, bundle name or folder name
    sha256: str  # SHA-256 over the model's then the tokenizer's weight file
    model_sha256: str  # SHA-256 of the predictor's model.safetensors
    tokenizer_sha256: str  # SHA-256 of the tokenizer's model.safetensors
    revision: str | None  # Hub commit the files came from, when from the Hub
    bundled: bool  # shipped inside this package
    random_weights: bool  # untrained weights: forecasts are not meaningful

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class LoadedModel:
    model: Kronos
    tokenizer: KronosTokenizer
    identity: ModelIdentity
    max_context: int
    sampling: SamplingDefaults = SamplingDefaults()
    moves: MoveCorrection | None = None


@dataclass(frozen=True)
class ResolvedSource:
    """Local folders (downloaded when a Hub id was given) and what the loader knows of them."""

    model_dir: Path
    tokenizer_dir: Path
    name: str
    max_context: int
    bundled: bool
    random_weights: bool
    revision: str | None
    # a bundle's kronos.json "sampling" block; the reference's defaults elsewhere
    sampling: SamplingDefaults = SamplingDefaults()
    # a bundle's kronos.json "moves" block (fitted by kronos tune-moves); None elsewhere
    moves: MoveCorrection | None = None


def default_bundle() -> Path | None:
    """The embedded default bundle folder, or None when this install lacks it."""
    return DEFAULT_MODEL_DIR if (DEFAULT_MODEL_DIR / "model").is_dir() else None


def _manifest(folder: Path) -> dict:
    file = folder / BUNDLE_MANIFEST
    if not file.is_file():
        return {}
    try:
        data = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{file} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise CheckpointError(f"{file} must hold a JSON object")
    return data


def _is_bundle(folder: Path) -> bool:
    return (folder / "model").is_dir() and (folder / "tokenizer").is_dir()


def _hub_revision(folder: Path) -> str | None:
    """The commit of a Hub download (``.../snapshots/<commit>/``), None for local folders."""
    return folder.name if folder.parent.name == "snapshots" else None


def resolve_source(cfg: PredictorConfig) -> ResolvedSource:
    """Turn ``cfg.model`` / ``cfg.tokenizer`` into local folders; raises ``CheckpointError``."""
    spec = cfg.model
    if spec is None or spec == BUNDLED_ALIAS:
        bundle = default_bundle()
        if bundle is None:
            raise CheckpointError(
                f"the embedded default model is missing from this install ({DEFAULT_MODEL_DIR}); "
                "reinstall the package or pass --model (a folder, a Hub id or an alias: "
                + ", ".join(ALIASES)
                + ")"
            )
        return _bundle_source(bundle, cfg, bundled=True)
    if spec in ALIASES:
        alias = ALIASES[spec]
        mdir = resolve_checkpoint(alias.model, cfg.revision)
        tdir = resolve_checkpoint(cfg.tokenizer or alias.tokenizer, None)
        return ResolvedSource(mdir, tdir, spec, cfg.max_context or alias.max_context, False, False,
                              _hub_revision(mdir))
    path = Path(spec).expanduser()
    if path.is_dir() and _is_bundle(path):
        return _bundle_source(path, cfg, bundled=False)
    mdir = resolve_checkpoint(spec, cfg.revision)
    if cfg.tokenizer is None:
        known = ", ".join(model_aliases())
        raise CheckpointError(
            f"{spec} is a model checkpoint without a tokenizer: pass the tokenizer it was trained "
            f"with (--tokenizer DIR_OR_HUB_ID), or use an alias ({known}) or a folder with model/ "
            "and tokenizer/"
        )
    tdir = resolve_checkpoint(cfg.tokenizer, None)
    return ResolvedSource(
        mdir, tdir, mdir.name, cfg.max_context or 512, False, False, _hub_revision(mdir)
    )


def _bundle_source(folder: Path, cfg: PredictorConfig, bundled: bool) -> ResolvedSource:
    meta = _manifest(folder)
    tdir = resolve_checkpoint(cfg.tokenizer, None) if cfg.tokenizer else folder / "tokenizer"
    name = str(meta.get("name") or folder.name)
    try:
        sampling = SamplingDefaults.from_manifest(meta.get("sampling"),
                                                  str(folder / BUNDLE_MANIFEST))
    except ValueError as exc:
        raise CheckpointError(str(exc)) from exc
    if meta.get("sampling") is not None:  # named by the model, never by a server path
        sampling = replace(sampling, source=f"{name}'s {BUNDLE_MANIFEST}")
    try:
        moves = MoveCorrection.from_manifest(meta.get("moves"), str(folder / BUNDLE_MANIFEST))
    except ValueError as exc:
        raise CheckpointError(str(exc)) from exc
    if moves is not None:
        moves = replace(moves, source=f"{name}'s {BUNDLE_MANIFEST}")
    return ResolvedSource(
        folder / "model", tdir, name,
        int(cfg.max_context or meta.get("max_context") or 512), bundled,
        bool(meta.get("random_weights", False)), None, sampling, moves,
    )


_HASHES: dict[tuple[str, int, int], str] = {}


def file_sha256(file: Path) -> str:
    """SHA-256 of a file, cached by (path, size, mtime)."""
    st = file.stat()
    key = (str(file.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _HASHES:
        h = hashlib.sha256()
        with open(file, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        _HASHES[key] = h.hexdigest()
    return _HASHES[key]


def model_identity(source: ResolvedSource) -> ModelIdentity:
    m = file_sha256(source.model_dir / WEIGHTS_NAME)
    t = file_sha256(source.tokenizer_dir / WEIGHTS_NAME)
    both = hashlib.sha256(bytes.fromhex(m) + bytes.fromhex(t)).hexdigest()
    return ModelIdentity(
        source.name, both, m, t, source.revision, source.bundled, source.random_weights
    )


def load_checkpoints(cfg: PredictorConfig | None = None) -> LoadedModel:
    """Load model and tokenizer on the CPU; raises ``CheckpointError`` naming the problem."""
    cfg = cfg or PredictorConfig()
    source = resolve_source(cfg)
    model = Kronos.from_pretrained(source.model_dir)
    tokenizer = KronosTokenizer.from_pretrained(source.tokenizer_dir)
    return LoadedModel(model, tokenizer, model_identity(source), source.max_context,
                       source.sampling, source.moves)


def build_predictor(
    model: Kronos, tokenizer: KronosTokenizer, cfg: PredictorConfig | None = None,
    identity: ModelIdentity | None = None, max_context: int | None = None,
    sampling: SamplingDefaults | None = None, moves: MoveCorrection | None = None,
) -> KronosPredictor:
    """A predictor over modules already built (benchmarks build random ones) with ``cfg``'s
    options."""
    cfg = cfg or PredictorConfig()
    predictor = KronosPredictor(
        model, tokenizer, device=cfg.torch_device(),
        max_context=max_context or cfg.max_context or 512, sliding=cfg.sliding,
        dtype=cfg.torch_dtype(), compile=cfg.compile, cuda_graphs=cfg.cuda_graphs,
    )
    predictor.identity = identity
    predictor.config = cfg
    if sampling is not None:
        predictor.sampling = sampling
    predictor.moves = moves
    return predictor


def load_predictor(cfg: PredictorConfig | None = None) -> KronosPredictor:
    """A ready ``KronosPredictor`` for ``cfg`` (default: the embedded default model on CPU/GPU)."""
    cfg = cfg or PredictorConfig()
    loaded = load_checkpoints(cfg)
    return build_predictor(loaded.model, loaded.tokenizer, cfg, loaded.identity, loaded.max_context,
                           loaded.sampling, loaded.moves)


# ---- command-line flags, shared by every command that loads a predictor --------------------
def add_predictor_arguments(parser: argparse.ArgumentParser, *, sliding_default: str = "exact",
                            several_models: bool = False) -> None:
    """The model flags; ``several_models``: ``--model`` may be repeated (a list, or None)."""
    g = parser.add_argument_group("model")
    g.add_argument("--model", action="append" if several_models else "store",
                   help="checkpoint folder, Hub id, alias (" + ", ".join(model_aliases())
                   + "), or a folder with model/ and tokenizer/ such as a `kronos train` output "
                   "(default: the bundled model)"
                   + ("; repeat it to compare models on the same windows"
                      if several_models else ""))
    g.add_argument(
        "--tokenizer", help="tokenizer folder or Hub id (default: the one the model goes with)"
    )
    g.add_argument("--revision", help="Hub revision (branch, tag or commit) of --model")
    g.add_argument("--device", default="auto", help="auto (CUDA if available), cpu, cuda, cuda:N")
    g.add_argument(
        "--dtype", default="float32", help="float32 | bfloat16 | float16 (autocast precision)"
    )
    g.add_argument("--compile", action="store_true", help="torch.compile the decode step")
    g.add_argument(
        "--cuda-graphs", action="store_true",
        help="CUDA: capture the decode step as CUDA graphs (torch.compile mode=reduce-overhead); "
        "ignored on a CPU (logged)",
    )
    g.add_argument(
        "--sliding", default=sliding_default, choices=list(SLIDING_MODES),
        help="how the window slides past max_context: exact (reference results), rolling "
        "(faster, approximate), recompute (reference algorithm)",
    )
    g.add_argument(
        "--max-context", type=int, help="model context (default: the model's own, else 512)"
    )


def predictor_config_from_args(args: argparse.Namespace, **overrides) -> PredictorConfig:
    cfg = PredictorConfig(
        model=getattr(args, "model", None), tokenizer=getattr(args, "tokenizer", None),
        device=getattr(args, "device", None) or "auto",
        dtype=getattr(args, "dtype", None) or "float32",
        compile=bool(getattr(args, "compile", False)),
        cuda_graphs=bool(getattr(args, "cuda_graphs", False)),
        sliding=getattr(args, "sliding", None) or "exact",
        max_context=getattr(args, "max_context", None), revision=getattr(args, "revision", None),
    )
    return replace(cfg, **overrides) if overrides else cfg


def describe_sources() -> str:
    """One line per alias, for help texts and docs."""
    bundled = (f"{BUNDLED_ALIAS}: the embedded default model ({DEFAULT_MODEL_DIR.name}, shipped in "
               "the package)")
    return os.linesep.join([bundled, *(f"{k}: {a.model} + {a.tokenizer}, context {a.max_context}"
                                       for k, a in ALIASES.items())])
