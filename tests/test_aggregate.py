"""Tables, failed/missing runs and reruns, from fake sweep directories: each expected number is
computed here independently with `statistics`; Hydra's job numbering from a real multirun."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import types
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

import isotune
from isotune.sweeps import aggregate, gpu_slots, rerun, runs, tables
from tests.helpers.cli import ROOT
from tests.helpers.fake_runs import PRETRAINED_IW, completed, ended_early, write_run
from tests.helpers.locks import held_by_another_process

# Dev accuracy per (norm, task, seed) of the fake sweep; None: the job failed or never finished.
SCORES = {
    ("none", "rte", 1): 0.70,
    ("none", "rte", 2): 0.66,
    ("none", "rte", 3): 0.71,
    ("none", "mrpc", 1): 0.80,
    ("none", "mrpc", 3): 0.84,  # seed 2 is missing: no job directory at all
    ("isobn", "rte", 1): 0.72,
    ("isobn", "rte", 2): 0.75,
    ("isobn", "rte", 3): None,  # failed
    ("isobn", "mrpc", 1): 0.83,
    ("isobn", "mrpc", 2): 0.86,
    ("isobn", "mrpc", 3): None,  # killed: results.json still says running
}
LAST_UPDATE = "2026-11-30T09:00:00+00:00"  # of the killed job's results.json
CHECKED_AT = datetime(2026, 11, 30, 11, 35, tzinfo=UTC)  # 2h35m later


def write_sweep_config(sweep: Path, project: Path) -> None:
    """The multirun.yaml of ``-m task=rte,mrpc norm=none,isobn`` with seed=1,2,3 in params."""
    sweep.mkdir(parents=True)
    multirun = {
        "hydra": {
            "sweeper": {
                "_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper",
                "params": {"seed": "1,2,3"},
            },
            "overrides": {"task": ["task=rte,mrpc", "norm=none,isobn"]},
            "runtime": {"cwd": str(project)},
            "job": {"name": "train"},
        }
    }
    (sweep / "multirun.yaml").write_text(yaml.safe_dump(multirun))


def job_number(seed: int, task: str, norm: str) -> int:
    """Hydra's numbering: the cartesian product of seed (params first), task, norm, in order."""
    return (seed - 1) * 4 + ("rte", "mrpc").index(task) * 2 + ("none", "isobn").index(norm)


@pytest.fixture
def sweep_dir(tmp_path, monkeypatch) -> Path:
    """A sweep started in ``project/``, where its tests then work, as a user reruns it."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("")
    monkeypatch.chdir(project)
    sweep = tmp_path / "sweep"
    write_sweep_config(sweep, project)
    for (norm, task, seed), score in SCORES.items():
        overrides = [f"seed={seed}", f"task={task}", f"norm={norm}"]
        if score is not None:
            result = completed("minilm", norm, task, seed, score)
        elif task == "rte":
            result = {"status": "failed", "error": "NonFiniteLossError: loss became nan at step 12"}
        else:
            result = {"status": "running", "error": None, "updated_at": LAST_UPDATE}
        write_run(sweep / str(job_number(seed, task, norm)), overrides, result)
    # A run outside the sweep's jobs, of another model with one task only: no average for it.
    write_run(sweep / "extra", ["model=bert"], completed("bert", "none", "rte", 1, 0.6))
    return sweep


def scores_of(norm: str, task: str) -> list[float]:
    return [100 * v for (n, t, _), v in SCORES.items() if (n, t) == (norm, task) and v is not None]


def test_results_table_has_median_std_n_and_delta(sweep_dir, capsys):
    assert aggregate.main([str(sweep_dir)]) == 0
    table = pd.read_csv(sweep_dir / "results_table.csv")
    rows = {(r.model, r.norm, r.task): r for r in table.itertuples(index=False)}
    for norm in ("none", "isobn"):
        for task in ("rte", "mrpc"):
            row = rows["minilm", norm, task]
            assert row.median == pytest.approx(statistics.median(scores_of(norm, task)), abs=1e-4)
            assert row.std == pytest.approx(statistics.stdev(scores_of(norm, task)), abs=1e-4)
            assert row.n == len(scores_of(norm, task))
            baseline = statistics.median(scores_of("none", task))
            if norm == "none":  # a baseline: no difference to give
                assert pd.isna(row.baseline) and pd.isna(row.delta_vs_baseline)
            else:
                assert row.baseline == "model=minilm norm=none"
                assert row.delta_vs_baseline == pytest.approx(row.median - baseline, abs=1e-4)
    for norm in ("none", "isobn"):
        expected_avg = statistics.mean(
            statistics.median(scores_of(norm, t)) for t in ("rte", "mrpc")
        )
        assert rows["minilm", norm, "avg"].median == pytest.approx(expected_avg, abs=1e-4)
    assert ("bert", "none", "avg") not in rows  # bert lacks mrpc
    assert rows["bert", "none", "rte"].n == 1

    markdown = (sweep_dir / "results_table.md").read_text()
    printed = capsys.readouterr().out
    assert markdown in printed
    assert f"Disk used by {sweep_dir}: " in printed  # the sweep's size

    def cell(norm: str, task: str) -> str:
        values = scores_of(norm, task)
        spread = statistics.stdev(values)
        return f"{statistics.median(values):.2f} ± {spread:.2f} (n={len(values)})"

    avg = statistics.mean(statistics.median(scores_of("none", t)) for t in ("mrpc", "rte"))
    assert (
        f"| model=minilm norm=none | {cell('none', 'mrpc')} | {cell('none', 'rte')} | {avg:.2f} |"
        in markdown
    )
    header = "| configuration | mrpc | rte | avg |"  # GLUE order: mrpc before rte
    assert header in markdown
    delta = statistics.median(scores_of("isobn", "mrpc")) - statistics.median(
        scores_of("none", "mrpc")
    )
    assert f"| model=minilm norm=isobn | {delta:+.2f} |" in markdown
    assert "| model=bert norm=none | – | 60.00 (n=1) | – |" in markdown
    assert "Baselines: model=minilm norm=isobn vs model=minilm norm=none." in markdown


def test_failed_and_missing_runs_are_listed(sweep_dir):
    result = aggregate.aggregate([sweep_dir], now=CHECKED_AT)
    assert {run.job_dir.name: run.status for run in result.unfinished} == {
        "9": "failed",
        "11": "running",
    }
    assert [(job.number, job.overrides) for job in result.missing] == [
        (job_number(2, "mrpc", "none"), ("seed=2", "task=mrpc", "norm=none"))
    ]
    report = result.report()
    assert f"- {sweep_dir / '9'}: failed: NonFiniteLossError: loss became nan at step 12" in report
    assert f"- {sweep_dir / '11'}: running, last update 2h35m ago ({LAST_UPDATE}): " in report
    assert f"- {sweep_dir} #6: seed=2 task=mrpc norm=none" in report


DEEP = "[" * 100_000 + "]" * 100_000  # nested past Python's recursion limit


@pytest.mark.parametrize("content", ["null", "[1, 2]", "{not json", DEEP], ids=str.__len__)
def test_an_unreadable_results_json_is_listed_as_failed_and_rerun(sweep_dir, content, capsys):
    (sweep_dir / "0" / "results.json").write_text(content)
    assert aggregate.main([str(sweep_dir)]) == 0
    listed = [line for line in capsys.readouterr().out.splitlines() if "/0: " in line]
    assert len(listed) == 1
    assert listed[0].startswith(f"- {sweep_dir / '0'}: failed: unreadable results.json: ")
    if content == DEEP:
        assert listed[0].endswith("JSON nested too deeply to read")
    elif content != "{not json":
        assert listed[0].endswith(f"not a JSON object but {content}")
    reruns, _ = rerun.plan_reruns(sweep_dir)
    assert f"hydra.run.dir={sweep_dir / '0'}" in [command.argv[-1] for command in reruns]


@pytest.mark.parametrize(
    "override",
    [
        "+callbacks.x._target_=os.system",
        "+callbacks.x={_target_:os.system,_args_:[touch x]}",
        "+hydra.callbacks.x._target_=os.system",
        "hydra/launcher=submitit_local",
        "hydra/sweeper=optuna",
        "+hydra.job.env_set.TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1",
    ],
)
def test_rerun_refuses_a_recorded_override_that_names_code(sweep_dir, override, capsys):
    failed = {"status": "failed", "error": "E: x"}
    write_run(sweep_dir / "rerun-0", ["seed=2", "task=mrpc", "norm=none", override], failed)
    assert rerun.main([str(sweep_dir), "--dry-run"]) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and not out  # one line, and nothing planned or run
    assert err.startswith(f"error: {sweep_dir / 'rerun-0'}: its recorded override {override!r} ")


def test_rerun_keeps_the_shipped_launchers_and_the_users_own_overrides(sweep_dir, capsys):
    launchers = sorted(path.stem for path in (ROOT / "conf/hydra/launcher").glob("*.yaml"))
    assert list(rerun.SHIPPED_HYDRA_OPTIONS["hydra/launcher"]) == launchers
    assert not any(rerun.names_code(f"hydra/launcher={name}") for name in launchers)
    assert not rerun.names_code("hydra/sweeper=isotune")
    own = "+callbacks.x._target_=my.Callback"  # typed by the user: theirs to give
    reruns, _ = rerun.plan_reruns(sweep_dir, extra=[own])
    assert all(command.argv[-2] == own for command in reruns)


def test_a_failed_run_replaced_by_a_completed_one_is_not_listed(sweep_dir):
    overrides = ["seed=3", "task=rte", "norm=isobn"]
    write_run(sweep_dir / "rerun-0", overrides, completed("minilm", "isobn", "rte", 3, 0.7))
    result = aggregate.aggregate([sweep_dir])
    assert [run.job_dir.name for run in result.unfinished] == ["11"]
    rte = result.summary.set_index(["model", "norm", "task"]).loc[("minilm", "isobn", "rte")]
    assert rte["n"] == 3


def test_only_a_completed_run_of_the_same_job_hides_a_failed_one(tmp_path, sweep_dir):
    # An older sweep with the same overrides, where job 7's twin completed: another job.
    older = tmp_path / "older-sweep"
    write_sweep_config(older, tmp_path / "project")
    twin = ["seed=3", "task=rte", "norm=isobn"]
    write_run(older / "9", twin, completed("minilm", "isobn", "rte", 3, 0.7))
    # Two single runs (no sweep) with the same overrides: two jobs.
    write_run(tmp_path / "runs" / "a", ["task=rte"], completed("minilm", "none", "rte", 42, 0.6))
    write_run(tmp_path / "runs" / "b", ["task=rte"], {"status": "failed", "error": "E: x"})
    result = aggregate.aggregate([tmp_path])
    assert [str(run.job_dir.relative_to(tmp_path)) for run in result.unfinished] == [
        "runs/b",
        "sweep/11",
        "sweep/9",
    ]
    assert {(job.sweep.dir.name, job.number) for job in result.missing} >= {
        ("sweep", 6),
        ("older-sweep", 0),
    }
    assert ("older-sweep", 9) not in {(job.sweep.dir.name, job.number) for job in result.missing}


HYDRA_APP = """import hydra


@hydra.main(version_base=None, config_path="conf", config_name="app")
def main(cfg) -> None:
    pass


main()
"""
HYDRA_APP_CONFIG = {
    "a": 0,
    "b": "x",
    "c": 0,
    "hydra": {"sweeper": {"params": {"a": "1,2", "b": "x,y"}}},
}


@pytest.mark.slow
def test_basic_sweep_jobs_number_jobs_as_a_real_multirun(tmp_path):
    # The one call into Hydra's private API: a real multirun of a bare Hydra app must number its
    # jobs as basic_sweep_jobs does (params first; a command line value replaces a param's in
    # place; range sweeps; appended keys), read back both from its arguments and multirun.yaml.
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "app.yaml").write_text(yaml.safe_dump(HYDRA_APP_CONFIG))
    (tmp_path / "app.py").write_text(HYDRA_APP)
    command = [sys.executable, "app.py", "-m", "c=range(0,2)", "a=5,6", "+e=7"]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    (sweep,) = [path.parent for path in tmp_path.rglob("multirun.yaml")]
    hydra_jobs = [
        tuple(yaml.safe_load((sweep / str(n) / ".hydra" / "overrides.yaml").read_text()))
        for n in range(len(list(sweep.glob("*/.hydra"))))
    ]
    expected = [
        (f"a={a}", f"b={b}", f"c={c}", "+e=7") for a in (5, 6) for b in ("x", "y") for c in (0, 1)
    ]
    assert hydra_jobs == expected
    assert runs.basic_sweep_jobs(["a=1,2", "b=x,y", *command[3:]]) == expected
    assert runs.Sweep.load(sweep).expected_jobs == expected


def test_an_interrupted_run_is_listed_and_rerun_in_place(sweep_dir, capsys):
    overrides = ["seed=3", "task=rte", "norm=isobn"]
    (sweep_dir / "9" / "results.json").write_text(
        json.dumps(
            {
                "status": "interrupted",
                "interrupted_by": "SIGTERM",
                "error": None,
                "overrides": overrides,
            }
        )
    )
    result = aggregate.aggregate([sweep_dir])
    assert f"- {sweep_dir / '9'}: interrupted (SIGTERM) before it finished" in result.report()
    assert rerun.main([str(sweep_dir), "--dry-run"]) == 0
    out = capsys.readouterr().out
    (command,) = rerun_commands(sweep_dir, [(overrides, sweep_dir / "9")])
    continues = "starts again from the beginning (no checkpoint saved)"
    assert f"# interrupted (SIGTERM) before it finished; {continues}\n{command}\n" in out


def test_duplicate_runs_keep_the_latest(sweep_dir):
    late = completed("minilm", "none", "rte", 1, 0.50, finished_at="2026-12-01T09:00:00")
    write_run(sweep_dir / "again", ["seed=1", "task=rte", "norm=none"], late)
    result = aggregate.aggregate([sweep_dir])
    rte = result.summary.set_index(["model", "norm", "task"]).loc[("minilm", "none", "rte")]
    assert rte["median"] == pytest.approx(statistics.median([50.0, 66.0, 71.0]))
    assert "Duplicate runs" in result.report()
    assert (
        f"- model=minilm norm=none task=rte seed=1: {sweep_dir / '0'}, {sweep_dir / 'again'}"
        in (result.report())
    )


def test_isotropy_table_compares_pretrained_and_finetuned(sweep_dir):
    aggregate.main([str(sweep_dir)])
    table = pd.read_csv(sweep_dir / "isotropy_table.csv")
    row = table[(table.model == "minilm") & (table.norm == "isobn") & (table.task == "rte")]
    assert row.measure.tolist() == ["iso/cls/iw"]
    assert row.pretrained.item() == pytest.approx(PRETRAINED_IW)
    expected = statistics.median(s / 1000 for s in scores_of("isobn", "rte"))  # percent → /10
    assert row.finetuned.item() == pytest.approx(expected)
    assert row.n.item() == 2
    assert (
        "| model=minilm norm=isobn | rte | iso/cls/iw | 0.01 |"
        in (sweep_dir / "isotropy_table.md").read_text()
    )


def test_a_directory_without_results_is_a_clear_error(tmp_path, capsys):
    assert aggregate.main([str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert f"No results.json and no multirun.yaml below {tmp_path}" in error


def test_wandb_summary_run_is_online_with_credentials(sweep_dir, monkeypatch):
    logged = {}

    class FakeRun:
        dir = str(sweep_dir / "wandb" / "run-x" / "files")

        def log(self, data):
            logged.update(data)

        def save(self, path, **kwargs):
            logged["saved"] = path

        def finish(self):
            logged["finished"] = True

    def init(**kwargs):
        logged["init"] = kwargs
        return FakeRun()

    fake = types.SimpleNamespace(
        init=init, Table=lambda dataframe: dataframe, Image=str, teardown=lambda: None
    )
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_API_KEY", "0" * 40)  # well-formed, and the server answers:
    monkeypatch.setattr("isotune.tracking.wandb_status.reachable", lambda url, timeout=3.0: True)
    assert aggregate.main([str(sweep_dir), "--wandb", "--wandb-project", "p"]) == 0
    init = logged["init"]
    assert (init["mode"], init["project"], init["group"]) == ("online", "p", sweep_dir.name)
    assert init["job_type"] == "aggregate" and init["name"] == f"summary-{sweep_dir.name}"
    table = logged["table/results_table"]
    assert len(table) == len(pd.read_csv(sweep_dir / "results_table.csv"))
    missing = [value for value in table.to_numpy().ravel() if pd.isna(value)]
    assert missing and all(value is None for value in missing)  # W&B takes None, not NaN or NA
    assert logged["figure/scores_rte"] == str(sweep_dir / "scores_rte.png")
    assert logged["saved"] == str(sweep_dir / "sweep_report.md") and logged["finished"]


def rerun_commands(sweep_dir: Path, jobs: list[tuple[list[str], Path]]) -> list[str]:
    script = sweep_dir.parent / "project" / "train.py"
    return [
        f"cd {script.parent} && {sys.executable} {script} {' '.join(o)} hydra.run.dir={d}"
        for o, d in jobs
    ]


def test_rerun_dry_run_prints_only_failed_and_missing_jobs(sweep_dir, capsys):
    (sweep_dir / "rerun-4").mkdir()  # an earlier rerun: the next one takes rerun-5
    assert rerun.main([str(sweep_dir), "--dry-run"]) == 0
    out = capsys.readouterr().out
    commands = [line for line in out.splitlines() if line.startswith("cd ")]
    assert commands == rerun_commands(
        sweep_dir,
        [
            (["seed=3", "task=rte", "norm=isobn"], sweep_dir / "9"),
            (["seed=2", "task=mrpc", "norm=none"], sweep_dir / "rerun-5"),
        ],
    )
    assert "# failed: NonFiniteLossError: loss became nan at step 12" in out
    assert f"# left alone (--include-running reruns it): {sweep_dir / '11'}: running" in out
    assert not (sweep_dir / "rerun-5").exists()  # dry run: nothing ran

    assert rerun.main([str(sweep_dir), "--dry-run", "--include-running"]) == 0
    commands = [line for line in capsys.readouterr().out.splitlines() if line.startswith("cd ")]
    assert (
        commands[0]
        == rerun_commands(sweep_dir, [(["seed=3", "task=mrpc", "norm=isobn"], sweep_dir / "11")])[0]
    )  # paths in sorted order: 11 before 9
    assert len(commands) == 3


def test_a_failed_rerun_of_a_missing_job_counts_as_that_job_and_reruns_in_place(sweep_dir):
    overrides = ["seed=2", "task=mrpc", "norm=none"]  # the missing job, #6
    write_run(sweep_dir / "rerun-0", overrides, {"status": "failed", "error": "E: again"})
    result = aggregate.aggregate([sweep_dir])
    assert result.missing == []
    assert runs.job_id(result.unfinished[-1], result.sweeps) == (sweep_dir, 6)
    reruns, left_alone = rerun.plan_reruns(sweep_dir)
    assert [command.shell() for command in reruns] == rerun_commands(
        sweep_dir,
        [
            (["seed=3", "task=rte", "norm=isobn"], sweep_dir / "9"),
            (overrides, sweep_dir / "rerun-0"),
        ],
    )
    assert [run.job_dir.name for run in left_alone] == ["11"]


def test_rerun_runs_the_commands_and_then_nothing_is_left(sweep_dir, capsys):
    fake_train = sweep_dir.parent / "fake_train.py"
    fake_train.write_text(
        "import json, sys, pathlib\n"
        "overrides = [a for a in sys.argv[1:] if not a.startswith('hydra.run.dir=')]\n"
        "run_dir = pathlib.Path(sys.argv[-1].split('=', 1)[1])\n"
        "run_dir.mkdir(parents=True, exist_ok=True)\n"
        "values = dict(o.split('=') for o in overrides)\n"
        "result = dict(status='completed', model='minilm', norm=values['norm'],\n"
        "    task=values['task'], seed=int(values['seed']), primary_metric='accuracy',\n"
        "    best={'accuracy': 0.5}, overrides=overrides)\n"
        "(run_dir / 'results.json').write_text(json.dumps(result))\n"
    )
    assert rerun.main([str(sweep_dir), "--script", str(fake_train), "--include-running"]) == 0
    assert "Reran 3 jobs, 0 failed again." in capsys.readouterr().out
    result = aggregate.aggregate([sweep_dir])
    assert result.unfinished == [] and result.missing == []
    assert rerun.main([str(sweep_dir)]) == 0
    assert "Nothing to rerun" in capsys.readouterr().out


def _ran_from(sweep_dir: Path, cwd: Path, config_dir: Path) -> runs.Sweep:
    """The sweep as if started with ``python <config_dir.parent>/train.py -m ...`` from ``cwd``."""
    config = yaml.safe_load((sweep_dir / "multirun.yaml").read_text())
    config["hydra"]["runtime"]["cwd"] = str(cwd)
    config["hydra"]["runtime"]["config_sources"] = [
        {"path": "hydra.conf", "schema": "pkg", "provider": "hydra"},
        {"path": str(config_dir), "schema": "file", "provider": "main"},
    ]
    (sweep_dir / "multirun.yaml").write_text(yaml.safe_dump(config))
    return runs.Sweep.load(sweep_dir)


def test_rerun_finds_the_projects_script_next_to_its_config_when_the_sweep_ran_elsewhere(
    tmp_path, sweep_dir
):
    project = Path(isotune.__file__).resolve().parents[2]  # the checkout isotune runs from
    sweep = _ran_from(sweep_dir, tmp_path, project / "conf")
    assert rerun.training_script(sweep) == project / "train.py"
    assert rerun.working_directory(sweep, project / "train.py") == Path.cwd().resolve()


def test_rerun_refuses_a_training_script_the_folder_names_that_is_not_the_projects(
    tmp_path, sweep_dir, capsys
):
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "conf").mkdir(parents=True)
    marker = tmp_path / "ran"
    (elsewhere / "train.py").write_text(f"open({str(marker)!r}, 'w')\n")
    _ran_from(sweep_dir, elsewhere, elsewhere / "conf")
    assert rerun.main([str(sweep_dir), "--include-running"]) == 2
    error = capsys.readouterr().err
    assert f"names {elsewhere / 'train.py'} as its training script" in error
    assert "pass --script <path> if you trust that script" in error
    assert not marker.exists()


def test_rerun_refuses_while_the_sweep_still_runs(sweep_dir, capsys):
    lock = gpu_slots.acquire_slot(sweep_dir / gpu_slots.SWEEP_SLOT_DIR, ["0"])
    try:
        assert rerun.main([str(sweep_dir), "--dry-run"]) == 2
    finally:
        lock.release()
    assert "is still running (its workers hold GPU slots ['0'])" in capsys.readouterr().err


def test_rerun_never_starts_a_job_whose_process_is_alive(sweep_dir, capsys):
    failed_job = sweep_dir / "9"  # its results.json says failed, but a process runs it again
    with held_by_another_process(failed_job) as holder:
        assert rerun.main([str(sweep_dir), "--dry-run", "--include-running"]) == 0
    out = capsys.readouterr().out
    assert f"# left alone (alive, pid {holder.pid}): {failed_job}: failed" in out
    assert f"hydra.run.dir={failed_job}\n" not in out
    assert f"hydra.run.dir={sweep_dir / '11'}" in out  # a dead "running" job: its lock is free


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]], ids=["rerun", "dry-run"])
def test_rerun_refuses_beside_the_sweep_itself_or_another_rerun_of_it(sweep_dir, capsys, dry_run):
    with held_by_another_process(sweep_dir) as holder:
        assert rerun.main([str(sweep_dir), *dry_run]) == 2
    err = capsys.readouterr().err
    assert f"The sweep {sweep_dir} is still running, or being rerun (pid {holder.pid}" in err
    assert not (sweep_dir / "rerun-0").exists()


def test_rerun_needs_a_sweep_directory(tmp_path, capsys):
    assert rerun.main([str(tmp_path), "--dry-run"]) == 2
    assert "is not a Hydra multirun directory (no multirun.yaml)" in capsys.readouterr().err


def test_runs_that_took_several_attempts_are_counted_and_a_warned_one_is_not_failed(sweep_dir):
    ended = [
        {"status": "interrupted", "ended_by": "SIGUSR2"},
        {"status": "interrupted", "ended_by": "SIGUSR2"},
    ]
    job = sweep_dir / str(job_number(1, "rte", "none"))
    requeued = json.loads((job / "results.json").read_text())
    requeued.update(status="interrupted", interrupted_by="SIGUSR2", error=None, attempts=ended)
    (job / "results.json").write_text(json.dumps(requeued))
    done = sweep_dir / "extra" / "results.json"
    (done).write_text(
        json.dumps({**json.loads(done.read_text()), "attempts": [*ended, {"status": "completed"}]})
    )

    report = aggregate.aggregate([sweep_dir]).report()
    assert (
        f"- {job}: interrupted (SIGUSR2) before it finished, waiting to be requeued if its "
        "launcher requeues it (attempt 2)"
    ) in report
    assert "## Runs that took several attempts (2)" in report
    assert (
        f"- {sweep_dir / 'extra'}: 3 attempts: interrupted (SIGUSR2), interrupted (SIGUSR2), "
        "completed"
    ) in report


def test_outlier_table_shows_medians_of_the_counts_and_the_kept_ones():
    rows = []
    for view, count, kept in (("pre_norm", (3.0, 4.0), 2.0), ("post_norm", (3.0, 0.0), 0.0)):
        rows.append(["norm=isobn", "rte", f"iso/{view}/n_outliers", *count, 3])
        rows.append(["norm=isobn", "rte", f"iso/{view}/outliers_kept", count[0], kept, 3])
    rows.append(["norm=isobn", "rte", "iso/post_norm/log_iw", -1.0, -0.5, 3])
    columns = ["configuration", "task", "measure", "pretrained", "finetuned", "n"]
    table = tables.outliers_markdown(pd.DataFrame(rows, columns=columns))
    assert table.splitlines()[0] == (
        "| configuration | task | pre_norm outliers | pre_norm kept | post_norm outliers "
        "| post_norm kept | n |"
    )
    assert table.splitlines()[2] == "| norm=isobn | rte | 3 → 4 | 2 | 3 → 0 | 0 | 3 |"
    empty = pd.DataFrame([rows[-1]], columns=columns)
    assert tables.outliers_markdown(empty).startswith("No outlier dimensions in these runs")


def write_search(folder: Path) -> None:
    """A search folder as `python train.py -m hparams_search=istar 'hydra.sweeper.seeds=[1,2]'
    'hydra.sweeper.report_seeds=[7]' hydra.sweeper.n_trials=2` leaves it: two trials on seeds 1
    and 2, then the winner (trial 0) and the baseline (reg=none) on seed 7."""
    folder.mkdir(parents=True)
    multirun = {"hydra": {"sweeper": {"_target_": runs.SEARCH_SWEEPER}, "overrides": {"task": []}}}
    (folder / "multirun.yaml").write_text(yaml.safe_dump(multirun))
    jobs = {  # folder: (reg, reg.weight, seed, dev accuracy)
        "trial-000/seed-1": ("istar", -0.125, 1, 0.70),
        "trial-000/seed-2": ("istar", -0.125, 2, 0.68),
        "trial-001/seed-1": ("istar", 0.5, 1, 0.60),
        "trial-001/seed-2": ("istar", 0.5, 2, 0.58),
        "report/trial-000/seed-7": ("istar", -0.125, 7, 0.62),
        "report/baseline/seed-7": ("none", 0.0, 7, 0.64),
    }
    for where, (reg, weight, seed, score) in jobs.items():
        overrides = ["reg=none"] if reg == "none" else [f"reg.weight={weight}"]
        result = {**completed("minilm", "none", "rte", seed, score), "reg": reg}
        write_run(folder / where, [*overrides, f"seed={seed}"], {**result, "reg_weight": weight})
    (folder / "search_report.md").write_text("# Search report\n")


def test_a_search_folder_keeps_tuning_and_report_runs_apart_and_points_to_its_report(
    tmp_path, capsys
):
    folder = tmp_path / "search" / "istar_rte_minilm"
    write_search(folder)
    assert aggregate.main([str(folder)]) == 0
    printed = capsys.readouterr().out
    result = aggregate.aggregate([folder])
    summary = result.summary.set_index("configuration")
    winner_tuning = "reg=istar reg_weight=-0.125 search=tuning"
    winner_report = "reg=istar reg_weight=-0.125 search=report"
    baseline = "reg=none reg_weight=0.0 search=report"
    # The winner's row does not pool its tuning seeds (1, 2) with its report seed (7).
    assert summary.loc[winner_tuning, "median"] == pytest.approx(69.0)
    assert summary.loc[winner_tuning, "n"] == 2
    assert summary.loc[winner_report, "median"] == pytest.approx(62.0)
    # A Δ only where seeds pair: the report's winner against the baseline on seed 7.
    compared = result.summary.dropna(subset=["delta_vs_baseline"])
    assert list(compared["configuration"]) == [winner_report]
    assert compared["delta_vs_baseline"].iloc[0] == pytest.approx(62.0 - 64.0)
    assert summary.loc[baseline, "n"] == 1
    paired = result.paired.set_index("configuration")
    assert list(paired.index) == [winner_report]
    assert paired.loc[winner_report, "n"] == 1 and paired.loc[winner_report, "baseline"] == baseline
    assert str(folder / "search_report.md") in printed
    assert "Δ median vs the baseline" in printed and "search=tuning" in printed
    assert str(folder / "search_report.md") in (folder / "sweep_report.md").read_text()


def test_the_averages_over_tasks_name_the_metrics_they_average(tmp_path):
    """A sweep over RTE (accuracy) and MRPC (F1): the avg column and the mean of medians across
    tasks average an accuracy with an F1, as GLUE's score does, and the tables say so."""
    for task, metric in (("rte", "accuracy"), ("mrpc", "f1")):
        for norm, gain in (("none", 0.0), ("isobn", 0.02)):
            for seed in (1, 2):
                result = completed("minilm", norm, task, seed, 0.6 + gain + seed / 100)
                result["primary_metric"] = metric
                result["best"] = {metric: result["best"]["accuracy"], "loss": 0.5}
                overrides = [f"task={task}", f"norm={norm}", f"seed={seed}"]
                write_run(tmp_path / f"{task}-{norm}-{seed}", overrides, result)
    result = aggregate.aggregate([tmp_path])
    said = "averages f1 on mrpc with accuracy on rte, as GLUE's score averages its tasks' metrics."
    assert f"The avg column {said}" in result.results()
    assert f"The mean of medians {said}" in result.sweep_report({})


def test_a_failed_run_counts_at_its_trivial_score_in_a_line_beside_the_paired_test(tmp_path):
    """Issue 60 item 6: the paired test leaves a run without a score out, flattering the
    configuration that fails; the line beside it counts a failed run at its recorded trivial
    score, leaves an interrupted one out (no outcome yet), and a failed run since replaced by a
    completed one is no failure."""
    scores = {
        "none": {1: 0.70, 2: 0.66, 3: 0.71, 4: 0.68, 5: 0.69},
        "isobn": {1: 0.72, 2: 0.75, 3: "failed", 4: "interrupted", 5: 0.73},
    }
    for norm, by_seed in scores.items():
        for seed, score in by_seed.items():
            overrides = [f"seed={seed}", "task=rte", f"norm={norm}"]
            result = (
                completed("minilm", norm, "rte", seed, score)
                if isinstance(score, float)
                else ended_early("minilm", norm, "rte", seed, status=score, trivial=0.5)
            )
            write_run(tmp_path / "sweep" / f"{norm}-{seed}", overrides, result)
    # seed 2 failed once before its rerun completed
    write_run(tmp_path / "sweep" / "isobn-2-first", [], ended_early("minilm", "isobn", "rte", 2))
    result = aggregate.aggregate([tmp_path / "sweep"])
    row = result.tables()["paired_statistics"].iloc[0]  # paired_statistics.csv
    none, isobn = (np.array([100 * scores[n][s] for s in (1, 2, 5)]) for n in ("none", "isobn"))
    assert row["n"] == 3 and row["ttest_p"] == pytest.approx(stats.ttest_rel(isobn, none).pvalue)
    none, isobn = np.append(none, 71.0), np.append(isobn, 50.0)  # seed 3 at its trivial score
    assert (row["itt_substituted"], row["itt_n"]) == (1, 4)
    assert row["itt_mean_difference"] == pytest.approx(np.mean(isobn - none))
    assert row["itt_ttest_p"] == pytest.approx(stats.ttest_rel(isobn, none).pvalue)
    report = result.sweep_report({})
    assert (
        "- norm=isobn vs norm=none on rte: Intention to treat (failed runs at their trivial "
        f"score; 1 run in 4 pairs): mean {np.mean(isobn - none):.4f}, "
        "95% t interval [" in report
    )


def test_no_line_beside_the_paired_test_where_no_run_failed_for_good(sweep_dir):
    """The fixture's failed run recorded no settings nor trivial score, its other one is still
    running: the paired statistics are the plain ones, with nothing substituted."""
    result = aggregate.aggregate([sweep_dir], now=CHECKED_AT)
    assert result.paired["itt_substituted"].tolist() == [0, 0]
    assert result.paired["intention_to_treat"].isna().all()
    assert "Intention to treat" not in result.sweep_report({})
