"""Planning of training and inference runs (``kronos plan``); see ``docs/planner.md``.

* ``planner``: the model presets and folders, and the memory of one device while training or
  forecasting, part by part, with the largest batch that fits a budget;
* ``roofline``: the devices' peak figures and a time estimate of each phase;
* ``measure``: the planner against measured peaks and step times on this CPU
  (``kronos plan --measure-cpu``).

Parameters are counted once, by ``kronos_core.engine.memory.count_parameters``.
Import the pieces from their modules; this package imports nothing heavy.
"""
