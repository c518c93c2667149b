"""The commands of README.md and docs/*.md work as written.

The commands are read from the pages, never listed here, so one added later is tested too: every
``python train.py``, ``python analyze.py`` and ``python -m isotune.*`` command of their code blocks
and of README's opening lines (Run:, Analyse:). Each runs once, as a real subprocess, from one
temporary working directory shared by the module, with only size overrides appended
(``debug=limit``, a small isotropy probe, a small I-STAR shrinkage sample, small analysis samples)
and the tiny test encoder in place of a model that is not available offline (a Hub name, or a
packaged model whose package is not installed). Multirun jobs use the tiny encoder whatever the
model: they test the sweep machinery, and the packaged MiniLM already runs in the README's single
run. Nothing else is added: no ``hydra.run.dir``, ``hydra.sweep.dir`` or
``+key=``. Placeholders such as ``logs/runs/<run>/checkpoints/best.ckpt`` are filled with what the
pages' training commands left in that directory, README's first; a folder of the repository a
command names (``docs/results/<study>``, the project's records) is copied there first, so that it
runs as typed at the repository's root and writes into the copy. Multiruns are cut to two jobs,
searches (``hparams_search=``) to one trial of one tuning seed and one report seed even where the
command sizes them, studies (``study=``) to that on RTE with the arms ``none`` and ``isobn`` and
two report seeds (a stated test's arm and seeds cut with them: ``isobn`` on those two);
``experiment=`` presets and SLURM commands are composed into their job lists, not run. A command
written on several pages, or two that come to the same after the cut and the filling (``-m
task=rte,mrpc,stsb`` and ``-m task=rte,mrpc``), runs once. The runs' code is this checkout's: from a
tree with uncommitted changes (tests run while editing), an aggregate's ``--strict``, which refuses
such runs, gets ``--allow-unknown-code``; from a clean one (CI's clone) it runs as written.
``python predict.py`` commands are read and run as ``analyze.py``'s, with no size added.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from omegaconf import OmegaConf

from isotune.errors import IsotuneError
from isotune.model.encoders import resolve_model_path
from isotune.record.provenance import code_identity
from isotune.study.report import REPORT_FILE as STUDY_REPORT_FILE
from isotune.sweeps.runs import SWEEP_FILE, Sweep
from tests.conftest import ROOT, compose_config

# The README-command tests (each command a real subprocess: a training, an analysis, a sweep).
pytestmark = pytest.mark.slow

README = ROOT / "README.md"
DOCS = "docs"
PAGES = [README, *sorted((ROOT / DOCS).glob("*.md"))]  # README first: its runs fill placeholders
SCRIPTS = ("train.py", "analyze.py", "predict.py")
PACKAGE = "isotune"  # python -m isotune.<module>
MULTIRUN_FLAGS = ("-m", "--multirun")
COMPOSE_ONLY = ("experiment=", "hydra/launcher=slurm")  # presets: too big to run; SLURM: no cluster
ENV_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
SWEEP_DIR = "hydra.sweep.dir="
PLACEHOLDER = re.compile(r"<[^<>=/\s]+>")
ELLIPSIS = "..."

TRAIN_SIZE = {
    "debug": "limit",
    "callbacks.isotropy.probe_size": "32",
    "callbacks.isotropy.figures": "false",
    "reg.shrinkage_examples": "32",  # I-STAR's: 1,000 examples through the encoder each epoch
}
SEARCH = "hparams_search="  # an Optuna search (docs/search.md): its folder is logs/search/<study>
SEARCH_SIZE = {
    "hydra.sweeper.n_trials": "1",
    "hydra.sweeper.seeds": "[1]",
    "hydra.sweeper.report_seeds": "[2]",
}
PREVIEW = "hydra.sweeper.preview=true"  # any sweep's preview (docs/sweeps.md): runs nothing
STUDY = "study="  # arms x tasks of searches (docs/study.md): its folder is logs/study/<study>
# A study's two report seeds: a stated test needs two, and a study's report seeds only grow, so
# every study command of the pages, continuing one folder, is cut to the same two.
STUDY_SIZE = {
    **SEARCH_SIZE,
    "hydra.sweeper.report_seeds": "[2,3]",
    "hydra.sweeper.arms": "[none,isobn]",
    "hydra.sweeper.tasks": "[rte]",
}
# A study's stated test, cut with the study: its arm one of the cut arms, its seeds the cut report
# seeds, its task, level and date as typed.
STATED = "hydra.sweeper.stated="
STATED_SIZE = {"hydra.sweeper.stated.arm": "isobn", "hydra.sweeper.stated.seeds": "[2,3]"}
# A sequential stated test, cut to one look, in a study of its own for each plan the pages state:
# the cut maps every stated test onto the same two seeds, and a study refuses a plan other than
# the one it stored, as it refuses a user (docs/study.md).
STATED_LOOKS_SIZE = {"hydra.sweeper.stated.looks": "[2]"}
ANALYZE_SIZE = {
    "data.dev_examples": "32",
    "data.train_examples": "32",
    "data.frequency_examples": "64",
    "tokens.max_tokens": "300",
    "local.max_points": "200",
}


@dataclass(frozen=True)
class Command:
    """One command of a page: its line as written, environment prefixes, target and arguments,
    and the page it is written on (README.md, docs/<page>.md)."""

    line: str
    env: tuple[tuple[str, str], ...]
    target: str  # "train.py", "analyze.py" or a module such as "isotune.aggregate"
    args: tuple[str, ...]
    page: str = field(default="README.md", compare=False)

    @property
    def written(self) -> str:
        return f"{self.page}: `{self.line}`"

    @property
    def key(self) -> tuple:
        """What the command runs, wherever it is written: GLUE_DIR is set by the test anyway."""
        return (self.target, self.args, tuple(e for e in self.env if e[0] != "GLUE_DIR"))

    @property
    def multirun(self) -> bool:
        return any(arg in MULTIRUN_FLAGS for arg in self.args)

    @property
    def overrides(self) -> list[str]:
        return [arg for arg in self.args if arg not in MULTIRUN_FLAGS]

    @property
    def search(self) -> bool:
        return self.target == "train.py" and any(arg.startswith(SEARCH) for arg in self.args)

    @property
    def study(self) -> bool:
        return self.target == "train.py" and any(arg.startswith(STUDY) for arg in self.args)

    @property
    def compose_only(self) -> bool:
        return self.target == "train.py" and any(
            arg.startswith(prefix) for arg in self.args for prefix in COMPOSE_ONLY
        )

    @property
    def has_placeholder(self) -> bool:
        return any(PLACEHOLDER.search(arg) or ELLIPSIS in arg for arg in self.args)


def readme_command_lines(markdown: str, opening_lines: bool = True) -> list[str]:
    """The inline code of the opening lines (up to the first ``---``; README's Run:, Analyse:) and
    every line of the fenced code blocks, with backslash-continued lines joined."""
    lines = markdown.splitlines()
    opening = lines[: lines.index("---")] if opening_lines and "---" in lines else []
    found = [span for line in opening for span in re.findall(r"`([^`]+)`", line)]
    in_block, continued = False, False
    for line in lines:
        if line.startswith("```"):
            in_block = not in_block
        elif in_block and continued:
            found[-1] = found[-1][:-1] + line
        elif in_block:
            found.append(line)
        continued = in_block and line.endswith("\\")
    return found


def parse_commands(line: str) -> Iterator[Command]:
    """The isotune commands of a shell line; ``cd``, ``pip``, ``wandb`` and the rest are skipped."""
    if not re.search(r"\bpython3?\s", line):
        return
    tokens = shlex.split(line, comments=True)
    written = re.sub(r"\s+#.*$", "", line).strip()
    while tokens:
        cut = tokens.index("&&") if "&&" in tokens else len(tokens)
        segment, tokens = tokens[:cut], tokens[cut + 1 :]
        env = []
        while segment and ENV_ASSIGNMENT.match(segment[0]):
            name, _, value = segment.pop(0).partition("=")
            env.append((name, value))
        if len(segment) < 2 or segment[0] not in ("python", "python3"):
            continue
        if segment[1] in SCRIPTS:
            yield Command(written, tuple(env), segment[1], tuple(segment[2:]))
        elif segment[1] == "-m" and len(segment) > 2 and segment[2].split(".")[0] == PACKAGE:
            yield Command(written, tuple(env), segment[2], tuple(segment[3:]))


def page_commands(page: Path) -> Iterator[Command]:
    """The isotune commands of one page, README's opening lines included."""
    name = page.relative_to(ROOT).as_posix()
    for line in readme_command_lines(page.read_text(), opening_lines=page == README):
        for command in parse_commands(line):
            yield dataclasses.replace(command, page=name)


def unique(commands: Iterator[Command]) -> list[Command]:
    """Each command once, where it is first written."""
    first: dict[tuple, Command] = {}
    for command in commands:
        first.setdefault(command.key, command)
    return list(first.values())


COMMANDS = unique(command for page in PAGES for command in page_commands(page))
# The training commands whose run folders fill the placeholders of later ones, in page order.
PRODUCERS = [
    c for c in COMMANDS if c.target == "train.py" and not (c.compose_only or c.has_placeholder)
]


def cut_sweeps(args: list[str], first_list_keeps: int) -> list[str]:
    """Every swept list cut to its first value, except the first one, which keeps
    ``first_list_keeps`` values: 1 gives the sweep's first job, 2 a sweep of two jobs."""
    cut, keep = [], first_list_keeps
    for arg in args:
        override = None if arg in MULTIRUN_FLAGS else OverridesParser.create().parse_override(arg)
        if override is not None and override.is_sweep_override():
            values = list(override.sweep_string_iterator())[:keep]
            arg, keep = f"{override.get_key_element()}={','.join(values)}", 1
        cut.append(arg)
    return cut


def sizes_not_given(sizes: dict[str, str], overrides: list[str]) -> list[str]:
    """``key=value`` for each size knob the command does not set itself."""
    given = {override.split("=", 1)[0] for override in overrides}
    return [f"{key}={value}" for key, value in sizes.items() if key not in given]


def strict_allowances(args: list[str]) -> list[str]:
    """``--allow-unknown-code`` for an aggregate's ``--strict`` when the runs it reads ran this
    checkout's code with uncommitted changes, which ``--strict`` refuses."""
    return ["--allow-unknown-code"] if "--strict" in args and code_identity()["dirty"] else []


@dataclass(frozen=True)
class Outcome:
    """A finished command: its arguments with placeholders filled, the whole command line that ran,
    its result and the run folders it created under logs/."""

    command: Command
    args: list[str]
    argv: list[str]
    cwd: Path
    process: subprocess.CompletedProcess
    created: list[Path]

    def report(self, what: str) -> str:
        output = (self.process.stdout + self.process.stderr)[-4000:]
        return (
            f"{self.command.written}: {what}\n"
            f"ran: {shlex.join(self.argv)}\nin: {self.cwd}\nexit code {self.process.returncode}, "
            f"output ends:\n{output}"
        )

    def study_folder(self) -> Path:
        """The study folder this command created, or the one it continued: a page's command that
        grows a study's report seeds (results.md's confirmatory run) continues the study an
        earlier command of the pages left in logs/study/, and names it as it starts."""
        if any(path.parent.name == "study" for path in self.created):
            return self.created_under("study")
        named = re.search(r"Study folder: (\S+)", self.process.stdout + self.process.stderr)
        assert named, self.report("neither a new folder in logs/study/ nor 'Study folder: ...'")
        return Path(named.group(1))

    def created_under(self, kind: str) -> Path:
        """The one folder this command created in ``logs/<kind>/``."""
        folders = [path for path in self.created if path.parent.name == kind]
        assert len(folders) == 1, self.report(f"expected one new folder in logs/{kind}/")
        return folders[0]


class Workdir:
    """The module's working directory; runs each command at most once (by what it runs once its
    sweeps are cut and its placeholders filled), so the commands that fill a placeholder reuse the
    training runs already there."""

    def __init__(self, root: Path, glue_dir: Path, tiny_encoder: Path):
        self.root = root
        self.glue_dir = glue_dir
        self.tiny_encoder = tiny_encoder
        self.outcomes: dict[tuple, Outcome] = {}

    def run(self, command: Command) -> Outcome:
        args = [self.fill(command, arg) for arg in command.args]
        for arg in args:
            self.copy_from_repository(arg)
        if command.target == "train.py":
            args = cut_sweeps(args, 2)
        key = dataclasses.replace(command, args=tuple(args)).key
        if key not in self.outcomes:
            self.outcomes[key] = self._run(command, args)
        return self.outcomes[key]

    def _run(self, command: Command, args: list[str]) -> Outcome:
        if command.target == "train.py":
            argv = [sys.executable, str(ROOT / command.target), *args, *self.train_sizes(args)]
        elif command.target == "analyze.py":
            argv = [
                sys.executable,
                str(ROOT / command.target),
                *args,
                *sizes_not_given(ANALYZE_SIZE, args),
            ]
        elif command.target == "predict.py":
            argv = [sys.executable, str(ROOT / command.target), *args]
        else:
            argv = [sys.executable, "-m", command.target, *args, *strict_allowances(args)]
        # GLUE_DIR as the README sets it, pointed at the data: its value is relative to the repo.
        env = {**os.environ, **dict(command.env), "GLUE_DIR": str(self.glue_dir)}
        before = set(self.root.glob("logs/*/*"))
        process = subprocess.run(
            argv, cwd=self.root, env=env, capture_output=True, text=True, timeout=600
        )
        created = sorted(set(self.root.glob("logs/*/*")) - before)
        return Outcome(command, args, argv, self.root, process, created)

    def train_sizes(self, args: list[str]) -> list[str]:
        """The tiny-run overrides of a training command, decided on its (first job's) config."""
        cfg = compose_config(
            "train", [arg for arg in cut_sweeps(args, 1) if arg not in MULTIRUN_FLAGS]
        )
        sizes = dict(TRAIN_SIZE)
        if cfg.callbacks.get("isotropy") is None:
            sizes = {key: value for key, value in sizes.items() if ".isotropy." not in key}
        if OmegaConf.select(cfg, "reg.shrinkage_examples") is None:
            del sizes["reg.shrinkage_examples"]
        multirun = any(arg in MULTIRUN_FLAGS for arg in args)
        if multirun or not _model_files_here(cfg.model.name_or_path):
            sizes["model.name_or_path"] = str(self.tiny_encoder)
        # A search's or a study's size is cut even where the command sets it (results.md's search
        # of 10 trials x 2 seeds): appended after the command's own, Hydra takes the last value.
        cut = {}
        if any(arg.startswith(SEARCH) for arg in args):
            cut.update(SEARCH_SIZE)
        if any(arg.startswith(STUDY) for arg in args):
            cut.update(STUDY_SIZE)
        if any(arg.startswith(STATED) for arg in args):
            cut.update(STATED_SIZE)
            stated = next(arg for arg in args if arg.startswith(STATED))
            if "looks:" in stated:  # a sequential one: its looks within them, its plan its own
                cut.update(STATED_LOOKS_SIZE)
                plan = hashlib.sha256(stated.encode()).hexdigest()[:8]
                cut["hydra.sweeper.study_name"] = f"sequential_looks_{plan}"
        return [*sizes_not_given(sizes, args), *(f"{key}={value}" for key, value in cut.items())]

    def copy_from_repository(self, arg: str) -> None:
        """A folder of the repository that a command names (``docs/results/<study>``: the
        project's own records, typed from the repository's root) copied into the working
        directory once, so that the command runs as typed and writes into the copy, never into
        the checkout."""
        if arg.startswith(f"{DOCS}/") and (ROOT / arg).is_dir() and not (self.root / arg).exists():
            shutil.copytree(ROOT / arg, self.root / arg)

    def fill(self, command: Command, arg: str) -> str:
        """``arg`` with each ``<name>`` replaced by a folder that the pages' training commands left
        where the placeholder points (``logs/runs/<run>/checkpoints/best.ckpt``)."""
        while match := PLACEHOLDER.search(arg):
            prefix = arg[: match.start()].rpartition("=")[2]
            suffix = arg[match.end() :]
            arg = arg[: match.start()] + self.produced(command, prefix, suffix) + suffix
        if ELLIPSIS in arg:
            pytest.fail(f"{command.written}: placeholder {ELLIPSIS!r} in {arg!r}")
        return arg

    def produced(self, command: Command, prefix: str, suffix: str) -> str:
        """The name of the first folder in ``prefix`` with ``suffix`` inside, running the pages'
        training commands in order until one leaves such a folder."""
        for producer in [None, *PRODUCERS]:
            if producer is not None:
                self.run(producer)
            found = sorted((self.root / prefix).glob(f"*{suffix}"))
            if found:
                return found[0].relative_to(self.root / prefix).parts[0]
        pytest.fail(
            f"{command.written}: none of the pages' training commands left a "
            f"folder {prefix}<...>{suffix} in {self.root} to fill its placeholder."
        )


def _model_files_here(name_or_path: str) -> bool:
    """Whether the model's files are on this machine: a folder, or a package's that is installed.
    ``model=smollm2`` needs the package its page names (docs/training.md), which README's set-up
    does not install: without it the command runs as a Hub name offline does, on the tiny
    encoder."""
    try:
        return Path(resolve_model_path(name_or_path)).is_dir()
    except IsotuneError:  # pkg://<package>/... of a package not installed
        return False


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, request, tiny_bert) -> Workdir:
    """Real GLUE data when GLUE_DIR is set, else the fixtures."""
    glue = os.environ.get("GLUE_DIR")
    glue_dir = Path(glue).resolve() if glue else request.getfixturevalue("glue_dir")
    return Workdir(tmp_path_factory.mktemp("readme"), glue_dir, tiny_bert)


def read_status(run_dir: Path) -> str:
    return json.loads((run_dir / "results.json").read_text())["status"]


def check_train(outcome: Outcome) -> None:
    if PREVIEW in outcome.args:  # docs/sweeps.md#preview: the plan, and nothing written
        output = outcome.process.stdout + outcome.process.stderr
        assert f"Preview ({PREVIEW})" in output, outcome.report("no preview")
        assert not outcome.created, outcome.report(f"the preview created {outcome.created}")
        return
    if outcome.command.search:
        report = outcome.created_under("search") / "search_report.md"
        assert report.is_file(), outcome.report(f"no {report}")
        return
    if outcome.command.study:
        report = outcome.study_folder() / "study_report.md"
        assert report.is_file(), outcome.report(f"no {report}")
        return
    if not outcome.command.multirun:
        run = outcome.created_under("runs")
        assert read_status(run) == "completed", outcome.report(f"{run} did not complete")
        return
    # A sweep typed again in its folder (docs/sweeps.md#growing-a-sweep) makes none.
    named = [arg.partition("=")[2] for arg in outcome.args if arg.startswith(SWEEP_DIR)]
    sweep = outcome.cwd / named[-1] if named else outcome.created_under("multirun")
    jobs = sorted(path.name for path in sweep.iterdir() if path.is_dir() and path.name.isdigit())
    # Its two jobs' folders; a sweep grown in its folder also holds the jobs typed before.
    two = jobs == ["0", "1"] or (named and jobs[:2] == ["0", "1"])
    assert two, outcome.report(f"job folders of {sweep}: {jobs}")
    statuses = {read_status(sweep / job) for job in jobs}
    assert statuses == {"completed"}, outcome.report(f"job statuses {statuses}")


def check_analyze(outcome: Outcome) -> None:
    report = outcome.created_under("analyze") / "report.md"
    assert report.is_file(), outcome.report(f"no {report}")


def check_predict(outcome: Outcome) -> None:
    summary = outcome.created_under("predict") / "predictions.json"
    assert summary.is_file(), outcome.report(f"no {summary}")


def check_submission(outcome: Outcome) -> None:
    archive = outcome.created_under("submission") / "submission.zip"
    assert archive.is_file(), outcome.report(f"no {archive}")


def check_aggregate(outcome: Outcome) -> None:
    folder = outcome.cwd / outcome.args[0]
    assert (folder / "results_table.md").is_file(), outcome.report(f"no {folder}/results_table.md")
    if (folder / SWEEP_FILE).is_file() and Sweep.load(folder).is_study:  # its report made again
        report = folder / STUDY_REPORT_FILE
        assert report.read_text() in outcome.process.stdout, outcome.report(f"no {report}")


def check_rerun(outcome: Outcome) -> None:
    # The pages' sweeps completed every job, so there is nothing to run again.
    assert "Nothing to rerun" in outcome.process.stdout, outcome.report("expected nothing to rerun")


def check_env(outcome: Outcome) -> None:
    # This machine's provenance (JSON); given a folder, the same code and packages as its runs,
    # which this machine just made, with the pip command for their versions.
    out = outcome.process.stdout
    if outcome.args:
        assert "Same code and packages." in out, outcome.report("expected no difference")
        assert "pip install torch==" in out, outcome.report("expected the pip command")
    else:
        assert json.loads(out)["packages"]["torch"], outcome.report("expected the provenance")


def check_dashboard(outcome: Outcome) -> None:
    dry_run = r"^Dry run: wrote (\S+): the (workspace|report)"
    written = re.search(dry_run, outcome.process.stdout, re.MULTILINE)
    assert written, outcome.report("expected a dry run's JSON")
    assert (outcome.cwd / written[1]).is_file(), outcome.report(f"no {written[1]}")


CHECKS: dict[str, Callable[[Outcome], None]] = {
    "train.py": check_train,
    "analyze.py": check_analyze,
    "predict.py": check_predict,
    "isotune.submission": check_submission,
    "isotune.aggregate": check_aggregate,
    "isotune.rerun": check_rerun,
    "isotune.dashboard": check_dashboard,
    "isotune.env": check_env,
}


@pytest.mark.parametrize(
    "command", [c for c in COMMANDS if not c.compose_only], ids=lambda c: c.written
)
def test_readme_command_runs_as_written(command: Command, workdir: Workdir):
    assert command.target in CHECKS, f"{command.written}: say in CHECKS what it must leave behind"
    outcome = workdir.run(command)
    assert outcome.process.returncode == 0, outcome.report("failed")
    CHECKS[command.target](outcome)


@pytest.mark.parametrize(
    "command", [c for c in COMMANDS if c.compose_only], ids=lambda c: c.written
)
def test_readme_preset_composes_into_its_sweep(command: Command):
    assert not command.has_placeholder, f"{command.written}: a command composed here has no runs"
    overrides = command.overrides
    cfg = compose_config("train", cut_sweeps(overrides, 1))
    sweeping = command.multirun or cfg.hydra.mode == RunMode.MULTIRUN
    params = (cfg.hydra.sweeper.get("params") or {}) if sweeping else {}
    arguments = [f"{key}={value}" for key, value in params.items()]
    parser = OverridesParser.create()
    hydra_overrides = [o for o in overrides if parser.parse_override(o).is_hydra_override()]
    parsed = parser.parse_overrides(arguments + [o for o in overrides if o not in hydra_overrides])
    jobs = [tuple(job) for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]
    # As Hydra's basic sweeper: a later override of a key replaces an earlier one.
    values = {
        o.key_or_group: len(list(o.sweep_string_iterator())) if o.is_sweep_override() else 1
        for o in parsed
    }
    assert len(jobs) == math.prod(values.values()), f"{command.written}: {len(jobs)} jobs, {values}"
    assert len(set(jobs)) == len(jobs), f"{command.written}: a job repeats in {jobs}"
    # Every option the sweep names composes: the jobs that differ from the first in one key
    # between them hold every value.
    for job in jobs:
        if sum(a != b for a, b in zip(job, jobs[0], strict=True)) <= 1:
            compose_config("train", [*hydra_overrides, *job])


def test_commands_are_read_from_opening_lines_and_code_blocks():
    markdown = "\n".join(
        [
            "Set up: `pip install -e .`",
            "Run: `GLUE_DIR=../data python train.py` (minutes)",
            "---",
            "Prose `python train.py model=bert` is not a command to run.",
            "```bash",
            "cd somewhere && python train.py -m task=rte,mrpc   # two jobs",
            "python analyze.py \\",
            "  ckpt_path=logs/runs/<run>/checkpoints/best.ckpt",
            "python -m isotune.aggregate logs/multirun/<sweep>",
            "wandb sync logs/runs/*/wandb/offline-run-*",
            "python -m pytest",
            "```",
        ]
    )
    commands = [c for line in readme_command_lines(markdown) for c in parse_commands(line)]
    assert [(c.env, c.target, c.args) for c in commands] == [
        ((("GLUE_DIR", "../data"),), "train.py", ()),
        ((), "train.py", ("-m", "task=rte,mrpc")),
        ((), "analyze.py", ("ckpt_path=logs/runs/<run>/checkpoints/best.ckpt",)),
        ((), "isotune.aggregate", ("logs/multirun/<sweep>",)),
    ]
    assert commands[1].line == "cd somewhere && python train.py -m task=rte,mrpc"
    assert commands[2].has_placeholder and not commands[1].has_placeholder


def test_a_sweep_is_cut_to_two_jobs():
    args = ["-m", "task=rte,mrpc,stsb", "norm=none,isobn", "seed=range(1,6)", "hydra/launcher=gpus"]
    assert cut_sweeps(args, 2) == [
        "-m",
        "task=rte,mrpc",
        "norm=none",
        "seed=1",
        "hydra/launcher=gpus",
    ]
    assert cut_sweeps(args, 1) == ["-m", "task=rte", "norm=none", "seed=1", "hydra/launcher=gpus"]


def test_a_search_is_cut_to_one_trial_and_seed_even_where_its_command_sizes_it(tmp_path):
    args = ["-m", "hparams_search=istar", "hydra.sweeper.n_trials=10", "hydra.sweeper.seeds=[1,2]"]
    sizes = Workdir(tmp_path, tmp_path, tmp_path / "tiny").train_sizes(args)
    sweeper = compose_config("train", [*args[1:], *sizes]).hydra.sweeper
    assert (sweeper.n_trials, list(sweeper.seeds), list(sweeper.report_seeds)) == (1, [1], [2])


def test_an_i_star_run_draws_its_shrinkage_from_few_examples_and_a_run_without_it_is_not_told():
    workdir = Workdir(Path("unused"), Path("unused"), Path("tiny"))
    assert "reg.shrinkage_examples=32" in workdir.train_sizes(["reg=istar", "reg.layers=last"])
    assert not any("shrinkage" in size for size in workdir.train_sizes(["reg=cosreg"]))


def test_docs_pages_have_no_opening_lines_and_a_repeated_command_runs_once():
    markdown = "\n".join(
        [
            "Run: `python train.py seed=2`",
            "---",
            "```bash",
            "python train.py",
            "GLUE_DIR=../data python train.py",
            "python train.py seed=1",
            "```",
        ]
    )
    lines = readme_command_lines(markdown, opening_lines=False)
    assert lines == [
        "python train.py",
        "GLUE_DIR=../data python train.py",
        "python train.py seed=1",
    ]
    commands = unique(c for line in lines for c in parse_commands(line))
    assert [(c.line, c.args) for c in commands] == [
        ("python train.py", ()),
        ("python train.py seed=1", ("seed=1",)),
    ]


def test_commands_are_read_from_readme_and_the_docs():
    pages = {command.page for command in COMMANDS}
    assert {"README.md", "docs/sweeps.md", "docs/analysis.md"} <= pages
    assert len({command.key for command in COMMANDS}) == len(COMMANDS)


# A benchmark whose source holds one of these stops without GLUE_DIR (bench_throughput's check).
NEEDS_GLUE = ("quiet_offline_glue_dir()", "Set GLUE_DIR")
BENCHMARK = re.compile(r"python benchmarks/(\w+)\.py")
ASSIGNMENTS_BEFORE = re.compile(r"(?:[A-Za-z_][A-Za-z0-9_]*=\S+ )+$")


def test_benchmark_commands_that_read_glue_set_glue_dir():
    """A benchmark that needs the GLUE data is shown with GLUE_DIR: on its command line or, in a
    code block, exported before it, so that it runs as typed."""
    lacking = []
    for page in PAGES:
        text = page.read_text()
        for match in BENCHMARK.finditer(text):
            source = (ROOT / "benchmarks" / f"{match[1]}.py").read_text()
            if not any(needs in source for needs in NEEDS_GLUE):
                continue
            before = text[: match.start()]
            line = before[before.rfind("\n") + 1 :]
            assigned = ASSIGNMENTS_BEFORE.search(line)
            in_block = before.count("```") % 2 == 1
            block = before[before.rfind("```") :]
            if not (
                (assigned and "GLUE_DIR=" in assigned[0])
                or (in_block and "export GLUE_DIR=" in block)
            ):
                lacking.append(f"{page.name}: {line.strip()}{match[0]}")
    assert not lacking
