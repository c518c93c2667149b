"""The sweeps family: the runs of a sweep folder, their tables, reruns of unfinished jobs, and
the GPU slots of the ``gpus`` launcher; run by ``python -m isotune.aggregate`` and ``.rerun``."""
