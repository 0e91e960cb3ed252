"""Write a corpus extract for ``scripts/gpu-train.sh``: the training rows of a corpus only.

    python scripts/make-corpus-extract.py [--corpus ../shared/data/corpus] [--out .corpus-extract]
        [--markets US CN] [--frequencies 1d 1h] [--symbols AAPL ...]
        [--config kronos_core/train/configs/default-predictor.yaml] [--tokenizer DIR]

The extract is a corpus folder in the same layout (``instruments.csv`` and the Parquet files
the table names), holding only ``split == train`` instruments and, of each, only the rows both
hold-out rules allow (``kronos_core.data.corpus.Corpus.training_mask``); their rows of
``instruments.csv`` are copied unchanged, so the rules give the same answer when the GPU machine
applies them again. An instrument with no training row at all (EUR/USD@1h lies wholly inside
EUR/USD's daily evaluation period) is left out.
Rows are copied as published (split back-adjustment happens when training reads them).

``--config`` adds ``train.json``: the training config (YAML, validated as ``kronos train`` does)
as JSON, so the GPU machine needs no YAML or pydantic; ``--tokenizer`` copies a trained
tokenizer folder (config.json + model.safetensors) to ``tokenizer/`` for a predictor run.
``extract.json`` records what was taken.

The extract is derived row for row from public repositories' files: it is never committed
(``/.corpus-extract/`` is git-ignored); the device tool carries it with ``carry``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from kronos_core.data.corpus import (  # noqa: E402
    INSTRUMENTS_FILE,
    TRAIN,
    Corpus,
    CorpusError,
    CorpusFilter,
)

DEFAULT_CORPUS = REPO.parent / "shared" / "data" / "corpus"
DEFAULT_OUT = REPO / ".corpus-extract"


def write_extract(corpus_dir: Path, out: Path, flt: CorpusFilter) -> dict:
    """Write the training rows of the instruments ``flt`` selects; returns extract.json's dict."""
    corpus = Corpus(corpus_dir)
    rows = corpus.select(CorpusFilter(split=TRAIN, markets=flt.markets,
                                      frequencies=flt.frequencies, symbols=flt.symbols))
    if rows.empty:
        raise SystemExit(f"make-corpus-extract: no training instrument in {corpus_dir} passes "
                         f"{flt}")
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.parquet"):
        old.unlink()
    kept: dict[str, int] = {}
    dropped: list[str] = []
    for file, group in rows.groupby("file"):
        names = list(group["symbol"])
        frame = pd.read_parquet(corpus_dir / str(file), filters=[("symbol", "in", names)])
        parts = []
        for symbol, part in frame.groupby("symbol", sort=False):
            part = part.sort_values("timestamps")
            allowed = corpus.training_mask(str(symbol), pd.DatetimeIndex(part["timestamps"]))
            if allowed.any():  # e.g. EUR/USD@1h lies wholly in EUR/USD's evaluation period
                parts.append(part[allowed])
                kept[str(symbol)] = int(allowed.sum())
            else:
                dropped.append(str(symbol))
        if not parts:
            continue
        pd.concat(parts, ignore_index=True).to_parquet(out / str(file), index=False)
    table = pd.read_csv(corpus_dir / INSTRUMENTS_FILE)
    table[table["symbol"].isin(kept)].to_csv(out / INSTRUMENTS_FILE, index=False)
    return {"corpus": str(corpus_dir), "instruments": len(kept), "rows": sum(kept.values()),
            "filter": {"markets": flt.markets, "frequencies": flt.frequencies,
                       "symbols": flt.symbols},
            "no_training_rows": dropped, "rows_per_instrument": kept}


def write_config(config: Path, out: Path) -> None:
    """The YAML training config, validated, as ``train.json``."""
    from kronos_core.train.config import load_config

    cfg = load_config(config)
    (out / "train.json").write_text(json.dumps(cfg.model_dump(mode="json"), indent=2))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", default=str(DEFAULT_CORPUS), help="the corpus folder")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="the extract folder (replaced)")
    p.add_argument("--markets", nargs="+")
    p.add_argument("--frequencies", nargs="+")
    p.add_argument("--symbols", nargs="+")
    p.add_argument("--config", help="YAML training config to add as train.json")
    p.add_argument("--tokenizer", help="tokenizer folder to add as tokenizer/")
    args = p.parse_args(argv)
    out = Path(args.out)
    flt = CorpusFilter(markets=tuple(args.markets) if args.markets else None,
                       frequencies=tuple(args.frequencies) if args.frequencies else None,
                       symbols=tuple(args.symbols) if args.symbols else None)
    try:
        info = write_extract(Path(args.corpus), out, flt)
    except CorpusError as exc:
        print(f"make-corpus-extract: {exc}", file=sys.stderr)
        return 2
    if args.config:
        write_config(Path(args.config), out)
        info["config"] = args.config
    if args.tokenizer:
        shutil.rmtree(out / "tokenizer", ignore_errors=True)
        shutil.copytree(args.tokenizer, out / "tokenizer")
        info["tokenizer"] = args.tokenizer
    (out / "extract.json").write_text(json.dumps(info, indent=2))
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"make-corpus-extract: {info['instruments']} instruments, {info['rows']} training rows, "
          f"{size / 2**20:.1f} MiB in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
