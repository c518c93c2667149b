"""The search wing: a hyper-parameter search whose trial is a configuration over tuning seeds and
whose report speaks on other seeds (docs/search.md#the-code); the Hydra sweeper
``hydra_plugins.isotune_launcher.optuna_sweeper`` adapts it to Hydra.
May import: record, sweeps, tracking."""
