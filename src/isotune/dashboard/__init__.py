"""The dashboard family: one definition of its sections and charts (``.layout``), built into a
saved W&B workspace and a sweep's W&B report (``.views``, ``.cli``) and into TensorBoard's
custom-scalars layout (``.tensorboard``); and a reader of W&B's offline run files
(``.run_file``), with which tests check every panel against the keys real runs log. Sections
and what they show: ``docs/dashboards.md``.
May import: tracking, data, sweeps, search, study."""
