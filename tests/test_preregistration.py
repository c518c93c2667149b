"""A sequential plan locked from its statement to its last look (issue 68; docs/study.md, "A plan
no one can bend"): the stored plan checked against its digest and against what was typed on
every path that reads it, nothing written over it, a format-1 plan migrated with its six keys
byte for byte, each look frozen when taken and never taken twice, and no stated score shown
before its look. The carried IsoBN study (docs/results/sequential_rte_isobn) is the fixture: a
real plan, real runs, a real journal."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import yaml

from isotune.dashboard.cli import main as dashboard_main
from isotune.errors import IsotuneError
from isotune.study.looks_journal import LOOKS_FILE, read_journal
from isotune.study.migration import migrate
from isotune.study.preregistration import (
    PLAN_FILE,
    check_typed,
    read_registration,
    typed_fields,
)
from isotune.study.report import RUNS_FILE, write_study_reports
from isotune.study.results import read_study
from isotune.study.stated_looks import locked_plan, study_looks, take_looks, verified_plan
from isotune.sweeps.runs import find_sweeps
from tests.conftest import ROOT

CARRIED = ROOT / "docs" / "results" / "sequential_rte_isobn"
STATED_BOUNDARIES = (6.86, 3.11, 2.44, 2.12)


@pytest.fixture
def study(tmp_path: Path) -> Path:
    """A copy of the carried IsoBN study (decided at look 2), its figures left behind."""
    folder = tmp_path / "isotropy_results_minilm"
    shutil.copytree(CARRIED, folder, ignore=shutil.ignore_patterns("*.png"))
    return folder


@pytest.fixture
def undecided(study: Path) -> Path:
    """The carried study as a kill left it between its looks: look 1 frozen, look 2's pairs all
    run but the look not yet taken."""
    looks = (study / LOOKS_FILE).read_text().splitlines(keepends=True)
    (study / LOOKS_FILE).write_text(looks[0])
    return study


def stated_of(folder: Path):
    found = read_study(folder)
    assert found is not None and found.stated is not None
    return found


def test_the_carried_plan_is_locked_with_its_stated_boundaries_and_rules():
    registration = read_registration(CARRIED / PLAN_FILE)
    assert registration.plan.boundaries == STATED_BOUNDARIES
    assert registration.plan.rules == ("repeated_interval",)
    assert (registration.task, registration.arm, registration.baseline) == ("rte", "isobn", "none")
    assert registration.seeds == tuple(range(126, 166))
    assert registration.statistic.describe() == "dev accuracy at the epoch dev accuracy chose"
    assert registration.stated_at == "2026-12-06T04:37:36+00:00"
    assert registration.plan.margin == 0.01 and registration.plan.alpha == 0.05


@pytest.mark.parametrize(
    ("field", "typed", "named"),
    [
        ("looks", (5, 10, 30, 40), "looks: stored [10, 20, 30, 40], typed [5, 10, 30, 40]"),
        ("margin", 0.02, "margin: stored 0.01, typed 0.02"),
        ("alpha", 0.1, "alpha: stored 0.05, typed 0.1"),
        ("spending", "pocock", "spending: stored 'obf', typed 'pocock'"),
        ("select_epoch", "last", "statistic.select_epoch: stored 'best', typed 'last'"),
        ("arm", "none", "arm: stored 'isobn', typed 'none'"),
    ],
)
def test_each_field_typed_otherwise_than_the_stored_plan_is_refused_by_name(
    study, field, typed, named
):
    """The training path (the study command) and the report path (the aggregate, the W&B
    report) both compare what was typed, or recorded as typed, with the stored plan."""
    test = stated_of(study).stated
    changed = replace(test, **{field: typed})
    with pytest.raises(IsotuneError, match="Fix:") as refused:
        verified_plan(changed, study, "accuracy")
    assert named in str(refused.value)
    with pytest.raises(IsotuneError, match="Fix:"):
        locked_plan(changed, study, "accuracy")  # the study command, stated runs or not


def test_a_seed_list_without_two_of_its_seeds_is_refused():
    """A review found seeds 129 and 131 (both -1.08) could be dropped after their runs existed."""
    registration = read_registration(CARRIED / PLAN_FILE)
    test = stated_of(CARRIED).stated
    dropped = tuple(s for s in test.seeds if s not in (129, 131))
    with pytest.raises(IsotuneError, match=r"seeds: stored \[126, 127, 128, 129"):
        check_typed(registration, typed_fields(replace(test, seeds=dropped), None), CARRIED)


def test_another_metric_typed_is_refused_and_an_unknown_one_is_not_compared():
    registration = read_registration(CARRIED / PLAN_FILE)
    test = stated_of(CARRIED).stated
    check_typed(registration, typed_fields(test, None), CARRIED)
    with pytest.raises(IsotuneError, match=r"statistic\.metric: stored 'accuracy', typed 'f1'"):
        check_typed(registration, typed_fields(test, "f1"), CARRIED)


@pytest.mark.parametrize(
    ("line", "edited"),
    [("- 6.86", "- 2.0"), ("margin: 0.01", "margin: 0.02"), ("- 165", "- 166"),
     ("select_epoch: best", "select_epoch: last")],
)  # fmt: skip
def test_a_plan_edited_in_its_file_is_refused_on_every_read(study, line, edited):
    """Editing the first boundary from 6.86 to 2.0 made look 1 "equivalent" before the lock."""
    path = study / PLAN_FILE
    path.write_text(path.read_text().replace(line, edited, 1))
    with pytest.raises(IsotuneError, match="was changed after the plan was stored") as refused:
        read_registration(path)
    assert "git checkout" in str(refused.value)
    with pytest.raises(IsotuneError, match="was changed after the plan was stored"):
        write_study_reports(find_sweeps(study), None)  # python -m isotune.aggregate's path


def test_the_report_path_refuses_a_record_typed_otherwise(study):
    """The study's record of its command (multirun.yaml) typed with another margin."""
    record = yaml.safe_load((study / "multirun.yaml").read_text())
    record["hydra"]["sweeper"]["stated"]["margin"] = 0.02
    (study / "multirun.yaml").write_text(yaml.safe_dump(record))
    with pytest.raises(IsotuneError, match=r"margin: stored 0\.01, typed 0\.02"):
        write_study_reports(find_sweeps(study), None)


def test_nothing_writes_over_a_stored_plan_and_stated_runs_need_one(study):
    registration = read_registration(study / PLAN_FILE)
    before = (study / PLAN_FILE).read_bytes()
    with pytest.raises(IsotuneError, match="is never written over"):
        registration.write(study / PLAN_FILE)
    assert (study / PLAN_FILE).read_bytes() == before
    (study / PLAN_FILE).unlink()
    test = stated_of(study).stated
    with pytest.raises(IsotuneError, match=r"already has stated runs .* no plan written"):
        locked_plan(test, study, "accuracy")
    with pytest.raises(IsotuneError, match="is missing"):
        verified_plan(test, study)
    assert not (study / PLAN_FILE).exists()


def test_a_format_1_plan_is_refused_naming_its_migration_which_keeps_its_six_keys(study):
    """The migration of the carried plan made again: the six keys as first stored, byte for
    byte, the other fields from the study's record, the same digest as the carried plan, and
    look 1 recorded at the migration with the same decision."""
    locked = (study / PLAN_FILE).read_text()
    format_1 = locked.split("format: 2\n")[0]
    (study / PLAN_FILE).write_text(format_1)
    carried = read_journal(CARRIED, read_registration(CARRIED / PLAN_FILE))
    (study / LOOKS_FILE).unlink()
    with pytest.raises(IsotuneError, match=r"python -m isotune\.study\.migration"):
        read_registration(study / PLAN_FILE)
    migrated = migrate(study)
    assert (study / PLAN_FILE).read_text() == locked
    assert (study / PLAN_FILE).read_text().startswith(format_1)
    looks = read_journal(study, migrated)  # every look its runs have reached, said so
    assert [look.decision for look in looks] == [look.decision for look in carried]
    assert [look.pairs for look in looks] == [look.pairs for look in carried]
    assert all(look.recorded.startswith("at the plan's migration") for look in looks)
    with pytest.raises(IsotuneError, match="nothing to migrate"):
        migrate(study)


def test_a_look_is_frozen_and_a_run_changed_since_is_named_not_counted(study):
    found = stated_of(study)
    looks = study_looks(study, found.stated, found.outcomes)
    assert [d.decision for d in looks.taken] == ["go on", "equivalent"] and looks.changed == ()
    run = study / "rte" / "isobn" / "report" / "trial-000" / "seed-129" / "results.json"
    record = json.loads(run.read_text())
    record["best"]["accuracy"] = 0.99  # rerun after its look, say
    run.write_text(json.dumps(record))
    after = study_looks(study, found.stated, read_study(study).outcomes)
    assert after.taken == looks.taken  # the frozen decision stands
    assert after.changed == ("rte/isobn/report/trial-000/seed-129",)
    write_study_reports(find_sweeps(study), None)
    assert "Changed since their look (the frozen decision stands): rte/isobn/report/trial-000/" \
        "seed-129." in (study / "study_report.md").read_text()  # fmt: skip


def test_a_look_is_never_taken_twice_also_after_a_kill_mid_record(undecided):
    """A kill between looks: look 2's pairs all in, its record cut short. Typed again, the study
    takes look 2 once, as the carried study took it; typed again after, nothing."""
    found = stated_of(undecided)
    registration = read_registration(undecided / PLAN_FILE)
    with (undecided / LOOKS_FILE).open("ab") as journal:  # the kill cut look 2's record short
        journal.write(b'{"look": 2, "n": 20, "bound')
    assert len(read_journal(undecided, registration)) == 1
    take_looks(undecided, registration, found.stated, found.outcomes)
    looks = read_journal(undecided, registration)
    carried = read_journal(CARRIED, read_registration(CARRIED / PLAN_FILE))
    assert [look.decision for look in looks] == [look.decision for look in carried]
    lines = (undecided / LOOKS_FILE).read_bytes()
    take_looks(undecided, registration, found.stated, found.outcomes)  # decided: nothing due
    assert (undecided / LOOKS_FILE).read_bytes() == lines


def test_a_journal_of_another_plan_is_refused(study):
    text = (study / LOOKS_FILE).read_text().replace("sha256:4", "sha256:5", 1)
    (study / LOOKS_FILE).write_text(text)
    with pytest.raises(IsotuneError, match="Fix: restore the journal with its plan"):
        read_journal(study, read_registration(study / PLAN_FILE))


def test_no_stated_score_shows_before_its_look_and_the_tables_hold_the_stated_seeds_back(
    undecided,
):
    """Undecided, every stated seed is left out of the exploratory tables and study_runs.csv,
    though look 2's pairs are all in (the aggregate never takes a look); once decided, the
    stated seeds of its looks count."""
    write_study_reports(find_sweeps(undecided), None)
    runs = pd.read_csv(undecided / RUNS_FILE).query("phase == 'report'")
    assert set(runs["seed"]) == {101, 102, 103, 104, 105}
    text = (undecided / "study_report.md").read_text()
    assert "stated seeds 126-145, while the stated test is undecided" in text
    assert "**Go on:** the next look at 20 pairs (20 in)" in text
    exploratory = text.split("Everything below is exploratory")[1]
    assert "(n = 5)" in exploratory and "(n = 25)" not in exploratory
    decided = (CARRIED / "study_report.md").read_text().split("Everything below")[1]
    assert "(n = 25)" in decided


def test_the_wandb_report_holds_the_stated_seeds_back_and_checks_the_plan(
    undecided, tmp_path, capsys
):
    """The W&B report (offline, --dry-run) is one of the paths that read the plan: its tables
    leave the stated seeds out while undecided, and an edited plan stops it."""
    out = tmp_path / "report"
    assert dashboard_main(["report", str(undecided), "--dry-run", "--out", str(out)]) == 0
    paired = pd.read_csv(out / "paired_statistics.csv")
    assert list(paired["n"]) == [5]  # seeds 101-105 alone
    path = undecided / PLAN_FILE
    path.write_text(path.read_text().replace("- 6.86", "- 2.0", 1))
    assert dashboard_main(["report", str(undecided), "--dry-run", "--out", str(out)]) == 2
    assert "was changed after the plan was stored" in capsys.readouterr().err
