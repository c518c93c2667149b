"""The ask-launch-tell loop: the jobs of one or several searches, launched together in batches,
so that several searches share a launcher's slots instead of running one after another.

How each job ended is read from its results.json, not from what the launcher returns or raises
(:mod:`isotune.search.outcomes`). A job that has not ended after its batch is no result: its trial
stays unfinished, and the loop stops with :class:`JobsNotEnded` once the other jobs' outcomes are
told; the same command continues (docs/search.md#how-it-works).
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

from isotune.errors import IsotuneError, JobsNotEnded, first_line
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
            log.error(f"The launcher stopped: {first_line(launcher_error)} (every job had ended)")


def _interleaved(queues: Sequence[list]) -> list:
    """One job of each search in turn: a study's report batch runs every arm's run of a seed side
    by side, so that a study stopped in a sitting leaves whole pairs, not one arm's seeds."""
    return [entry for turn in itertools.zip_longest(*queues) for entry in turn if entry is not None]


class Progress:
    """Where the searches stand: runs done of the runs planned, the time this command has run
    and the time left at its pace so far (wall time over the runs done, several at once)."""

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
        """Say where the searches stand as more of a batch's ``jobs`` end (a study's report can be
        one batch of hours); the searches are read before the batch, never from the thread."""
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
    Called once every report is written, so that one failed held-out run neither stops the other
    searches nor keeps the report from counting it as a failure."""
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
    """Start up to ``room`` new trials, one per search in turn (``searches`` from the one at
    index ``first`` of the caller's order), so every search gets its share of the slots, trial by
    trial; the caller's index of the search whose turn comes next."""
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
    """Refuse to launch a job into a folder a live process holds (a stopped search's SLURM job):
    a second job there would be refused by the folder lock and fail its trial for good."""
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
    """Whether the job's folder holds a link leading out: the refusal recorded, it is not run."""
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
        f"The launcher stopped waiting ({first_line(launcher_error)}), and these"
        if launcher_error is not None
        else "These"
    )
    return (
        f"{why} jobs of the search have not ended (running, interrupted or never started):\n"
        f"{jobs}\nTheir trials stay unfinished, never failed. Jobs still running go on; "
        "once they end (or are cancelled), type the same command again: a completed job is "
        "read, an interrupted one resumes from its last.ckpt."
    )
