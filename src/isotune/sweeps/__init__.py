"""The sweeps family: the runs of sweep folders, their configurations, tables, paired statistics,
figures and report, reruns of unfinished jobs, and the GPU slots of the ``gpus`` launcher; run by
``python -m isotune.aggregate`` and ``.rerun``.
May import: record, tracking."""
