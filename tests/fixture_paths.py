"""Where the suite's in-repository fixtures live (see ``tests/fixtures/README.md``)."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"
FIXTURE_DIR = FIXTURES / "kronos-tiny"
# The random-weight tiny checkpoint as a loader bundle (model/, tokenizer/, kronos.json):
# PredictorConfig(model=TINY) gives a predictor on it. Test-only; the package ships the trained default.
TINY = str(FIXTURE_DIR)
# Real US 1-minute candles (MSFT, six NYSE sessions with a weekend): the US intraday hold-out.
US_INTRADAY_MSFT = FIXTURES / "us-intraday" / "msft_1min.csv"
