"""The prediction wing: a run's kept model (its slim or full checkpoint, with the run's own
settings) scored on the dev set and predicting the test set in GLUE's submission format, one run
(``predict.py``) or each task's chosen run of a sweep or study (``python -m isotune.submission``);
see ``docs/prediction.md``.
May import: record, data, model, sweeps, study."""
