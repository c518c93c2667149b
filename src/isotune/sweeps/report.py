"""What an aggregate leaves besides the tables: ``sweep_report.md``, the status of the runs, and
one W&B summary run.

The report's prose is ``report_template.md`` (shipped with the package), filled with
:meth:`str.format`; the numbers come from the frames of :mod:`isotune.sweeps.tables`,
:mod:`isotune.sweeps.comparisons` and :mod:`isotune.sweeps.figures`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any

import pandas as pd

from isotune.sweeps.figures import FIGURES
from isotune.sweeps.runs import REPORT, SEARCH_REPORT_FILE, TUNING, MissingJob, Run, Sweep
from isotune.sweeps.statistics import BOOTSTRAP_MIN_PAIRS
from isotune.sweeps.tables import averaged_metrics, measure_label, number_cell
from isotune.tracking.reporting import markdown_table


def sweep_report(**fields: Any) -> str:
    """``sweep_report.md``: the template's fields, already rendered (see the template)."""
    template = resources.files("isotune.sweeps").joinpath("report_template.md")
    return template.read_text(encoding="utf-8").format(**fields)


def paired_markdown(paired: pd.DataFrame) -> str:
    """One row per configuration and task; the bootstrap interval's column only if any has one."""
    if paired.empty:
        return "No configuration to compare: every configuration is a baseline."
    bootstrap = bool(paired["bootstrap_low"].notna().any())
    header = ["configuration", "baseline", "task", "n", "median Δ", "mean Δ", "95% t interval"]
    if bootstrap:
        header.append("95% bootstrap")
    header += ["Wilcoxon p", "t-test p", "Holm p (Wilcoxon / t)", "note"]
    body = []
    for r in paired.itertuples(index=False):
        t = _interval(r.t_low, r.t_high) + (" *" if r.excludes_zero is True else "")
        row = [r.configuration, r.baseline, r.task, r.n, _signed(r.median_difference)]
        row += [_signed(r.mean_difference), t]
        if bootstrap:
            row.append(_interval(r.bootstrap_low, r.bootstrap_high))
        row += [_p(r.wilcoxon_p), _p(r.ttest_p), f"{_p(r.wilcoxon_p_holm)} / {_p(r.ttest_p_holm)}"]
        body.append([*row, r.note])
    return markdown_table(header, body) + _intention_to_treat_markdown(paired)


def _intention_to_treat_markdown(paired: pd.DataFrame) -> str:
    """Under the table, for each comparison where a run of either side ended without a score:
    the same test with it at its trivial score; "" where none did."""
    if "intention_to_treat" not in paired:
        return ""
    lines = [
        f"- {r.configuration} vs {r.baseline} on {r.task}: {r.intention_to_treat}"
        for r in paired.itertuples(index=False)
        if isinstance(r.intention_to_treat, str) and r.intention_to_treat
    ]
    return "\n\n" + "\n".join(lines) if lines else ""


def paired_learned_markdown(paired: pd.DataFrame) -> str:
    """The paired statistics over the runs that learned, or why there are none to show."""
    failed = paired["failed"].gt(0) | paired["baseline_failed"].gt(0)
    if not paired.empty and not failed.any():
        return "The same: no compared run failed to learn."
    return paired_markdown(paired)


def bootstrap_sentence(paired: pd.DataFrame) -> str:
    shown = "shown" if paired["bootstrap_low"].notna().any() else "none here"
    return f"BCa bootstrap interval (seeded) only from {BOOTSTRAP_MIN_PAIRS} pairs ({shown})."


def across_markdown(across: pd.DataFrame, metrics: Mapping[str, str]) -> str:
    """The configurations' means over tasks side by side, and, where the tasks' ``metrics``
    (task -> metric) differ, the sentence saying that the means average them."""
    if across.empty:
        return "No configuration to compare."
    header = ["configuration", "baseline", "mean of medians", "baseline's", "Δ"]
    body = []
    for r in across.itertuples(index=False):
        row = [r.configuration, r.baseline, number_cell(r.mean_of_medians)]
        row += [number_cell(r.baseline_mean_of_medians), _signed(r.difference)]
        counts = f"{r.tasks_better} / {r.tasks_worse} / {r.tasks_equal} of {r.tasks_compared}"
        body.append([*row, counts])
    table = markdown_table([*header, "better / worse / equal"], body)
    mixed = averaged_metrics("mean of medians", metrics)
    return f"{table}\n\n{mixed}" if mixed else table


def correlations_markdown(correlations: pd.DataFrame) -> str:
    """One row per task and measure: rho (p, n) over all runs, then within each configuration."""
    if correlations.empty:
        return "No run has both a score and these isotropy measures."
    groups = list(dict.fromkeys(correlations["configuration"]))  # pooled first, then in order
    cells = {(r.task, r.measure, r.configuration): r for r in correlations.itertuples(index=False)}
    body = [
        [task, measure_label(measure), *(_rho(cells.get((task, measure, g))) for g in groups)]
        for task, measure in dict.fromkeys(
            zip(correlations.task, correlations.measure, strict=True)
        )
    ]
    return markdown_table(["task", "measure", *groups], body)


def _rho(row: Any) -> str:
    if row is None:
        return "–"
    if row.rho is None or pd.isna(row.rho):
        return f"n/a, {row.note.rstrip('.')} (n = {row.n})"
    return f"{row.rho:+.2f} (p = {row.p:.2g}, n = {row.n})"


def figures_markdown(figures: Mapping[str, Path]) -> str:
    """Each figure kind in turn, one image per task."""
    if not figures:
        return "No figures: no completed run."
    sections = []
    for kind, title in FIGURES.items():
        names = [name for name in figures if name.startswith(f"{kind}_")]
        if names:
            sections.append(
                f"### {title}\n\n" + "\n\n".join(f"![{n}]({figures[n].name})" for n in names)
            )
    return "\n\n".join(sections)


def _unknown_jobs(sweep: Sweep) -> str:
    """Why a sweep's missing jobs cannot be counted: its jobs are not a list fixed up front."""
    if sweep.is_study:
        return (
            "a study: its jobs are its searches', listed here with them; the study's command, "
            "typed again, continues every search"
        )
    if sweep.is_search:
        return (
            "a search: its jobs are the trials its study asked, listed with their states in its "
            "trials.csv; the search's command, typed again, runs what it lacks"
        )
    return f"unknown, its sweeper {sweep.sweeper} has no fixed list of jobs"


def searches_markdown(sweeps: Sequence[Sweep]) -> str:
    """For each search among ``sweeps``: which rows are its trials and which its report, and where
    its held-out comparison is (empty when there is no search)."""
    searches = [sweep for sweep in sweeps if sweep.is_search]
    if not searches:
        return ""
    lines = [
        f"`search={TUNING}` rows: a search's trials on its tuning seeds, with no Δ (its baseline "
        f"ran on the report seeds only, which share no seed with them). `search={REPORT}` rows: "
        "the winner and the baseline on the report seeds, paired seed by seed. The held-out "
        "comparison, and how much the winner's tuning-seed value flatters it (it was chosen as "
        "the best), are in the search's report:",
        "",
    ]
    lines += [f"- {sweep.dir / SEARCH_REPORT_FILE}" for sweep in searches]
    return "\n".join(lines) + "\n"


def _outside_studies(sweeps: Sequence[Sweep]) -> list[Sweep]:
    """``sweeps`` but the searches of a study among them: the study stands for them."""
    studies = [sweep.dir for sweep in sweeps if sweep.is_study]
    return [
        sweep
        for sweep in sweeps
        if not any(sweep.dir != study and sweep.dir.is_relative_to(study) for study in studies)
    ]


def status_markdown(
    runs: Sequence[Run],
    unfinished: Sequence[Run],
    missing: Sequence[MissingJob],
    sweeps: Sequence[Sweep],
    duplicates: Sequence[tuple[str, Sequence[Run]]],
    now: datetime,
) -> str:
    """Unfinished and missing jobs (rerun a sweep's with ``python -m isotune.rerun <sweep_dir>``; a
    search or study continues when its command is typed again), the runs that took several
    attempts (time limits, preemptions, reruns) and the duplicates (label, runs) of which the
    tables keep the latest."""
    lines = [f"## Failed or unfinished runs ({len(unfinished)})", ""]
    lines += [f"- {run.job_dir}: {run.describe(now)}" for run in unfinished] or ["None."]
    lines += ["", f"## Missing runs ({len(missing)})", ""]
    sweeps = _outside_studies(sweeps)  # a study's searches have no command but the study's
    unknown = [sweep for sweep in sweeps if not sweep.enumerable]
    lines += [f"- {sweep.dir}: {_unknown_jobs(sweep)}" for sweep in unknown]
    lines += [f"- {job.sweep.dir} #{job.number}: {' '.join(job.overrides)}" for job in missing]
    if not missing and not unknown:
        lines += ["None."]
    elif not missing and len(unknown) < len(sweeps):
        lines += ["None in the other folders."]
    rerun = [sweep for sweep in sweeps if not (sweep.is_search or sweep.is_study)]
    if (unfinished or missing) and rerun:
        lines += [
            "",
            "Rerun them (--dry-run shows the commands first; runs still marked running, which "
            "may be alive, only with --include-running):",
        ]
        lines += [f"    python -m isotune.rerun {sweep.dir}" for sweep in rerun]
    continued = [
        sweep
        for sweep in sweeps
        if sweep not in rerun and any(run.path.is_relative_to(sweep.dir) for run in unfinished)
    ]
    if continued:
        lines += [
            "",
            "A search or study is not rerun job by job: its own command, typed again, continues "
            f"it where it stopped ({', '.join(str(sweep.dir) for sweep in continued)}).",
        ]
    if several := [run for run in runs if run.attempts > 1]:
        lines += ["", f"## Runs that took several attempts ({len(several)})", ""]
        lines += [f"- {run.job_dir}: {_attempts(run)}" for run in several]
    if duplicates:
        lines += ["", "## Duplicate runs (the tables keep the latest of each)", ""]
        lines += [
            f"- {label}: " + ", ".join(str(run.job_dir) for run in runs)
            for label, runs in duplicates
        ]
    return "\n".join(lines) + "\n"


def _attempts(run: Run) -> str:
    """``3 attempts: interrupted (SIGUSR2), interrupted (SIGUSR2), completed``."""
    ends = [
        f"{attempt.get('status')} ({attempt['ended_by']})"
        if attempt.get("status") != "completed" and attempt.get("ended_by")
        else str(attempt.get("status"))
        for attempt in run.result.get("attempts", [])
    ]
    return f"{run.attempts} attempts: " + ", ".join(ends)


def log_to_wandb(
    tables: Mapping[str, pd.DataFrame],
    figures: Mapping[str, Path],
    report: Path,
    project: str,
    group: str,
    online: bool,
    entity: str | None = None,
) -> Path:
    """One summary run (job type ``aggregate``) in ``entity``/``project`` (the default entity when
    None) and ``group``: the tables as W&B Tables, the figures as images, the report as a file.
    Offline without credentials (``wandb sync`` uploads it later). Returns the run's folder."""
    import wandb

    run = wandb.init(
        entity=entity,
        project=project,
        group=group,
        job_type="aggregate",
        name=f"summary-{group}",
        dir=str(report.parent),
        mode="online" if online else "offline",
        config={"report": str(report)},
    )
    run.log(
        {
            **{f"table/{name}": wandb.Table(dataframe=_loggable(t)) for name, t in tables.items()},
            **{f"figure/{name}": wandb.Image(str(path)) for name, path in figures.items()},
        }
    )
    run.save(str(report), base_path=str(report.parent), policy="now")
    folder = Path(run.dir).parent
    run.finish()
    wandb.teardown()  # waits for the W&B service to write everything: the command ends next
    return folder


def _loggable(table: pd.DataFrame) -> pd.DataFrame:
    """W&B Tables take None, not NaN or pandas' NA, for a missing cell."""
    return table.astype(object).where(table.notna(), None)


def _signed(value: Any) -> str:
    return "n/a" if value is None or pd.isna(value) else f"{value:+.2f}"


def _p(value: Any) -> str:
    return "n/a" if value is None or pd.isna(value) else f"{value:.3g}"


def _interval(low: Any, high: Any) -> str:
    return "n/a" if low is None or pd.isna(low) else f"[{low:+.2f}, {high:+.2f}]"
