"""The sweeps family: the runs of sweep folders, the folder of each job of a sweep typed again in
its folder, their configurations, tables, paired statistics, figures and report, whether their
runs came from one environment, reruns of unfinished jobs, and the GPU slots of the ``gpus``
launcher; run by ``python -m isotune.aggregate``, ``.rerun`` and ``.env``.
May import: record, tracking."""
