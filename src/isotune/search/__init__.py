"""The search wing: a hyper-parameter search whose trial is a configuration over tuning seeds and
whose report speaks on other seeds: the search space from Hydra's sweep grammar, a trial's value
from its runs' results.json, the search itself (its trials asked and told apart from the
launching, :mod:`.search`), the loop that launches the jobs of one or several searches together
(:mod:`.loop`), the expected best score per budget, and the held-out report. The Hydra sweeper
``hydra_plugins.isotune_launcher.optuna_sweeper`` adapts it to Hydra.
May import: record, sweeps, tracking."""
