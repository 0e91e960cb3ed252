"""Calibrating forecast quantiles: conformal quantile regression fitted per scope
(``conformal``), its scopes (``scope``), adaptive conformal inference (``aci``) and the policy that
decides whether a calibration applies to a series and what it corrects (``policy``). Below the
predictor and the evaluation; imports ``kronos_core/base`` and ``kronos_core/data`` only."""
