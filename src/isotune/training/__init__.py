"""One run from the command line: Hydra callbacks, config checks, the run, its trivial baseline.
May import: norms, isotropy, tracking, record, data, model, callbacks, sweeps, dashboard,
prediction."""
