"""The base types every layer of ``kronos_core`` uses: candle features and normalisation
(``candles``), error and warning codes (``errors``), forecast options (``options``), the lookback
rules (``lookback``), atomic file writes (``atomic``) and the resource monitor (``monitor``).
Nothing here imports another ``kronos_core`` folder."""
