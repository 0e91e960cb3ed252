"""Forecast evaluation: metrics, baselines, walk-forward windows, regimes, calibration,
risk summaries and backtests (``kronos eval``, ``kronos calibrate``, ``kronos backtest``).

The pure-numpy parts (``metrics``, ``baselines``, ``regimes``, ``risk``, ``backtest``)
need no model; ``windows`` runs a ``KronosPredictor`` over many windows in batches.
"""
