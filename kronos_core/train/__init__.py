"""Training of the Kronos tokenizer and predictor (``kronos train``); see ``docs/training.md``.

Import the pieces from their modules (``kronos_core.train.trainer.train``,
``kronos_core.train.config.load_config``); this package imports nothing heavy.
"""
