"""The replica process: the Ray Serve ``Predictor`` deployment (``deployment``), its device
loop's step runner (``step_runner``), the step scheduler (``scheduler``), out-of-memory and
memory figures (``memory``), the calibration it applies (``calibration``) and the weights the
driver ships to it (``weights``). Imports ``service.common``, never ``service.gateway``."""
