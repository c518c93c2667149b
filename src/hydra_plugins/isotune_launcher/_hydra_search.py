"""A search as Hydra gives it: its settings, the checks before any job, the jobs handed to
Hydra's launcher, and ``hydra/sweeper=optuna``'s run (:func:`run_search`); the search itself is
:mod:`isotune.search`. The underscore keeps it (and Optuna) out of Hydra's plugin scan, which
imports every other module here on every run of train.py.
"""

import copy
import logging
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from hydra_plugins.isotune_launcher.preview import folder_line, say_preview
from hydra_plugins.isotune_launcher.search_schema import KeepsItsLauncher
from hydra_plugins.isotune_launcher.stopping import stops_with_a_summary
from isotune.data.reading import check_task_offline
from isotune.errors import IsotuneError
from isotune.search.checks import dry_run, dry_run_jobs, key_name, searched_as_typed
from isotune.search.loop import check_reports_complete, run_searches
from isotune.search.outcomes import evaluated_on_by_run
from isotune.search.search import Job, Search
from isotune.search.settings import (
    SEARCH_PLACES,
    SEED_KEYS,
    STUDY_PLACES,
    SearchSettings,
    fixed_seeds,
    refuse_fixed_seeds,
)
from isotune.search.space import SearchSpace, override_value, parse_space
from isotune.sweeps.environment import check_continued_in_one_environment
from isotune.tracking.reporting import counted

log = logging.getLogger(__name__)

AGAIN = "Type the same command again to continue the search (docs/search.md)."


def search_settings(
    config: DictConfig, sweeper: dict[str, Any], arguments: list[str], folder: Path
) -> SearchSettings:
    """The settings of the search the sweep's composed ``config`` asks for, from ``hydra.sweeper``
    and the sweep ``arguments``; a searched or baseline key not in the config is refused."""
    s = plain_values(sweeper)
    space = parse_space(s["params"] or {}, arguments)
    for searched in space.searched:
        _check_in_config(config, searched.key, "searched key")
    for key in s["baseline"] or {}:
        _check_in_config(config, key, "baseline's key (hydra.sweeper.baseline)")
    baseline = tuple(_baseline(config, space, s["baseline"]))
    return settings_of(config, s, space, baseline, s["study_name"] or folder.name)


def plain_values(sweeper: dict[str, Any]) -> dict[str, Any]:
    """``hydra.sweeper``'s keys as plain values, resolved."""
    return {
        key: OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
        for key, value in sweeper.items()
    }


def settings_of(
    config: DictConfig,
    s: dict[str, Any],
    space: SearchSpace,
    baseline: tuple[str, ...] | None,
    study_name: str,
) -> SearchSettings:
    """The settings of one search from the plain ``hydra.sweeper`` values ``s``: the one builder
    of a plain search and a study's, so both refuse fixed seeds and a sampler given as a value."""
    refuse_fixed_seeds(
        [*fixed_seeds(space), *seeds_fixed_in(config, fixed_seeds(space))],
        SEARCH_PLACES if baseline is not None else STUDY_PLACES,  # None: a study's search
    )
    if not isinstance(s["sampler"], dict):  # hydra.sweeper.sampler=random: a value, not a config
        raise IsotuneError(
            f"hydra.sweeper.sampler={s['sampler']} sets the sampler to a value, not a sampler. "
            f"Fix: hydra/sweeper/sampler={s['sampler']} (a config of conf/hydra/sweeper/sampler/, "
            "such as random or tpe), or hydra.sweeper.sampler._target_=optuna.samplers.<Name>."
        )
    sampler = dict(s["sampler"])

    def make_sampler(seed: int | None) -> Any:
        return instantiate(sampler if seed is None else {**sampler, "seed": seed})

    return SearchSettings(
        space=space,
        seeds=tuple(s["seeds"] or ()),
        report_seeds=tuple(s["report_seeds"] or ()),
        baseline=baseline,
        direction=s["direction"],
        n_trials=s["n_trials"],
        max_failure_rate=s["max_failure_rate"],
        retry_failed=bool(s.get("retry_failed")),
        tune_on=s["tune_on"],
        study_name=study_name,
        storage=s.get("storage"),
        make_sampler=make_sampler,
        sampler=sampler,
        pruner=instantiate(s["pruner"]) if s["pruner"] is not None else None,
        tag_runs=config.hydra.runtime.choices.get("logger") == "wandb",
    )


def seeds_fixed_in(config: DictConfig, named: list[str]) -> list[str]:
    """The keys of :data:`SEED_KEYS` that do not follow ``seed`` in ``config`` (a preset or
    conf/train.yaml gave them a value), but those ``named`` already."""
    raw = OmegaConf.to_container(config, resolve=False)
    already = {key_name(text.split("=", 1)[0]) for text in named}
    return [
        f"{key}={raw[key]} (in the config)"
        for key in SEED_KEYS[1:]
        if key in raw and key not in already and "${seed}" not in str(raw[key])
    ]


def _check_in_config(config: DictConfig, key: str, what: str) -> None:
    if key.startswith("+"):  # adds a key the config lacks, as the user asked
        return
    name = key.lstrip("~").split("@")[0]
    if name in config.hydra.runtime.choices:
        return
    missing = object()
    if OmegaConf.select(config, name, default=missing, throw_on_missing=False) is missing:
        raise IsotuneError(
            f"The {what} {name} is not in the config, so its value would change nothing "
            "(or stop every job). Fix: a key of conf/train.yaml or a config group "
            "(python train.py --cfg job lists them), spelled as there, e.g. optim.lr or "
            "reg.weight."
        )


def _baseline(config: DictConfig, space: SearchSpace, baseline: dict[str, Any] | None) -> list[str]:
    """The fixed overrides, then ``baseline`` (default: each searched key at its config value)."""
    if baseline is None:
        baseline = {}
        choices = config.hydra.runtime.choices
        for searched in space.searched:
            name = searched.key.lstrip("+~").split("@")[0]
            if searched.key.startswith("+"):
                continue  # the config lacks it: the baseline leaves it out
            if name not in choices:
                baseline[name] = OmegaConf.select(config, name)
            elif choices[name] is not None:
                baseline[name] = choices[name]
    # A baseline key replaces the fixed overrides of that key and under it: reg=none drops a
    # reg.weight fixed for the searched regularizer.
    under = tuple(f"{key}." for key in baseline)
    names = [(o, key_name(o.split("=", 1)[0])) for o in space.fixed]
    kept = [o for o, name in names if name not in baseline and not name.startswith(under)]
    return [*kept, *(f"{key}={override_value(value)}" for key, value in baseline.items())]


def compose_checked(config: DictConfig, loader: Any, overrides: list[str]) -> DictConfig:
    """A job's config composed as the launcher will, its values checked against their ranges as
    train.py checks them (not the machine's GPU: the jobs may run on another)."""
    from isotune.training.config_checks import RULES, raise_problems, rule_problems

    job = loader.load_sweep_config(config, overrides)
    raise_problems(rule_problems(job, RULES))
    return job


def dry_run_search(
    config: DictConfig, settings: SearchSettings, compose: Callable[[list[str]], Any]
) -> Any:
    """Compose the baseline and each searched group option before any job runs
    (:func:`isotune.search.checks.dry_run`); the baseline's config, on the first report seed."""
    groups = config.hydra.runtime.choices
    jobs = dry_run_jobs(settings.space, settings.baseline, settings.report_seeds[0], groups)
    composed = dry_run(compose, jobs)
    # A searched option or the baseline's (an intervention is a global preset) can fix a seed too
    refuse_fixed_seeds(
        [
            f"{text} of the search's {what}"
            for (what, _), job in zip(jobs, composed, strict=True)
            for text in seeds_fixed_in(job, [])
        ]
    )
    return composed[0]


def check_models_available(jobs: Iterable[DictConfig]) -> None:
    """Refuse, before any job, a model no job could load here: else every job fails, and each
    failed trial counts against ``max_failure_rate`` even after the fix."""
    from isotune.model.encoders import parameter_count  # imports torch

    for name_or_path in sorted({str(job.model.name_or_path) for job in jobs}):
        parameter_count(name_or_path)  # the model's config, read as a job reads it


def check_search_fits(
    config: DictConfig,
    settings: SearchSettings,
    trials_at_once: int,
    folder: Path,
    baseline_job: DictConfig,
) -> None:
    """Refuse a search that cannot fit on its disk (docs/search.md#how-it-works): the runs its
    budget has left, each sized as ``baseline_job`` since the searched values are not known yet."""
    from hydra_plugins.isotune_launcher._sweep_space import check_sweep_fits  # imports torch

    count, done, at_once = search_runs(config, settings, trials_at_once, folder)
    check_sweep_fits(folder, [baseline_job] * (count - done), at_once, done)


def search_runs(
    config: DictConfig, settings: SearchSettings, trials_at_once: int, folder: Path
) -> tuple[int, int, int]:
    """A search's budget of runs (none pruned or failed), those completed in ``folder``, and how
    many run at once on its launcher."""
    from hydra_plugins.isotune_launcher._sweep_space import (  # imports torch
        completed_runs,
        jobs_at_once,
    )

    count = settings.n_trials * len(settings.seeds) + 2 * len(settings.report_seeds)
    at_once = jobs_at_once(config.hydra.launcher, trials_at_once * len(settings.seeds))
    return count, min(completed_runs(folder), count), at_once


def preview_search(
    config: DictConfig, settings: SearchSettings, trials_at_once: int, folder: Path, job: Any
) -> None:
    """Say what the search would run (:mod:`.preview`), each run timed as the baseline's ``job``:
    its trials are sampled as it goes, so no trial is named."""
    count, done, at_once = search_runs(config, settings, trials_at_once, folder)
    seeds, report_seeds = settings.seeds, settings.report_seeds
    searched = searched_as_typed(settings.space.distributions())
    plan = [
        f"A search ({settings.study_name}) of {counted(settings.n_trials, 'trial')} on "
        f"{counted(len(seeds), 'tuning seed')} {list(seeds)}, then the winner and the baseline "
        f"on {counted(len(report_seeds), 'report seed')} {list(report_seeds)}: a budget of "
        f"{counted(count, 'run')} when none is pruned or fails; {done} completed in the folder, "
        f"{count - done} to run.",
        f"  searched: {' '.join(f'{key}={text}' for key, text in searched.items())}",
        f"  baseline: {' '.join(settings.baseline or ()) or 'the config as it is'}",
        "  (the trials are sampled as the search goes: the baseline's job is the one composed)",
    ]
    say_preview(
        folder, plan, count - done, at_once, job, "the baseline's job", config.hydra.launcher
    )


def check_tuning_split(
    job: DictConfig, tuning_overrides: Sequence[str], glue_dir: str | None, folder: Path
) -> None:
    """Refuse, before any job, a tuning split no tuning job could carve from ``job``'s task, one
    other than the runs in ``folder`` evaluated on, and ``data.tuning_split`` set for every run."""
    if job.data.get("tuning_split"):
        raise IsotuneError(
            "data.tuning_split=true is set for every run of the search, so its report runs too "
            "would evaluate on a split of train, and nothing would report on dev. Fix: drop it "
            "and type hydra.sweeper.tune_on=train_split: the tuning runs choose on the split, "
            "the report runs train on all of train and report on dev (docs/search.md)."
        )
    if not tuning_overrides:
        return
    from isotune.data.own_data import complete_own_task
    from isotune.data.reading import TaskSplits
    from isotune.data.tasks import TaskSpec
    from isotune.data.tuning_split import check_continued_on_this_split, tuning_split_of

    job = copy.deepcopy(job)
    own_data = complete_own_task(job)  # task=files: its files read, a missing train file refused
    task = TaskSpec.from_config(OmegaConf.to_container(job.task, resolve=True))
    splits = TaskSplits(task, glue_dir, own_data.examples if own_data is not None else None)
    split = tuning_split_of(splits, job.data.tuning_split_size, int(job.data.tuning_split_seed))
    check_continued_on_this_split(split, evaluated_on_by_run(folder))


class HydraLaunch:
    """Hands a search's batches to Hydra's launcher, each job in its folder under the search
    folder (``hydra.sweep.subdir``), numbered on from the previous batch."""

    def __init__(self, launcher: Any, sweep_dir: Path) -> None:
        self.launcher = launcher
        self.sweep_dir = sweep_dir
        self.launched = 0

    def __call__(self, jobs: Sequence[Job]) -> None:
        first, self.launched = self.launched, self.launched + len(jobs)
        self.launcher.launch(job_overrides(jobs, self.sweep_dir), initial_job_idx=first)


def job_overrides(jobs: Sequence[Job], sweep_dir: Path) -> list[list[str]]:
    """Each job's overrides as Hydra's launcher takes them, its folder as ``hydra.sweep.subdir``."""
    return [
        [*job.overrides, f"hydra.sweep.subdir={os.path.relpath(job.folder, sweep_dir)}"]
        for job in jobs
    ]


def run_search(sweeper: KeepsItsLauncher, arguments: list[str]) -> None:
    """The plain search ``hydra/sweeper=optuna`` runs, its sweep ``arguments`` searched: every
    check before any job, then its trials and its held-out report."""
    assert sweeper.config is not None and sweeper.hydra_context is not None
    config, loader = sweeper.config, sweeper.hydra_context.config_loader
    folder = Path(str(config.hydra.sweep.dir)).resolve()
    log.info(folder_line("Search", folder, sweeper.settings["preview"]))
    with stops_with_a_summary(folder, sweeper.launcher, AGAIN):
        settings = search_settings(config, sweeper.settings, arguments, folder)
        settings.check()  # as its Search will, but before the dry run, and writing nothing
        baseline_job = dry_run_search(
            config, settings, lambda o: compose_checked(config, loader, o)
        )
        check_models_available([baseline_job])
        glue_dir = OmegaConf.select(config, "paths.glue_dir")
        check_task_offline(
            str(baseline_job.task.name),
            OmegaConf.to_container(baseline_job.task, resolve=True),
            glue_dir,
        )
        check_tuning_split(baseline_job, settings.tuning_overrides, glue_dir, folder)
        n_jobs = sweeper.settings["n_jobs"]
        check_search_fits(config, settings, n_jobs, folder, baseline_job)
        check_continued_in_one_environment(
            folder,
            "hydra.sweeper.allow_mixed_environment",
            sweeper.settings["allow_mixed_environment"],
        )
        if sweeper.settings["preview"]:
            preview_search(config, settings, n_jobs, folder, baseline_job)
            return
        search = Search(settings, folder, OmegaConf.to_yaml(config))
        run_searches([search], HydraLaunch(sweeper.launcher, folder), n_jobs)
        check_reports_complete([search])
