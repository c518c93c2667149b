"""One search, told apart from the launching: it proposes its next jobs and takes their outcomes
(trials, rounds and the report: docs/search.md#how-it-works). Who launches the jobs, and beside
which other searches' jobs, is the caller's (:func:`isotune.search.loop.run_searches`). A trial
whose job has not ended stays unfinished in the study, never given a value or a FAIL.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from optuna.pruners import NopPruner
from optuna.trial import Trial, TrialState

from isotune.atomic_files import write_text
from isotune.errors import IsotuneError
from isotune.search.optuna_study import (
    HOME_ATTR,
    OWNER_ATTR,
    RETRIED_ATTR,
    check_storage,
    open_study,
    owner,
    owner_stopped,
    report_baseline_folder,
    storage_file,
    trial_sampler,
)
from isotune.search.outcomes import (
    JobOutcome,
    TrialRow,
    evaluated_on,
    failure_reason,
    read_outcome,
    trial_value,
)
from isotune.search.report import TRIALS_FILE, HeldOut, trials_table, write_report
from isotune.search.settings import SEED_KEY, SearchSettings
from isotune.search.space import SearchSpace
from isotune.sweeps.runs import SWEEP_FILE
from isotune.sweeps.slurm_jobs import check_no_live_jobs
from isotune.sweeps.summary import summarize_sweep
from isotune.tracking.reporting import counted

log = logging.getLogger(__name__)

REPORT = -1  # the trial number of the held-out report's jobs


def _best_report_folder(trial: int) -> str:
    """Where, under the search folder, the best trial (number ``trial``) runs its report."""
    return f"report/trial-{trial:03d}"


@dataclass(frozen=True)
class Job:
    """One run a search asks for: its folder, seed and task overrides (the seed's included), and
    the trial it belongs to (:data:`REPORT` for the held-out report's runs)."""

    folder: Path
    seed: int
    overrides: tuple[str, ...]
    trial: int


@dataclass
class _Trial:
    """A trial in flight; the rest of its life is :meth:`Search._life`."""

    trial: Any
    home: Path  # the search folder its jobs run in
    outcomes: dict[int, JobOutcome] = field(default_factory=dict)  # by seed
    jobs: list[Job] = field(default_factory=list)  # the round it waits on
    life: Iterator[list[Job]] = field(init=False)  # set once the trial is in flight


class Search:
    """One search in ``folder``: :meth:`open`, then rounds of :meth:`start_trial` (one per free
    slot), :meth:`next_jobs` and :meth:`tell`, until :attr:`finished`; ``sweep_record`` is its
    multirun.yaml."""

    def __init__(self, settings: SearchSettings, folder: Path, sweep_record: str) -> None:
        settings.check()
        check_storage(settings, folder)
        self.settings = settings
        self.folder = folder
        self.sweep_record = sweep_record
        self.study: Any = None
        self.live: dict[int, _Trial] = {}
        self.report_asked = False
        self.report_text: str | None = None
        # The report's runs that did not complete: failures the report counts; the caller says
        # so once every search has ended (:func:`isotune.search.loop.check_reports_complete`).
        self.missing_report_runs: list[JobOutcome] = []
        self.report_runs = 0

    @property
    def space(self) -> SearchSpace:
        return self.settings.space

    @property
    def pruning(self) -> bool:
        return not isinstance(self.study.pruner, NopPruner)

    @property
    def in_flight(self) -> int:
        """Trials started and not ended."""
        return len(self.live)

    @property
    def finished(self) -> bool:
        return self.report_text is not None

    @property
    def owns_its_storage(self) -> bool:
        """Whether the study's file lies in this search's folder (its journal by default): then
        no other search shares it, and every trial of it is this folder's, wherever the folder
        lies now (a copy of it running beside the original included)."""
        file = storage_file(self.settings, self.folder)
        return file is not None and file.resolve().is_relative_to(self.folder.resolve())

    def open(self) -> None:
        """The checks before any job runs (the study's settings, jobs still held by SLURM), then
        the folder's record, and the trials a stopped search left running, to continue."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self.study = open_study(self.settings, self.folder)  # before multirun.yaml is written
        check_no_live_jobs(self.folder, "Continuing the search")
        write_text(self.folder / SWEEP_FILE, self.sweep_record)
        running = self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        for frozen in running:
            if self.owns_its_storage or owner_stopped(frozen, self.folder):
                trial = Trial(self.study, frozen._trial_id)
                self._run(trial, frozen.user_attrs, len(frozen.intermediate_values))
                continue
            others = frozen.user_attrs[OWNER_ATTR]
            log.info(
                f"Trial {frozen.number} runs in another search ({others['folder']} on "
                f"{others['host']}, pid {others['pid']}): left to it"
            )
        if self.live:
            log.info(f"Continuing trials {sorted(self.live)} a stopped search left")
        if self.settings.retry_failed:
            self._retry_failed()
        self.check_failures()

    @property
    def retried(self) -> set[int]:
        """The FAILED trials run again as new ones (:meth:`_retry_failed`)."""
        return set(self.study.user_attrs.get(RETRIED_ATTR, []))

    def _counted(self, *states: TrialState) -> list[Any]:
        """The trials the budget counts (every trial but the failed ones run again), in
        ``states`` when given."""
        retried = self.retried
        return [
            t
            for t in self.study.trials
            if t.number not in retried and (not states or t.state in states)
        ]

    @property
    def trials_spent(self) -> int:
        return len(self._counted())

    def runs(self) -> tuple[int, int]:
        """How many of its runs the search has done (ended, completed or failed) and how many it
        will have done at its end if no trial more is pruned or fails: every trial's tuning seeds
        (a finished trial's: the ones it ran), then the report's runs."""
        jobs_of = [len(t.user_attrs.get("jobs", [])) for t in self._finished_trials()]
        seeds = len(self.settings.seeds)
        done = sum(jobs_of) + sum(
            sum(o.ended for o in live.outcomes.values()) for live in self.live.values()
        )
        to_come = (self.settings.n_trials - len(jobs_of)) * seeds
        reports = len(self.settings.report_seeds) * (1 if self.settings.baseline is None else 2)
        return done + self._report_runs_done(), sum(jobs_of) + to_come + reports

    def _finished_trials(self) -> list[Any]:
        return [t for t in self._counted() if t.state.is_finished()]

    def _report_runs_done(self) -> int:
        """The report's runs already done: all of them once reported; before, those that
        completed in an earlier command (a finished search typed with more report seeds)."""
        if self.finished:
            return self.report_runs
        trials = self._finished_trials()
        if self.live or len(trials) < self.settings.n_trials:
            return 0
        if not any(t.state == TrialState.COMPLETE for t in trials):
            return 0
        return sum(read_outcome(job.folder, job.seed).completed for job in self._report_jobs())

    def start_trial(self) -> bool:
        """Ask the study for a new trial, if the budget has room; whether it did."""
        if self.trials_spent >= self.settings.n_trials:
            return False
        number = len(self.study.trials)
        self.study.sampler = trial_sampler(self.settings, number, self.study.sampler)
        trial = self.study.ask(self.space.distributions())
        trial.set_user_attr(HOME_ATTR, str(self.folder))
        self._run(trial, {})
        return True

    def _run(self, trial: Any, attrs: dict[str, Any], rounds_reported: int = 0) -> None:
        """Put ``trial`` (its user attributes ``attrs``) in flight here, owned by this search. A
        trial a stopped search left goes on after the ``rounds_reported`` it reported, with their
        recorded outcomes, so a continued search prunes and ends as an uninterrupted one would."""
        trial.set_user_attr(OWNER_ATTR, owner(self.folder))
        live = _Trial(trial, self._home(attrs))
        reported = {seed for seeds in self._rounds()[:rounds_reported] for seed in seeds}
        for record in attrs.get("jobs", []):
            if record["seed"] in reported:
                live.outcomes[record["seed"]] = JobOutcome.from_record(record)
        live.life = self._life(live, rounds_reported)
        self.live[trial.number] = live
        self._next_round(live)

    def next_jobs(self) -> list[Job]:
        """The jobs of the next round: those of the trials in flight; once every trial has
        ended, the held-out report's; then none."""
        if self.live:
            return [job for number in sorted(self.live) for job in self.live[number].jobs]
        if self.trials_spent < self.settings.n_trials or self.report_asked:
            return []
        self.report_asked = True
        return self._report_jobs()

    def tell(self, ran: Sequence[tuple[Job, JobOutcome]]) -> None:
        """Take the outcomes of this search's jobs of the round :meth:`next_jobs` gave."""
        if any(job.trial == REPORT for job, _ in ran):
            if all(outcome.ended for _, outcome in ran):
                self._report(ran)
            else:  # asked again when the search is continued
                self.report_asked = False
            return
        for job, outcome in ran:
            self.live[job.trial].outcomes[job.seed] = outcome
        for number in sorted({job.trial for job, _ in ran}):
            live = self.live[number]
            if all(live.outcomes[job.seed].ended for job in live.jobs):
                self._next_round(live)  # else it stays as it is: the same command continues it
        self.check_failures()

    # ---- the trials ----
    def _rounds(self) -> list[list[int]]:
        """The tuning seeds by round: with a pruner one seed a round; without one, all in one."""
        seeds = list(self.settings.seeds)
        return [[seed] for seed in seeds] if self.pruning else [seeds]

    def _next_round(self, live: _Trial) -> None:
        """On with ``live``'s life to the jobs of its next round; a trial whose life has ended
        (told COMPLETE, PRUNED or FAIL) is in flight no more."""
        live.jobs = next(live.life, [])
        if not live.jobs:
            del self.live[live.trial.number]

    def _life(self, live: _Trial, first_round: int) -> Iterator[list[Job]]:
        """A trial from its round ``first_round`` to its end: each round's jobs are yielded to be
        run, their outcomes in ``live.outcomes`` (by seed) when it goes on; then FAIL, PRUNED or
        COMPLETE at the median of its scores."""
        trial, number = live.trial, live.trial.number
        seeds = list(self.settings.seeds)
        rounds = self._rounds()
        overrides = [*self.space.overrides(trial.params), *self.settings.tuning_overrides]
        for at, round_seeds in enumerate(rounds[first_round:], start=first_round):
            yield [
                self._job(overrides, seed, f"trial-{number:03d}", number, live.home)
                for seed in round_seeds
            ]
            ran = [live.outcomes[seed] for seed in seeds if seed in live.outcomes]
            trial.set_user_attr("jobs", [outcome.as_record() for outcome in ran])
            failed = [o for o in map(live.outcomes.get, round_seeds) if not o.completed]
            if failed:
                trial.set_user_attr("reason", failure_reason(failed[0]))
                self.study.tell(trial, state=TrialState.FAIL)
                log.warning(f"Trial {number} FAILED: {failure_reason(failed[0])}")
                return
            for seed in round_seeds:
                trial.report(live.outcomes[seed].score, step=seeds.index(seed))
            # Only while seeds remain: after the last one pruning saves no run, and a PRUNED
            # trial has no value, so the expected best would leave out the worst trials.
            if at < len(rounds) - 1 and trial.should_prune():
                self.study.tell(trial, state=TrialState.PRUNED)
                log.info(f"Trial {number} PRUNED after seed {round_seeds[-1]}")
                return
        value = trial_value([live.outcomes[seed] for seed in seeds])
        self.study.tell(trial, value)
        log.info(f"Trial {number}: {self.space.values(trial.params)} -> {value:.4f}")

    def check_failures(self) -> None:
        """The one failure rule (docs/search.md#how-it-works, "Failed runs count")."""
        failed = self._counted(TrialState.FAIL)
        rate, budget = self.settings.max_failure_rate, self.settings.n_trials
        allowed = math.floor(rate * budget + 1e-9)
        if len(failed) <= allowed:
            return
        reasons = "\n".join(f"  trial {t.number}: {t.user_attrs.get('reason')}" for t in failed)
        needed = math.ceil(len(failed) / budget * 100) / 100
        raise IsotuneError(
            f"{counted(len(failed), 'trial')} FAILED (a job crashed, went NaN or was refused), "
            f"more than the {allowed} that hydra.sweeper.max_failure_rate={rate} of "
            f"hydra.sweeper.n_trials={budget} allows:\n{reasons}\nThe failed trials stay FAIL in "
            "the study and count. "
            "Fix: see what their jobs' results.json and train.log say; once the cause is gone (a "
            "full disk, a missing package, a lost node), type the same command with "
            "hydra.sweeper.retry_failed=true to run each failed trial's configuration again as "
            "a new trial (the failed ones then count nowhere), or with "
            f"hydra.sweeper.max_failure_rate={needed} or higher to go on beside them. A fix "
            "that changes the search's settings (its space, fixed overrides or seeds) needs a "
            "study of its own: hydra.sweeper.study_name=<a new name>."
        )

    def _retry_failed(self) -> None:
        """Enqueue each FAILED trial's values as a new trial, and record the failed one as
        retried, counted nowhere: a cause since fixed is no failure of its values."""
        again = self._counted(TrialState.FAIL)
        if not again:
            return
        for trial in again:
            self.study.enqueue_trial(trial.params, skip_if_exists=False)
        self.study.set_user_attr(RETRIED_ATTR, sorted(self.retried | {t.number for t in again}))
        log.info(
            f"Retrying failed trials {[t.number for t in again]} (hydra.sweeper.retry_failed): "
            "their values run again as new trials; the failed ones count no more"
        )

    # ---- the held-out report ----
    def _report_jobs(self) -> list[Job]:
        if not any(t.state == TrialState.COMPLETE for t in self.study.trials):
            rows = self._rows()
            write_text(self.folder / TRIALS_FILE, trials_table(rows).to_csv(index=False))
            raise IsotuneError(
                f"No trial completed ({len(rows)} pruned or failed): there is no best "
                "configuration to report. Fix: see trials.csv and the jobs' train.log; a looser "
                "pruner or more trials (hydra.sweeper.n_trials) may help."
            )
        best = self.study.best_trial
        reporting = self.settings.report_job_overrides
        best_overrides = [*self.space.overrides(best.params), *reporting]
        seeds = self.settings.report_seeds
        if self.settings.baseline is None:  # a study's search: its baseline is an arm
            baseline_dir, baseline_seeds = "", ()
        else:
            baseline_dir = report_baseline_folder(self.study, self.settings.baseline)
            baseline_seeds = seeds
        baseline_overrides = [*(self.settings.baseline or ()), *reporting]
        return [
            *(self._job(best_overrides, s, _best_report_folder(best.number)) for s in seeds),
            *(self._job(baseline_overrides, s, baseline_dir) for s in baseline_seeds),
        ]

    def _report(self, ran: Sequence[tuple[Job, JobOutcome]]) -> None:
        """The held-out report from the report's jobs and their outcomes: the best trial's runs
        told from the baseline's by their folder, not by their place in the batch."""
        trial = self.study.best_trial
        best = self._row(trial)
        best_folder = self.folder / _best_report_folder(best.number)
        best_runs = [outcome for job, outcome in ran if job.folder.parent == best_folder]
        baseline_runs = [outcome for job, outcome in ran if job.folder.parent != best_folder]
        shared = set(self.space.fixed)  # what both run with: the table shows what sets them apart
        held_out = HeldOut(
            best=best,
            best_overrides=[o for o in self.space.overrides(trial.params) if o not in shared],
            baseline_overrides=[o for o in self.settings.baseline or () if o not in shared],
            best_runs=best_runs,
            baseline_runs=baseline_runs,
            chosen_on=evaluated_on(self.folder / job.job_dir for job in best.jobs),
            reported_on=evaluated_on(job.folder for job, _ in ran),
        )
        text = write_report(self.folder, self._rows(), held_out, self.settings.maximize, self.study)
        log.info(f"{summarize_sweep(self.folder).text}\n\n{text}")
        self.report_text = text
        self.missing_report_runs = [run for _, run in ran if not run.completed]
        self.report_runs = len(ran)

    def _rows(self) -> list[TrialRow]:
        return [self._row(t) for t in self._finished_trials()]

    def _row(self, trial: Any) -> TrialRow:
        """The trial as its tables show it, each job's folder relative to this search's folder
        (the journal records where it ran then, maybe before the folder was carried)."""
        jobs = [
            dataclasses.replace(job, job_dir=self._job_dir_here(job.job_dir, trial.user_attrs))
            for job in map(JobOutcome.from_record, trial.user_attrs.get("jobs", []))
        ]
        return TrialRow(
            number=trial.number,
            state=trial.state.name,
            values=self.space.values(trial.params),
            value=trial.value if trial.state.name == "COMPLETE" else None,
            jobs=jobs,
            reason=trial.user_attrs.get("reason", ""),
        )

    def _job_dir_here(self, recorded: Path, attrs: dict[str, Any]) -> Path:
        """A tuning job's folder (``<trial's home>/trial-<n>/seed-<s>``, recorded where it ran)
        relative to this search's folder, from where the trial's home is now."""
        home = self._home(attrs)
        return Path(os.path.relpath(home / Path(*Path(recorded).parts[-2:]), self.folder))

    def _home(self, attrs: dict[str, Any]) -> Path:
        """Where the jobs of a trial (its user attributes ``attrs``) run: this folder, wherever
        it lies now, when the study's file is in it; else the folder that started the trial."""
        return self.folder if self.owns_its_storage else Path(attrs.get(HOME_ATTR, self.folder))

    def _job(
        self,
        overrides: list[str],
        seed: int,
        where: str,
        trial: int = REPORT,
        home: Path | None = None,
    ) -> Job:
        task_overrides = (
            *overrides,
            f"{SEED_KEY}={seed}",
            *self.settings.wandb_overrides(where, trial == REPORT),
        )
        return Job((home or self.folder) / where / f"seed-{seed}", seed, task_overrides, trial)
