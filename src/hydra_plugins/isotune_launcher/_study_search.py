"""The study ``hydra/sweeper=study`` runs: its arms composed, every check before any job, its
preview, its stated plan locked; then :func:`isotune.study.loop.run_study_searches`. The
underscore keeps it (and Optuna) out of Hydra's plugin scan, as ``_hydra_search``'s does.
"""

import logging
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import MissingConfigException
from omegaconf import DictConfig, OmegaConf

from hydra_plugins.isotune_launcher._hydra_search import (
    HydraLaunch,
    check_models_available,
    check_tuning_split,
    compose_checked,
    plain_values,
    seeds_fixed_in,
    settings_of,
)
from hydra_plugins.isotune_launcher.preview import say_preview
from hydra_plugins.isotune_launcher.search_schema import KeepsItsLauncher, StudySweeperConf
from hydra_plugins.isotune_launcher.stopping import stops_with_a_summary
from isotune.atomic_files import write_text
from isotune.data.reading import check_task_offline
from isotune.errors import IsotuneError
from isotune.search.search import Search
from isotune.search.settings import STUDY_PLACES, SearchSettings, refuse_fixed_seeds
from isotune.search.space import parse_space
from isotune.study.loop import run_study_searches
from isotune.study.plan import (
    LR_KEY,
    TASK_KEY,
    Arm,
    StudyPlan,
    check_arm_keys,
    check_report_seeds_kept,
    override_values,
    plan_study,
    searches_in,
)
from isotune.study.preregistration import PLAN_FILE
from isotune.study.stated import stated_test
from isotune.study.stated_looks import (
    locked_plan,
    verified_plan,
)
from isotune.sweeps.environment import check_continued_in_one_environment
from isotune.sweeps.runs import SWEEP_FILE
from isotune.sweeps.slurm_jobs import check_no_live_jobs
from isotune.tracking.reporting import counted

log = logging.getLogger(__name__)

AGAIN = "Type the same command again to continue the study (docs/study.md)."
PLAIN_SEARCH_KEYS = ("params", "baseline")  # hydra.sweeper keys of a plain search, not a study's
REPORT_MODELS_KEPT = "checkpoint.keep=slim"  # hydra.sweeper.keep_report_models: report runs only


def run_study(sweeper: KeepsItsLauncher, arguments: list[str]) -> None:
    """The study ``hydra/sweeper=study`` runs, ``arguments`` its tasks and plain overrides."""
    assert sweeper.config is not None and sweeper.hydra_context is not None
    config = sweeper.config
    folder = Path(str(config.hydra.sweep.dir)).resolve()
    log.info(f"Study folder: {folder}")
    with stops_with_a_summary(folder, sweeper.launcher, AGAIN):
        s = plain_values(sweeper.settings)
        _refuse_unknown_keys(s, config.hydra.runtime.choices.get("hparams_search"))
        tasks, fixed = _tasks_and_fixed(arguments, s["tasks"])
        plan = plan_study(s, tasks)
        arm_names = [arm.name for arm in plan.arms]
        stated = stated_test(s["stated"], plan.tasks, arm_names, plan.baseline, plan.report_seeds)
        if stated is not None and stated.sequential and config.select_epoch != stated.select_epoch:
            # the statistic the plan states: every run of the study scores at that epoch
            fixed = [*fixed, f"select_epoch={stated.select_epoch}"]
        check_report_seeds_kept(plan, folder)
        settings = [_search_settings(sweeper, s, t, arm, fixed, folder) for t, arm in plan.searches]
        composed = _compose_arms(sweeper, plan, fixed)
        glue_dir = OmegaConf.select(config, "paths.glue_dir")
        for task in tasks:
            job = composed.get((task, plan.baseline))
            check_task_offline(task, job and OmegaConf.to_container(job.task), glue_dir)
            if job is not None:
                check_tuning_split(job, settings[0].tuning_overrides, glue_dir, folder / task)
        check_models_available(composed.values())
        for (_, name), job in composed.items():
            arm = next(arm for arm in plan.arms if arm.name == name)
            check_arm_keys(arm, lambda key, job=job: _in_config(job, key))
        # An arm's option (an intervention is a global preset) can fix a seed too
        refuse_fixed_seeds(
            sorted(
                {
                    f"{text} of arm {name!r}"
                    for (_, name), job in composed.items()
                    for text in seeds_fixed_in(job, [])
                }
            ),
            STUDY_PLACES,
        )
        log.info(
            f"{counted(len(plan.searches), 'search', 'searches')} "
            f"({', '.join(a.name for a in plan.arms)} on {', '.join(plan.tasks)}): a budget "
            f"of {counted(plan.jobs, 'run')} when none is pruned or "
            f"fails; {_what_is_kept(config.checkpoint.keep, s['keep_report_models'])}"
        )
        _say_searches_left_out(plan, folder)
        for search in settings:
            search.check()  # as its Search will, but writing nothing (a preview)
        at_once = _check_fits(sweeper, plan, composed, folder)
        # The launcher sends every search's jobs from the study folder: submitit's files, and
        # so the jobs SLURM still holds for a stopped study, are there, not in a search's.
        check_no_live_jobs(folder, "Continuing the study")
        check_continued_in_one_environment(
            folder, "hydra.sweeper.allow_mixed_environment", s["allow_mixed_environment"]
        )
        metric = None
        if stated is not None and stated.sequential:
            metric = str(composed[stated.task, plan.baseline].task.primary_metric)
            if (folder / PLAN_FILE).is_file():  # verified before anything, the preview too
                verified_plan(stated, folder, metric)
        if s["preview"]:
            job = composed[plan.tasks[0], plan.baseline]
            what = f"the baseline arm's job on {plan.tasks[0]}"
            left, lines = _plan_lines(plan, folder)
            say_preview(folder, lines, left, at_once, job, what, config.hydra.launcher)
            return
        searches = [
            Search(search, folder / task / arm.name, OmegaConf.to_yaml(config))
            for search, (task, arm) in zip(settings, plan.searches, strict=True)
        ]
        registration = None
        if stated is not None and stated.sequential:
            assert metric is not None
            registration = locked_plan(stated, folder, metric)
        # The study's record, as every sweep's: what a stopped study's summary reads.
        write_text(folder / SWEEP_FILE, OmegaConf.to_yaml(config))
        launch = HydraLaunch(sweeper.launcher, folder)
        run_study_searches(folder, searches, plan, stated, registration, launch, s["n_jobs"])


def _search_settings(
    sweeper: KeepsItsLauncher,
    s: dict[str, Any],
    task: str,
    arm: Arm,
    fixed: list[str],
    folder: Path,
) -> SearchSettings:
    """The search of ``arm`` on ``task``: no baseline of its own (it is an arm), its W&B runs
    grouped by study, task and arm."""
    assert sweeper.config is not None
    space = parse_space(
        dict(arm.params),
        [*fixed, f"{TASK_KEY}={task}", *arm.overrides],
        lambda key: "hydra.sweeper.lr" if key == LR_KEY else f"{arm.where}.params.{key}",
    )
    if not space.searched:
        raise IsotuneError(
            f"Arm {arm.name!r} searches nothing: hydra.sweeper.lr={s['lr']} fixes the "
            "learning rate, its only searched key, and a study tunes every arm (the baseline "
            "arm too) over the learning rate's range. Fix: give it a range, e.g. "
            "'++hydra.sweeper.lr=\"tag(log, interval(1e-5, 2e-4))\"'."
        )
    study = s["study_name"] or folder.name
    settings = settings_of(sweeper.config, s, space, None, f"{study}_{task}_{arm.name}")
    return replace(
        settings,
        wandb_group=f"{study}-{task}-{arm.name}",
        report_overrides=_report_overrides(sweeper.config.checkpoint.keep, s),
    )


def _compose_arms(
    sweeper: KeepsItsLauncher, plan: StudyPlan, fixed: list[str]
) -> dict[tuple[str, str], DictConfig]:
    """Each (task, arm)'s job, composed once and checked as train.py checks it, so a bad arm
    stops the study here; a task without a config leaves its jobs out (the caller refuses it)."""
    assert sweeper.config is not None and sweeper.hydra_context is not None
    loader = sweeper.hydra_context.config_loader
    jobs = {}
    for task in plan.tasks:
        for arm in plan.arms:
            overrides = [*fixed, f"{TASK_KEY}={task}", *arm.overrides]
            try:
                jobs[task, arm.name] = compose_checked(sweeper.config, loader, overrides)
            except MissingConfigException as error:
                if error.missing_cfg_file == f"{TASK_KEY}/{task}":
                    break
                raise _arm_cannot_run(arm, task, overrides, error) from None
            except Exception as error:  # Hydra's composition errors, the config check's
                raise _arm_cannot_run(arm, task, overrides, error) from None
    return jobs


def _check_fits(
    sweeper: KeepsItsLauncher,
    plan: StudyPlan,
    jobs: dict[tuple[str, str], DictConfig],
    folder: Path,
) -> int:
    """Refuse a study that cannot fit on its disk, each run sized as the baseline arm's on its
    task (the tuning runs counted done first: a report run keeps as much or more); how many of
    its runs go at once."""
    from hydra_plugins.isotune_launcher._sweep_space import (  # imports torch
        check_sweep_fits,
        completed_runs,
        jobs_at_once,
    )

    assert sweeper.config is not None
    tuning = len(plan.arms) * plan.n_trials * len(plan.seeds)
    reports = len(plan.arms) * len(plan.report_seeds)
    kept = _report_overrides(sweeper.config.checkpoint.keep, plain_values(sweeper.settings))
    at_once = jobs_at_once(
        sweeper.config.hydra.launcher, sweeper.settings["n_jobs"] * len(plan.seeds)
    )
    sized, completed = [], 0
    for task in plan.tasks:
        job = jobs[task, plan.baseline]
        report = OmegaConf.merge(job, OmegaConf.from_dotlist(list(kept)))
        done = completed_runs(folder / task)
        sized += ([job] * tuning + [report] * reports)[done:]
        completed += done
    check_sweep_fits(folder, sized, at_once, completed)
    return at_once


def _plan_lines(plan: StudyPlan, folder: Path) -> tuple[int, list[str]]:
    """The runs the study has left and what its preview says of them."""
    from hydra_plugins.isotune_launcher._sweep_space import completed_runs  # imports torch

    per_search = plan.jobs // len(plan.searches)
    done = {
        (task, arm.name): min(completed_runs(folder / task / arm.name), per_search)
        for task, arm in plan.searches
    }
    left = plan.jobs - sum(done.values())
    lines = [
        f"A study of {counted(len(plan.searches), 'search', 'searches')}, each "
        f"{counted(plan.n_trials, 'trial')} on {counted(len(plan.seeds), 'tuning seed')} "
        f"{list(plan.seeds)} then its best trial on "
        f"{counted(len(plan.report_seeds), 'report seed')} {list(plan.report_seeds)}: a budget of "
        f"{counted(plan.jobs, 'run')} when none is pruned or fails; "
        f"{plan.jobs - left} completed in the folder, {left} to run.",
        *(f"  {task}/{arm}: {per_search} runs, {n} completed" for (task, arm), n in done.items()),
        "  (the trials are sampled as each search goes: one job per (task, arm) is composed)",
    ]
    return left, lines


def _report_overrides(keep: str, settings: dict[str, Any]) -> tuple[str, ...]:
    """What the report runs add: ``checkpoint.keep=slim`` where ``keep_report_models`` asks."""
    wanted = settings["keep_report_models"] and keep == "none"
    return (REPORT_MODELS_KEPT,) if wanted else ()


def _what_is_kept(keep: str, keep_report_models: bool) -> str:
    """The start message's word on what the runs keep, and so what a submission can use."""
    if keep != "none":
        return f"checkpoint.keep={keep} (every run keeps its best model)"
    if keep_report_models:
        return (
            "checkpoint.keep=none for the tuning runs (their records, not their models); the "
            f"report runs keep their best model ({REPORT_MODELS_KEPT}, "
            "hydra.sweeper.keep_report_models=true): python -m isotune.submission <study "
            "folder> submits the winners"
        )
    return (
        "checkpoint.keep=none (the runs' records are kept, not their models; "
        "hydra.sweeper.keep_report_models=true keeps the report runs' models for a submission)"
    )


def _say_searches_left_out(plan: StudyPlan, folder: Path) -> None:
    """Say so when the command continues only some of the study folder's searches."""
    typed = {f"{task}/{arm.name}" for task, arm in plan.searches}
    others = [search for search in searches_in(folder) if search not in typed]
    if others:
        log.info(
            f"The study folder holds {len(others)} other searches ({', '.join(others)}), left "
            "as they are: this command's record and study report cover the searches typed "
            f"({', '.join(sorted(typed))}); type their tasks and arms to report them again "
            "(docs/study.md)."
        )


def _refuse_unknown_keys(settings: dict[str, Any], search_preset: str | None) -> None:
    """Refuse a ``hydra.sweeper`` key the study has not: the study would run without it."""
    plain_search = {key for key in PLAIN_SEARCH_KEYS if settings.get(key) is not None}
    known = {f.name for f in fields(StudySweeperConf) if not f.name.startswith("_")}
    known -= set(PLAIN_SEARCH_KEYS)
    unknown = sorted(
        key
        for key in settings
        if (key not in known and key not in PLAIN_SEARCH_KEYS and not key.startswith("_"))
        or key in plain_search
    )
    if unknown and search_preset is not None:
        catalog = settings.get("catalog") or {}
        arm = (
            f"choose its arm, e.g. 'hydra.sweeper.arms=[none,{search_preset}]'"
            if search_preset in catalog
            else f"choose among the catalog's arms ({', '.join(catalog)}), each of which "
            "searches the learning rate (hydra.sweeper.lr) beside its own knob"
        )
        raise IsotuneError(
            f"hparams_search={search_preset} and a study= preset are both on the command line: "
            "the study's sweeper runs, and the search preset's "
            f"hydra.sweeper.{unknown[0]} would change nothing (a study tunes each arm over its "
            "catalog's params and hydra.sweeper.lr). Fix: drop hparams_search="
            f"{search_preset}; to compare its knob, {arm} (docs/study.md); or run the search "
            f"alone: python train.py -m hparams_search={search_preset}."
        )
    if unknown:
        raise IsotuneError(
            f"hydra.sweeper.{unknown[0]} is not a setting of a study (hydra/sweeper=study), so "
            "it would change nothing: its settings are "
            f"{', '.join(sorted(known - {'defaults'}))}. "
            "Fix: drop it; an arm's searched keys are hydra.sweeper.catalog.<arm>.params, the "
            "learning rate's range is hydra.sweeper.lr (docs/study.md)."
        )


def _tasks_and_fixed(arguments: list[str], tasks: list[str]) -> tuple[list[str], list[str]]:
    """The command line's tasks (else the preset's) and its plain overrides; another sweep, or a
    fixed learning rate, is refused."""
    fixed = []
    for override in OverridesParser.create().parse_overrides(arguments):
        key = override.get_key_element()
        if key == LR_KEY and not override.is_sweep_override():
            raise IsotuneError(
                f"{override.input_line} fixes the learning rate, which a study searches for every "
                "arm over one range (hydra.sweeper.lr), so that the baseline arm is tuned as much "
                "as the others. Fix: drop it; to narrow the range, type e.g. "
                "'++hydra.sweeper.lr=\"tag(log, interval(1e-5, 1e-4))\"' instead."
            )
        if key == TASK_KEY:
            tasks = override_values(override)
        elif override.is_sweep_override():
            raise IsotuneError(
                f"{override.input_line} sweeps a key on a study's command line: a study searches "
                "only its arms' keys (hydra.sweeper.catalog) and grids only task. Fix: give "
                f"{key} one value, or search it in an arm's params."
            )
        else:
            fixed.append(override.input_line)
    return tasks, fixed


def _in_config(job: DictConfig, key: str) -> bool:
    """Whether ``key`` is a config group or a key of ``job``."""
    if key in job.hydra.runtime.choices:
        return True
    missing = object()
    return OmegaConf.select(job, key, default=missing, throw_on_missing=False) is not missing


def _arm_cannot_run(arm: Arm, task: str, overrides: list[str], error: Exception) -> IsotuneError:
    first = str(error).split("\nConfig search path:")[0].strip()
    return IsotuneError(
        f"Arm {arm.name!r} cannot run on task {task} ({' '.join(overrides)}): "
        f"{type(error).__name__}: {first}\nFix: correct its overrides "
        f"({arm.where}.overrides) or the command line; nothing has run yet."
    )
