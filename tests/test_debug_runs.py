"""Debug runs told apart: a sweep's aggregate and a study's report made of runs of debug=limit
(or of part of dev) say so above their tables, so that they are never read as results."""

from __future__ import annotations

import json

from isotune.record.debug_runs import debug_description, debug_line
from isotune.study.results import read_arm
from isotune.sweeps import aggregate
from tests.helpers.fake_runs import completed, write_multirun, write_run
from tests.helpers.studies import study_report_text, write_search

LIMITED = {"scored": 128, "of": 277}  # debug=limit on RTE: 2 batches of 64 of dev's 277


def test_a_run_is_a_debug_run_by_its_preset_or_by_scoring_part_of_dev():
    assert debug_description({"overrides": ["debug=limit"], "dev_examples": LIMITED}) == (
        "debug=limit: 128 of 277 dev examples scored"
    )
    typed = {"overrides": ["trainer.limit_val_batches=2"], "dev_examples": LIMITED}
    assert debug_description(typed) == "128 of 277 dev examples scored"
    assert debug_description({"overrides": ["debug=fdr"]}) == "debug=fdr"  # an older record
    whole = {"overrides": ["debug=null", "seed=1"], "dev_examples": {"scored": 277, "of": 277}}
    assert debug_description(whole) is None
    assert debug_line([None, None]) is None
    assert debug_line(["debug=fdr", None]) == (
        "1 of these 2 runs is a debug run (debug=fdr): not results."
    )


def test_an_aggregate_of_debug_runs_says_so_above_its_tables(tmp_path):
    write_multirun(tmp_path, ["debug=limit", "seed=1,2"])
    for job, seed in enumerate((1, 2)):
        result = {**completed("minilm", "none", "rte", seed, 0.6), "dev_examples": LIMITED}
        write_run(tmp_path / str(job), ["debug=limit", f"seed={seed}"], result)
    results = aggregate.aggregate([tmp_path]).results()
    assert results.splitlines()[0] == (
        "These runs are debug runs (debug=limit: 128 of 277 dev examples scored): not results."
    )


def test_a_study_report_of_debug_runs_says_so_under_its_title(tmp_path):
    report = {101: 0.55, 102: 0.57, 103: 0.56}
    outcomes = []
    for arm in ("none", "isobn"):
        folder = tmp_path / "rte" / arm
        write_search(folder, "rte", {0: 0.6}, report, {"optim.lr": 3e-5})
        for results in folder.glob("report/*/*/results.json"):
            result = json.loads(results.read_text())
            results.write_text(json.dumps({**result, "dev_examples": LIMITED}))
        outcomes.append(read_arm(folder, "rte", arm, list(report)))
    text = study_report_text(outcomes)
    assert text.splitlines()[4] == (
        "**These runs are debug runs (128 of 277 dev examples scored): not results.**"
    )
