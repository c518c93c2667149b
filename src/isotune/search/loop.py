"""The ask-launch-tell loop: the jobs of one or several searches, launched together in batches.

Each round starts new trials, one per search in turn, until ``trials_at_once`` trials are in flight
over all of them, gathers the next jobs of every search
(:meth:`~isotune.search.search.Search.next_jobs`) and hands those that did not complete before to
the launcher as one batch; how each job ended is read from its results.json,
not from what the launcher returns or raises (:mod:`isotune.search.outcomes`), and each search is
told its own (:meth:`~isotune.search.search.Search.tell`). So several searches share a launcher's
slots instead of running one after another.

Before a batch starts, as in every plain sweep: a job whose folder a live process holds (a job of
a stopped search that outlived it on SLURM) stops the search in one message, since a second job
there would be refused by the folder lock and fail its trial for good; and a job whose folder
holds a link leading out of it (:func:`~isotune.record.folder_links.check_links_stay_inside`) is
refused, the refusal recorded in its results.json, without reaching the launcher.

A job that has not ended after its batch (still running or interrupted when the launcher raised, as
submitit's does at the first job SLURM killed; interrupted by its own signal; never started) is no
result: its trial stays unfinished, and the loop stops with :class:`JobsNotEnded` once the other
jobs' outcomes are told. The same command continues: a completed job is read, an interrupted one
resumes from its last.ckpt.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from isotune.errors import IsotuneError, JobsNotEnded
from isotune.record import folder_lock
from isotune.record.folder_links import check_links_stay_inside, record_refusal
from isotune.search.outcomes import JobOutcome, completed_before, failure_reason, read_outcome
from isotune.search.search import Job, Search
from isotune.tracking.reporting import counted

log = logging.getLogger(__name__)

POLL_SECONDS = 30  # how often the jobs of a running batch are counted
Launch = Callable[[Sequence[Job]], None]  # runs the jobs as one batch; may raise


def run_searches(searches: Sequence[Search], launch: Launch, trials_at_once: int) -> None:
    """Run ``searches`` to their end, their jobs launched together by ``launch``, with at most
    ``trials_at_once`` trials in flight over all of them (``hydra.sweeper.n_jobs``)."""
    if not isinstance(trials_at_once, int) or trials_at_once < 1:
        raise IsotuneError(
            f"hydra.sweeper.n_jobs={trials_at_once}: trials launched at once must be an "
            "integer from 1. Fix: hydra.sweeper.n_jobs=1."
        )
    for search in searches:
        search.open()
    progress = Progress(searches)
    first = 0  # the search offered a trial first, turn by turn
    while not all(search.finished for search in searches):
        room = trials_at_once - sum(s.in_flight for s in searches)
        first = _start_trials([*searches[first:], *searches[:first]], room, first)
        batch = _interleaved([[(search, job) for job in search.next_jobs()] for search in searches])
        if not batch:
            raise RuntimeError("no search has a job to run, yet not every search has finished")
        with progress.watching([job for _, job in batch]):
            outcomes, launcher_error = run_batch([job for _, job in batch], launch)
        ran = list(zip(batch, outcomes, strict=True))
        for search in searches:
            search.tell([(job, outcome) for (owner, job), outcome in ran if owner is search])
        progress.say()
        unended = [outcome for outcome in outcomes if not outcome.ended]
        if unended:
            raise JobsNotEnded(_not_ended(unended, launcher_error))
        if launcher_error is not None:
            log.error(f"The launcher stopped: {_first_line(launcher_error)} (every job had ended)")


def _interleaved(queues: Sequence[list]) -> list:
    """One job of each search in turn: a study's report batch runs every arm's run of a seed side
    by side, so that a study stopped in a sitting leaves whole pairs, not one arm's seeds."""
    return [entry for turn in itertools.zip_longest(*queues) for entry in turn if entry is not None]


class Progress:
    """Where the searches stand, as the field's tools say it: runs done of the runs planned (no
    trial more pruned or failing), the time this command has run and an estimate of the time
    left, from the runs this command has done so far (several at once: the time per run is the
    wall time over the runs done, which the estimate needs)."""

    def __init__(self, searches: Sequence[Search]) -> None:
        self.searches = searches
        self.started = time.monotonic()
        self.done_before, total = self.runs()
        left = total - self.done_before
        if left == 0:
            done = "its one run is" if total == 1 else f"all {total} runs are"
            log.info(
                f"Nothing left to run: {done} done; the report is made again from their records."
            )
        else:
            log.info(f"Runs: {self.done_before}/{total} done, {left} left (fewer if pruned).")

    def runs(self) -> tuple[int, int]:
        counts = [search.runs() for search in self.searches]
        return sum(done for done, _ in counts), sum(total for _, total in counts)

    @contextlib.contextmanager
    def watching(self, jobs: Sequence[Job]) -> Iterator[None]:
        """Say where the searches stand while a batch runs, each time more of its ``jobs`` have
        ended (every :data:`POLL_SECONDS`, read from their results.json): a study's report can
        be one batch of hours. The searches are read here, before the batch, never from the
        watching thread."""
        done, total = self.runs()
        ended_before = _ended(jobs)
        stop = threading.Event()

        def watch() -> None:
            said = ended_before
            while not stop.wait(POLL_SECONDS):
                ended = _ended(jobs)
                if ended > said:
                    self.say(done + ended - ended_before, total)
                    said = ended

        watcher = threading.Thread(target=watch, name="progress", daemon=True)
        watcher.start()
        try:
            yield
        finally:
            stop.set()
            watcher.join()

    def say(self, done: int | None = None, total: int | None = None) -> None:
        """One line: ``done`` of ``total`` runs (default: the searches' counts now)."""
        if done is None or total is None:
            done, total = self.runs()
        now = done - self.done_before
        elapsed = time.monotonic() - self.started
        line = f"Runs: {done}/{total} ({done / total:.0%}), {now} in {_clock(elapsed)}"
        if now > 0 and done < total:
            line += f", about {_clock(elapsed / now * (total - done))} left"
        log.info(line)


def _ended(jobs: Sequence[Job]) -> int:
    return sum(read_outcome(job.folder, job.seed).ended for job in jobs)


def _clock(seconds: float) -> str:
    """``h:mm:ss``."""
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}"


def check_reports_complete(searches: Sequence[Search]) -> None:
    """Stop, in one message naming them, if report runs of any of ``searches`` did not complete.

    Called once every search has ended and its report (and a study's report) is written, so that
    one failed held-out run (a NaN on one report seed) neither stops the other searches nor
    keeps the report from counting it as a failure; the command still exits 1, since the
    comparison lacks that run."""
    lacking = [search for search in searches if search.missing_report_runs]
    if not lacking:
        return
    missing = sum(len(search.missing_report_runs) for search in lacking)
    total = sum(search.report_runs for search in searches)
    runs = "\n".join(
        f"  {failure_reason(run)}" for search in lacking for run in search.missing_report_runs
    )
    raise IsotuneError(
        f"The held-out report lacks {missing} of its {counted(total, 'run')}, so the search did "
        f"not complete; the report counts them as failed:\n{runs}\nFix what their results.json and "
        "train.log say, then type the same command again: the report's runs that did not "
        "complete run again, and the report is made again."
    )


def _start_trials(searches: Sequence[Search], room: int, first: int) -> int:
    """Start up to ``room`` new trials, one per search in turn (``searches`` from the one whose
    turn it is, at index ``first`` of the caller's order), so that every search gets its share
    of the slots; the caller's index of the search whose turn comes next. With one slot, the
    searches take turns trial by trial instead of the first running its whole budget first."""
    starting = list(searches)
    turn = 0
    while room > 0 and starting:
        for search in list(starting):
            if room == 0:
                break
            if search.start_trial():
                room -= 1
                turn = searches.index(search) + 1
            else:
                starting.remove(search)
    return (first + turn) % len(searches)


def run_batch(jobs: Sequence[Job], launch: Launch) -> tuple[list[JobOutcome], Exception | None]:
    """Launch, as one batch, each job that did not complete before; every job's outcome, in
    order, and the error the launcher raised (None if it returned)."""
    done = [completed_before(job.folder, job.seed, job.overrides) for job in jobs]
    to_launch = [job for job, outcome in zip(jobs, done, strict=True) if outcome is None]
    check_none_alive([job.folder for job in to_launch])
    to_launch = [job for job in to_launch if not _refused(job)]
    launcher_error = None
    if to_launch:
        try:
            launch(to_launch)
        except IsotuneError:
            raise
        except Exception as error:  # submitit's launcher raises at the first failed job
            launcher_error = error
    outcomes = [o or read_outcome(job.folder, job.seed) for job, o in zip(jobs, done, strict=True)]
    return outcomes, launcher_error


def check_none_alive(job_dirs: Sequence[Path]) -> None:
    """Refuse to launch a job into a folder a live process holds: a job of a stopped search
    that outlived it (a SLURM job goes on after the command that submitted it stops). A second
    job there would be refused by the folder lock and fail its trial for good."""
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


def _refused(job: Job) -> bool:
    """Whether the job's folder holds a link leading out of it: then the refusal is recorded as
    its failed attempt, and it is not launched."""
    try:
        check_links_stay_inside(job.folder, "hydra.sweep.dir")
    except IsotuneError as error:
        log.error(f"{job.folder} refused: {error}")
        record_refusal(job.folder, list(job.overrides), error)
        return True
    return False


def _not_ended(unended: Sequence[JobOutcome], launcher_error: Exception | None) -> str:
    jobs = "\n".join(f"  {outcome.job_dir}: {outcome.status}" for outcome in unended)
    why = (
        f"The launcher stopped waiting ({_first_line(launcher_error)}), and these"
        if launcher_error is not None
        else "These"
    )
    return (
        f"{why} jobs of the search have not ended (running, interrupted or never started):\n"
        f"{jobs}\nTheir trials stay unfinished, never failed. Jobs still running go on; "
        "once they end (or are cancelled), type the same command again: a completed job is "
        "read, an interrupted one resumes from its last.ckpt."
    )


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"
