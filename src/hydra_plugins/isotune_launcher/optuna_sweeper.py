"""Hydra sweeper ``optuna`` (``hydra/sweeper=optuna``): Optuna >= 4 tunes on tuning seeds, and the
report speaks on others (docs/search.md).

The official ``hydra-optuna-sweeper``'s keys and ``params`` grammar (:mod:`isotune.search.space`),
with a trial that is a configuration over ``seeds``: each seed is one job through the chosen
launcher, and the trial's value is the median best dev primary metric over them, read from the
jobs' results.json (:mod:`isotune.search.outcomes`). A job without a score fails its trial; past
``max_failure_rate`` the search stops with one message. With a pruner the seeds run in rounds,
seed i of every trial of a batch at once, each score reported with its seed index as the step, so
that a trial clearly worse stops before its later seeds; with ``pruner: null`` every seed of a
batch's ``n_jobs`` trials runs at once.

After the last trial, the best trial and the ``baseline`` run on ``report_seeds`` (none of them a
tuning seed) and :mod:`isotune.search.report` compares them there. The study lives in the search
folder (Optuna's journal file, no server): the same command continues it, a trial a stopped search
left running goes on in its own job folders (a completed job is not run again, an interrupted one
resumes from its last.ckpt), trial numbers go on, and the sampler asks trial k with ``seed + k``,
so a continued search asks what an uninterrupted one would. A job of the stopped search still
running (a SLURM job outlives the command that submitted it) is never launched a second time:
the continued search stops with one message naming it, its trial left to continue; so does one
whose SLURM jobs are still queued, which hold no folder yet (:mod:`isotune.sweeps.slurm_jobs`).
"""

import logging
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from hydra_plugins.isotune_launcher.waiting import sigterm_stops_the_wait
from isotune.atomic_files import write_text
from isotune.errors import IsotuneError
from isotune.record import folder_lock
from isotune.search.outcomes import (
    JobOutcome,
    completed_before,
    failure_reason,
    read_outcome,
    trial_value,
)
from isotune.search.report import TRIALS_FILE, HeldOut, TrialRow, trials_table, write_report
from isotune.search.space import SearchSpace, override_value, parse_space
from isotune.sweeps.runs import SWEEP_FILE
from isotune.sweeps.slurm_jobs import check_no_live_jobs, jobs_going_on
from isotune.sweeps.summary import summarize_sweep

log = logging.getLogger(__name__)

JOURNAL_FILE = "optuna_journal.log"  # the study, in the search folder unless storage names one
SETTINGS_ATTR = "isotune_settings"  # the study's user attribute: what its trials were run under
SEED_KEY = "seed"  # what each job of a trial varies


@dataclass
class OptunaSweeperConf:
    _target_: str = "hydra_plugins.isotune_launcher.optuna_sweeper.OptunaSweeper"
    _recursive_: bool = False  # the sampler and pruner stay configs: the sampler is made per trial
    defaults: list[Any] = field(default_factory=lambda: ["_self_", {"sampler": "tpe"}])
    sampler: Any = None  # conf/hydra/sweeper/sampler/ (random: i.i.d.), or any by _target_
    pruner: Any = field(  # over seeds; null: no pruning, every seed of a batch at once
        default_factory=lambda: {
            "_target_": "isotune.search.pruning.NoiseGapPruner",
            "gap_sd": 3.0,  # set by simulation: ~2% of equal trials pruned, most 3 SD worse ones
        }
    )
    direction: str = "maximize"  # the best dev primary metric
    study_name: str | None = None  # null: the search folder's name
    storage: str | None = None  # null: optuna_journal.log in the search folder; or a file or URL
    n_trials: int = 20
    n_jobs: int = 1  # trials asked and launched at once
    max_failure_rate: float = 0.25  # share of finished trials that may FAIL before the search stops
    params: dict[str, Any] = field(default_factory=dict)
    seeds: list[int] = field(default_factory=lambda: [1, 2, 3])  # tuning seeds
    report_seeds: list[int] = field(default_factory=lambda: [101, 102, 103, 104, 105])
    baseline: dict[str, Any] | None = None  # overrides; null: the searched keys at config values


ConfigStore.instance().store(
    group="hydra/sweeper", name="optuna", node=OptunaSweeperConf, provider="isotune"
)


class OptunaSweeper(Sweeper):
    def __init__(self, **settings: Any) -> None:
        self.settings = settings
        self.config: DictConfig | None = None
        self.launcher: Any = None
        self.job_idx = 0

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: list[str]) -> Any:
        assert self.config is not None
        folder = Path(str(self.config.hydra.sweep.dir)).resolve()
        log.info(f"Search folder: {folder}")
        try:
            with sigterm_stops_the_wait(self.launcher):
                search = Search(self.config, self.settings, arguments, folder, self._launch)
                search.run()
        except IsotuneError as error:
            log.error(f"{error}\nSearch folder: {folder}")
            sys.exit(1)
        except (KeyboardInterrupt, SystemExit) as stop:
            if (folder / SWEEP_FILE).is_file():
                log.warning(summarize_sweep(folder).text)
            if going_on := jobs_going_on(folder):
                log.warning(going_on)
            log.warning("Type the same command again to continue the search (docs/search.md).")
            if isinstance(stop, SystemExit):
                raise
            sys.exit(128 + getattr(stop, "signal", signal.SIGINT))

    def _launch(self, jobs: list[list[str]]) -> None:
        """Run ``jobs`` (each its overrides) as one batch on the chosen launcher; how each ended
        is read from its results.json, not from what the launcher returns or raises."""
        try:
            self.launcher.launch(jobs, initial_job_idx=self.job_idx)
        except IsotuneError:
            raise
        except Exception as error:  # submitit's launcher raises at the first failed job
            log.error(f"The launcher stopped: {type(error).__name__}: {error}")
        self.job_idx += len(jobs)


class Search:
    """One search: the checks before any job, the trials, the held-out report."""

    def __init__(
        self,
        config: DictConfig,
        settings: dict[str, Any],
        arguments: list[str],
        folder: Path,
        launch: Any,
    ) -> None:
        self.config = config
        self.s = {
            key: OmegaConf.to_container(value, resolve=True)
            if OmegaConf.is_config(value)
            else value
            for key, value in settings.items()
        }
        self.folder = folder
        self.launch = launch
        self.space = parse_space(self.s["params"] or {}, arguments)
        self.maximize = self.s["direction"] == "maximize"
        self.check()
        self.baseline = self.baseline_overrides()

    # ---- the checks, before any job runs ----
    def check(self) -> None:
        s = self.s
        if not self.space.searched:
            raise IsotuneError(
                "The search has no searched key: hydra.sweeper.params holds no sweep. Fix: "
                "search one, e.g. hydra.sweeper.params.optim.lr='tag(log, interval(1e-5, 1e-3))' "
                "or use an hparams_search= preset."
            )
        if not isinstance(s["n_trials"], int) or s["n_trials"] < 1:
            raise IsotuneError(
                f"hydra.sweeper.n_trials={s['n_trials']} asks for no trial. Fix: "
                "hydra.sweeper.n_trials=20 (any integer from 1)."
            )
        if not isinstance(s["n_jobs"], int) or s["n_jobs"] < 1:
            raise IsotuneError(
                f"hydra.sweeper.n_jobs={s['n_jobs']}: trials launched at once must be an "
                "integer from 1. Fix: hydra.sweeper.n_jobs=1."
            )
        if s["direction"] not in ("maximize", "minimize"):
            raise IsotuneError(
                f"hydra.sweeper.direction={s['direction']} is not maximize or minimize. Fix: "
                "hydra.sweeper.direction=maximize (a dev score)."
            )
        if not 0 <= s["max_failure_rate"] <= 1:
            raise IsotuneError(
                f"hydra.sweeper.max_failure_rate={s['max_failure_rate']} is not a share of "
                "trials. Fix: a value from 0 to 1, e.g. hydra.sweeper.max_failure_rate=0.25."
            )
        for name in ("seeds", "report_seeds"):
            seeds = s[name]
            if not seeds or len(set(seeds)) != len(seeds):
                raise IsotuneError(
                    f"hydra.sweeper.{name}={seeds} must name one or more different seeds. Fix: "
                    f"e.g. hydra.sweeper.{name}=[1,2,3]."
                )
        overlap = sorted(set(s["seeds"]) & set(s["report_seeds"]))
        if overlap:
            raise IsotuneError(
                f"Seeds {overlap} are both tuning seeds (hydra.sweeper.seeds={s['seeds']}) and "
                f"report seeds (hydra.sweeper.report_seeds={s['report_seeds']}): the report would "
                "judge the winner on seeds it was chosen on. Fix: report seeds that are not "
                "tuning seeds, e.g. hydra.sweeper.report_seeds=[101,102,103,104,105]."
            )
        keys = [key.key for key in self.space.searched]
        keys += [text.split("=", 1)[0] for text in self.space.fixed]
        for key in keys:
            if key.lstrip("+~").split("@")[0] == SEED_KEY:
                raise IsotuneError(
                    f"{key} is set by the search: each trial runs on hydra.sweeper.seeds and the "
                    "report on hydra.sweeper.report_seeds. Fix: drop it, and set those instead."
                )
        for searched in self.space.searched:
            self.check_in_config(searched.key, "searched key")
        for key in self.s["baseline"] or {}:
            self.check_in_config(key, "baseline's key (hydra.sweeper.baseline)")
        self.check_storage()

    def check_in_config(self, key: str, what: str) -> None:
        if key.startswith("+"):  # adds a key the config lacks, as the user asked
            return
        name = key.lstrip("~").split("@")[0]
        if name in self.config.hydra.runtime.choices:
            return
        missing = object()
        if OmegaConf.select(self.config, name, default=missing, throw_on_missing=False) is missing:
            raise IsotuneError(
                f"The {what} {name} is not in the config, so its value would change nothing "
                "(or stop every job). Fix: a key of conf/train.yaml or a config group "
                "(python train.py --cfg job lists them), spelled as there, e.g. optim.lr or "
                "reg.weight."
            )

    def check_storage(self) -> None:
        path = self.storage_file()
        if path is None:
            return  # a database server: Optuna reports its own errors
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a"):
                pass
        except OSError as error:
            raise IsotuneError(
                f"Cannot write the study's storage {path}: {error.strerror or error}. Fix: "
                "hydra.sweeper.storage=null (a journal file in the search folder) or a file in a "
                "folder you can write."
            ) from None

    def storage_file(self) -> Path | None:
        """The file the study lives in: a journal (``storage`` null or a path) or a SQLite
        database; None for a database server's URL."""
        storage = self.s["storage"]
        if storage is None:
            return self.folder / JOURNAL_FILE
        if str(storage).startswith("sqlite:///"):
            return Path(str(storage).removeprefix("sqlite:///"))
        return None if "://" in str(storage) else Path(str(storage))

    def baseline_overrides(self) -> list[str]:
        """The fixed overrides, then ``baseline`` (default: each searched key at its config
        value)."""
        baseline = self.s["baseline"]
        if baseline is None:
            baseline = {}
            choices = self.config.hydra.runtime.choices
            for searched in self.space.searched:
                name = searched.key.lstrip("+~").split("@")[0]
                if searched.key.startswith("+"):
                    continue  # the config lacks it: the baseline leaves it out
                if name not in choices:
                    baseline[name] = OmegaConf.select(self.config, name)
                elif choices[name] is not None:
                    baseline[name] = choices[name]
        kept = [o for o in self.space.fixed if o.split("=", 1)[0] not in baseline]
        return [*kept, *(f"{key}={override_value(value)}" for key, value in baseline.items())]

    # ---- the study ----
    def study(self) -> Any:
        import optuna

        storage = self.s["storage"]
        if storage is None or "://" not in str(storage):
            from optuna.storages import JournalStorage
            from optuna.storages.journal import JournalFileBackend

            storage = JournalStorage(JournalFileBackend(str(self.storage_file())))
        pruner = self.s["pruner"]
        return optuna.create_study(
            study_name=self.study_name,
            storage=storage,
            sampler=self.sampler(0),
            pruner=instantiate(pruner) if pruner is not None else optuna.pruners.NopPruner(),
            direction=self.s["direction"],
            load_if_exists=True,
        )

    @property
    def study_name(self) -> str:
        return self.s["study_name"] or self.folder.name

    def sampler(self, trial_number: int) -> Any:
        """The sampler that asks trial ``trial_number``: seeded ``seed + trial_number`` when it
        has a seed, so that the trials asked do not depend on where a search was stopped."""
        config = dict(self.s["sampler"])
        if config.get("seed") is not None:
            config["seed"] = int(config["seed"]) + trial_number
        return instantiate(config)

    def settings(self) -> dict[str, Any]:
        """What makes the trials of one study comparable: the space searched, the overrides every
        job gets, the tuning seeds, and the report's seeds, baseline and direction. The folder is
        named by the study, not by these, so a command with other settings would continue the
        study and rank trials run under different ones."""
        from optuna.distributions import distribution_to_json

        distributions = sorted(self.space.distributions().items())
        return {
            "searched": {name: distribution_to_json(d) for name, d in distributions},
            "fixed": sorted(self.space.fixed),
            "seeds": [int(seed) for seed in self.s["seeds"]],
            "report_seeds": [int(seed) for seed in self.s["report_seeds"]],
            "baseline": sorted(self.baseline_overrides()),
            "direction": str(self.s["direction"]),
        }

    def check_same_settings(self, study: Any) -> None:
        """Record the settings in a new study; refuse to continue one made with others. A study
        older than the record is recorded now: its past settings are unknown."""
        settings = self.settings()
        recorded = study.user_attrs.get(SETTINGS_ATTR)
        if recorded is None:
            study.set_user_attr(SETTINGS_ATTR, settings)
            return
        differ = [key for key in settings if recorded.get(key) != settings[key]]
        if differ:
            lines = "\n".join(
                f"  {key}: the study's {recorded.get(key)!r}, this command's {settings[key]!r}"
                for key in differ
            )
            raise IsotuneError(
                f"The study {self.study_name!r} in {self.folder} was made with other settings; "
                f"continuing it would rank trials run under different ones:\n{lines}\nFix: type "
                "the command that made it (its multirun.yaml has the overrides) to continue it, "
                "or give this search a folder of its own: hydra.sweeper.study_name=<a new name>."
            )

    def run(self) -> None:
        import optuna

        self.folder.mkdir(parents=True, exist_ok=True)
        study = self.study()
        self.check_same_settings(study)  # before multirun.yaml is written over, or a job runs
        check_no_live_jobs(self.folder, "Continuing the search")
        write_text(self.folder / SWEEP_FILE, OmegaConf.to_yaml(self.config))
        left_running = [
            optuna.trial.Trial(study, t._trial_id)
            for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
        ]
        if left_running:
            log.info(f"Continuing trials {[t.number for t in left_running]} a stopped search left")
            self.run_trials(study, left_running)
        while len(study.trials) < self.s["n_trials"]:
            batch = []
            for _ in range(min(self.s["n_jobs"], self.s["n_trials"] - len(study.trials))):
                study.sampler = self.sampler(len(study.trials))
                batch.append(study.ask(self.space.distributions()))
            self.run_trials(study, batch)
        self.report(study)

    def run_trials(self, study: Any, trials: list[Any]) -> None:
        """Run ``trials`` over the tuning seeds (in rounds when pruning) and tell Optuna."""
        from optuna.pruners import NopPruner
        from optuna.trial import TrialState

        seeds = self.s["seeds"]
        pruning = not isinstance(study.pruner, NopPruner)
        rounds = [[i] for i in range(len(seeds))] if pruning else [list(range(len(seeds)))]
        live = {trial.number: trial for trial in trials}
        outcomes: dict[int, list[JobOutcome]] = {number: [] for number in live}
        for indices in rounds:
            jobs = [(trial, i) for trial in live.values() for i in indices]
            ran = self.run_jobs(
                [
                    (self.space.overrides(trial.params), seeds[i], f"trial-{trial.number:03d}")
                    for trial, i in jobs
                ]
            )
            for (trial, i), outcome in zip(jobs, ran, strict=True):
                outcomes[trial.number].append(outcome)
                if trial.number not in live:
                    continue
                trial.set_user_attr("jobs", [o.as_record() for o in outcomes[trial.number]])
                if not outcome.completed:
                    trial.set_user_attr("reason", failure_reason(outcome))
                    study.tell(trial, state=TrialState.FAIL)
                    log.warning(f"Trial {trial.number} FAILED: {failure_reason(outcome)}")
                    del live[trial.number]
                    continue
                trial.report(outcome.score, step=i)
                # Only while seeds remain: after the last one pruning saves no run, and a PRUNED
                # trial has no value, so the expected best would leave out the worst trials.
                if pruning and i < len(seeds) - 1 and trial.should_prune():
                    study.tell(trial, state=TrialState.PRUNED)
                    log.info(f"Trial {trial.number} PRUNED after seed {seeds[i]}")
                    del live[trial.number]
        for number, trial in live.items():
            value = trial_value(outcomes[number])
            study.tell(trial, value)
            log.info(f"Trial {number}: {self.space.values(trial.params)} -> {value:.4f}")
        self.check_failure_rate(study)

    def check_failure_rate(self, study: Any) -> None:
        from optuna.trial import TrialState

        finished = [t for t in study.trials if t.state.is_finished()]
        failed = [t for t in finished if t.state == TrialState.FAIL]
        if finished and len(failed) / len(finished) > self.s["max_failure_rate"]:
            reasons = "\n".join(f"  trial {t.number}: {t.user_attrs.get('reason')}" for t in failed)
            raise IsotuneError(
                f"{len(failed)} of {len(finished)} finished trials FAILED (a job crashed, went "
                f"NaN or was refused), more than hydra.sweeper.max_failure_rate="
                f"{self.s['max_failure_rate']}:\n{reasons}\nFix what the jobs' results.json "
                "and train.log say, then type the same command: the search continues."
            )

    def run_jobs(self, jobs: list[tuple[list[str], int, str]]) -> list[JobOutcome]:
        """Each job (overrides, seed, folder under the search folder) that did not complete
        before, as one launch; every job's outcome, in order."""
        planned = []
        to_launch = []
        for overrides, seed, where in jobs:
            subdir = f"{where}/seed-{seed}"
            job_dir = self.folder / subdir
            task_overrides = [*overrides, f"{SEED_KEY}={seed}", *self.wandb_tags(where)]
            done = completed_before(job_dir, seed, task_overrides)
            planned.append((job_dir, seed, done))
            if done is None:
                to_launch.append([*task_overrides, f"hydra.sweep.subdir={subdir}"])
        self.check_none_alive([job_dir for job_dir, _, done in planned if done is None])
        if to_launch:
            self.launch(to_launch)
        return [done or read_outcome(job_dir, seed) for job_dir, seed, done in planned]

    def check_none_alive(self, job_dirs: list[Path]) -> None:
        """Refuse to launch a job into a folder a live process holds: a job of a stopped search
        that outlived it (a SLURM job goes on after the command that submitted it stops). A
        second job there would be refused by the folder lock and fail its trial for good."""
        holders = {folder: folder_lock.holder(folder) for folder in job_dirs}
        alive = {f: pid for f, pid in holders.items() if pid not in (None, os.getpid())}
        if alive:
            jobs = "\n".join(f"  {folder} (pid {pid})" for folder, pid in alive.items())
            raise IsotuneError(
                "Jobs this search would launch are still running in their folders, each held "
                "by a live process (jobs of the stopped search, which outlive it on SLURM):\n"
                f"{jobs}\nLaunching them again would start a second job in each folder. Fix: "
                "wait for them to end (squeue lists them), or cancel them (scancel <job id>), "
                "then type the same command again: a completed job is read, an interrupted one "
                "resumes from its last.ckpt."
            )

    def wandb_tags(self, where: str) -> list[str]:
        """With ``logger=wandb``, each run is tagged with the search and its trial (or report
        side); W&B already groups a trial's runs, whose overrides differ only by seed."""
        if self.config.hydra.runtime.choices.get("logger") != "wandb":
            return []
        tags = [f"search-{self.study_name}", where.replace("/", "-")]
        return [f"logger.wandb.tags=[{','.join(repr(tag) for tag in tags)}]"]

    # ---- the held-out report ----
    def report(self, study: Any) -> None:
        from optuna.trial import TrialState

        rows = [_row(trial, self.space) for trial in study.trials if trial.state.is_finished()]
        complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
        if not complete:
            write_text(self.folder / TRIALS_FILE, trials_table(rows).to_csv(index=False))
            raise IsotuneError(
                f"No trial completed ({len(rows)} pruned or failed): there is no best "
                "configuration to report. Fix: see trials.csv and the jobs' train.log; a looser "
                "pruner or more trials (hydra.sweeper.n_trials) may help."
            )
        best = study.best_trial
        best_overrides = self.space.overrides(best.params)
        report_seeds = self.s["report_seeds"]
        ran = self.run_jobs(
            [(best_overrides, seed, f"report/trial-{best.number:03d}") for seed in report_seeds]
            + [(self.baseline, seed, "report/baseline") for seed in report_seeds]
        )
        n = len(report_seeds)
        shared = set(self.space.fixed)  # what both run with: the table shows what sets them apart
        held_out = HeldOut(
            best=_row(best, self.space),
            best_overrides=[o for o in best_overrides if o not in shared],
            baseline_overrides=[o for o in self.baseline if o not in shared],
            best_runs=ran[:n],
            baseline_runs=ran[n:],
        )
        text = write_report(self.folder, rows, held_out, self.maximize, study)
        log.info(f"{summarize_sweep(self.folder).text}\n\n{text}")


def _row(trial: Any, space: SearchSpace) -> TrialRow:
    jobs = [JobOutcome.from_record(record) for record in trial.user_attrs.get("jobs", [])]
    return TrialRow(
        number=trial.number,
        state=trial.state.name,
        values=space.values(trial.params),
        value=trial.value if trial.state.name == "COMPLETE" else None,
        jobs=jobs,
        reason=trial.user_attrs.get("reason", ""),
    )
