"""``python -m isotune.dashboard``: save the project's W&B workspace, or a sweep's W&B report.

    python -m isotune.dashboard workspace [--entity E] [--project P] [--dry-run]
    python -m isotune.dashboard report SWEEP [--entity E] [--project P] [--out DIR] [--dry-run]

``workspace`` saves :mod:`isotune.dashboard.layout`'s sections; ``report`` aggregates the sweep
as ``python -m isotune.aggregate`` does (into ``--out`` to leave a carried folder as it is), logs
its summary run and saves a report with the sections its runs logged. With ``--dry-run``, or
without W&B credentials or network (one line says which), each writes its view as JSON instead.
Docs: docs/dashboards.md.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from isotune.dashboard.layout import Section, dashboard_sections, used_sections
from isotune.dashboard.run_file import run_keys
from isotune.dashboard.views import panels_of, sweep_report, workspace, write_json
from isotune.errors import IsotuneError
from isotune.sweeps.runs import Sweep
from isotune.tracking.reporting import counted
from isotune.tracking.wandb_status import wandb_online

WORKSPACE_JSON = Path("logs") / "dashboards" / "workspace-{project}.json"
REPORT_JSON = "wandb_report.json"  # in the output folder, beside sweep_report.md
# The task table of the checkout the package runs from (README's set-up: pip install -e .).
TASKS = Path(__file__).resolve().parents[3] / "conf" / "task"


def task_metrics(folder: Path) -> dict[str, str]:
    """Each task's primary dev metric, from the task table (``conf/task/*.yaml``)."""
    from omegaconf import OmegaConf

    tables = sorted(folder.glob("*.yaml"))
    if not tables:
        raise IsotuneError(
            f"No task table in {folder}: pass --tasks with the folder of the task configs "
            "(conf/task of an isotune checkout)."
        )
    # task=files has none of its own (its files decide it): its runs land in their metric's chart
    return {
        task.name: task.primary_metric
        for task in map(OmegaConf.load, tables)
        if task.primary_metric is not None
    }


def wandb_runs_below(folders: Sequence[Path]) -> dict[str, Path]:
    """The W&B runs of run folders: id -> run file (``wandb/[offline-]run-<date>-<id>/``)."""
    return {
        run_file.parent.name.rsplit("-", 1)[1]: run_file
        for folder in folders
        for run_file in sorted(folder.glob("wandb/*run-*/run-*.wandb"))
    }


def search_sections(
    sweeps: Sequence[Sweep],
) -> tuple[list[tuple[str, str, list[str]]], dict[str, Path]]:
    """The report's section of each search among ``sweeps`` (heading, its search_report.md under
    that heading, its figures' names) and those figures, named ``<search folder>/<figure>`` so
    that two searches' do not collide, for the summary run to log with the aggregate's."""
    from isotune.search.report import search_outputs

    sections, figures = [], {}
    for sweep in sweeps:
        if not sweep.is_search:
            continue
        text, drawn = search_outputs(sweep.dir)
        body = _under_heading(text)
        named = {f"{sweep.dir.name}/{name}": path for name, path in drawn.items()}
        sections.append((f"Search {sweep.dir.name}", body, list(named)))
        figures |= named
    return sections, figures


def study_section(folder: Path) -> tuple[list[tuple[str, str, list[str]]], dict[str, Path]]:
    """The report's opening section when ``folder`` is a study's (its study_report.md and
    figures, as :func:`search_sections` gives a search's); none otherwise."""
    from isotune.study.report import study_outputs

    outputs = study_outputs(folder)
    if outputs is None:
        return [], {}
    text, drawn = outputs
    named = {f"{folder.name}/{name}": path for name, path in drawn.items()}
    return [(f"Study {folder.resolve().name}", _under_heading(text), list(named))], named


def _under_heading(text: str) -> str:
    """A report's Markdown as a section's body: its title dropped (the section's heading
    instead), its parts one level below."""
    body = re.sub(r"\A# .*\n+", "", text)
    return re.sub(r"^(#+) ", r"#\1 ", body, flags=re.MULTILINE)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m isotune.dashboard",
        description="Save the project's W&B workspace or a sweep's W&B report (JSON with "
        "--dry-run or without W&B credentials). Sections: docs/dashboards.md.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (
        ("workspace", "the project's workspace"),
        ("report", "a report of one sweep"),
    ):
        command = commands.add_parser(name, help=help_text)
        if name == "report":
            command.add_argument("sweep", type=Path, help="a sweep's (or a run's) output folder")
        command.add_argument(
            "--entity",
            default=os.environ.get("WANDB_ENTITY", ""),
            help="W&B entity (default: $WANDB_ENTITY, else your W&B default entity)",
        )
        command.add_argument(
            "--project",
            default=os.environ.get("WANDB_PROJECT", "isotune"),
            help="W&B project (default: $WANDB_PROJECT or isotune, as training runs)",
        )
        command.add_argument(
            "--out",
            type=Path,
            help="output folder of the aggregate and wandb_report.json (default: the sweep folder)"
            if name == "report"
            else f"where the JSON goes (default: {WORKSPACE_JSON})",
        )
        command.add_argument(
            "--dry-run", action="store_true", help="write the JSON, save nothing to W&B"
        )
    commands.choices["workspace"].add_argument(
        "--tasks", type=Path, default=TASKS, help=f"the task configs (default: {TASKS})"
    )
    args = parser.parse_args(argv)
    try:
        if args.command == "workspace":
            return _workspace(args)
        return _report(args)
    except IsotuneError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def _workspace(args: argparse.Namespace) -> int:
    sections = dashboard_sections(task_metrics(args.tasks))
    out = args.out or Path(str(WORKSPACE_JSON).format(project=args.project))
    return _save_or_write(
        args, lambda entity: workspace(entity, args.project, sections, args.project), out, None
    )


def _report(args: argparse.Namespace) -> int:
    from isotune.study.report import stated_runs_held_back
    from isotune.sweeps.aggregate import aggregate, write_outputs
    from isotune.sweeps.comparisons import comparison_counts
    from isotune.sweeps.report import log_to_wandb, paired_markdown

    out = args.out or args.sweep  # a carried folder stays as it is with --out elsewhere
    # a study's locked plan verified, its stated seeds held back as the aggregate holds them
    result = aggregate([args.sweep], held_back=stated_runs_held_back)
    _, figures, report_path = write_outputs(result, out)
    searches, search_figures = search_sections(result.sweeps)
    study, study_figures = study_section(args.sweep)  # a study's report opens with it
    searches, search_figures = [*study, *searches], {**study_figures, **search_figures}
    title = args.sweep.resolve().name  # the group of the aggregate's summary run
    run_files = wandb_runs_below([run.job_dir for run in result.runs])
    logged: set[str] = set()
    for run_file in run_files.values():
        keys = run_keys(run_file)
        logged |= keys.history | keys.summary
    tasks = {run.field("task"): run.field("primary_metric") for run in result.runs}
    sections: list[Section] = dashboard_sections(tasks)
    if run_files:
        sections = used_sections(sections, logged)
    else:
        print(
            f"No run below {args.sweep} logged to W&B (train with logger=wandb): the report's "
            "run panels will be empty."
        )
    holm_wilcoxon, holm_t, _ = comparison_counts(result.paired)
    texts = [
        ("Results", result.results()),
        (
            "Paired statistics against the baseline",
            f"{paired_markdown(result.paired)}\n\nHolm-adjusted p over the {holm_wilcoxon} "
            f"comparisons with a Wilcoxon p and the {holm_t} with a t-test p; methods and "
            f"caveats: {report_path.name}, written beside {REPORT_JSON}.",
        ),
    ]

    def build(entity: str):
        return sweep_report(
            entity, args.project, title, texts, figures, sorted(run_files), sections, searches
        )

    def log_summary_run(entity: str) -> None:
        log_to_wandb(
            result.tables(),
            {**search_figures, **figures},
            report_path,
            args.project,
            title,
            online=True,
            entity=entity,
        )

    return _save_or_write(args, build, out / REPORT_JSON, log_summary_run)


def _save_or_write(args, build, out: Path, before_saving) -> int:
    """Save the view built for the entity, or, with --dry-run or offline, write its JSON and
    say in one line what would be saved."""
    online, reason = (False, "") if args.dry_run else wandb_online()
    if online:
        import wandb

        entity = args.entity or wandb.Api().default_entity
        if before_saving is not None:
            before_saving(entity)  # the report's summary run, in the report's entity
        view = build(entity)
        view.save()
        write_json(view, out)
        print(f"Saved the {args.command} to {entity}/{args.project}: {view.url} (JSON: {out})")
        return 0
    view = build(args.entity)
    write_json(view, out)
    what = (
        f"wrote {out}: the {args.command} it would save to "
        f"{args.entity or '<your default entity>'}/{args.project}, "
        f"{counted(len(panels_of(view)), 'panel')}"
    )
    if args.dry_run:
        print(f"Dry run: {what}.")
    else:
        print(f"W&B offline ({reason}): {what}; save it later with the same command.")
    return 0
