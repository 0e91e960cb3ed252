"""Print the model card's tokenizer-fidelity table: the close's round trip per (market, frequency)
on up to N windows per series ending inside each series' evaluation period, both hold-outs.

    python scripts/tokenizer-fidelity.py --corpus ../shared/data/corpus \
        --tokenizer kronos_core/assets/models/kronos-default/tokenizer [--windows 8] [--json F]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from kronos_core.data.corpus import HOLDOUT_INSTRUMENT, TRAIN, Corpus, CorpusFilter  # noqa: E402
from kronos_core.eval.fidelity import corpus_fidelity  # noqa: E402
from kronos_core.model import KronosTokenizer  # noqa: E402

HOLDOUTS = {TRAIN: "time", HOLDOUT_INSTRUMENT: "instrument"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", required=True, help="corpus folder (instruments.csv + Parquet)")
    ap.add_argument("--tokenizer", required=True, help="tokenizer folder")
    ap.add_argument("--windows", type=int, default=8, help="windows per series (default 8)")
    ap.add_argument("--length", type=int, default=224, help="rows per window (default 224)")
    ap.add_argument("--json", type=Path, help="also write every feature's figures here")
    args = ap.parse_args(argv)
    tok = KronosTokenizer.from_pretrained(args.tokenizer).eval()
    corpus = Corpus(args.corpus)
    out = {}
    print("| hold-out | group | windows | close error (std) | one-step move (std) | error / move |")
    print("|---|---|---|---|---|---|")
    for split, name in HOLDOUTS.items():
        series = corpus.load(CorpusFilter(split=split))
        starts = [int(np.searchsorted(s.timestamps.values, np.datetime64(s.info["eval_from"])))
                  for s in series]
        out[split] = corpus_fidelity(tok, series, starts, args.length, args.windows)
        for group, figures in out[split].items():
            c = figures["close"]
            print(f"| {name} | {group} | {c['windows']} | {c['error_std']:.4f} | "
                  f"{c['move_std']:.4f} | {c['error_over_move']:.3f} |")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
