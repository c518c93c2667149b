"""The search wing: a hyper-parameter search whose trial is a configuration over tuning seeds and
whose report speaks on other seeds: the search space from Hydra's sweep grammar, a trial's value
from its runs' results.json, the expected best score per budget, and the held-out report. The
Hydra sweeper that drives Optuna with them is ``hydra_plugins.isotune_launcher.optuna_sweeper``.
May import: record, sweeps, tracking."""
