"""``python -m isotune.dashboard report``: where its files go. A carried folder (one kept in git,
like docs/results/isotropy_results_minilm) made again with ``--out`` elsewhere stays untouched,
and made again in place gives the same report, byte for byte, so that ``git status`` stays
clean when nothing changed."""

from __future__ import annotations

from isotune.dashboard.cli import REPORT_JSON, main
from tests.helpers.fake_runs import completed, write_multirun, write_run


def carried_sweep(folder):
    """A finished sweep of two norms over two seeds, as a folder kept in git holds it."""
    write_multirun(folder, ["norm=none,isobn", "seed=1,2"])
    scores = {("none", 1): 0.61, ("none", 2): 0.63, ("isobn", 1): 0.65, ("isobn", 2): 0.64}
    for job, ((norm, seed), score) in enumerate(scores.items()):
        write_run(
            folder / str(job),
            [f"norm={norm}", f"seed={seed}"],
            completed("minilm", norm, "rte", seed, score),
        )
    return folder


def files_of(folder):
    return {
        path.relative_to(folder): path.read_bytes() for path in folder.rglob("*") if path.is_file()
    }


def test_a_report_with_out_leaves_the_sweep_folder_as_it_was(tmp_path, capsys):
    sweep = carried_sweep(tmp_path / "carried")
    before = files_of(sweep)
    out = tmp_path / "elsewhere"
    assert main(["report", str(sweep), "--out", str(out), "--dry-run"]) == 0
    assert files_of(sweep) == before
    assert (out / REPORT_JSON).is_file() and (out / "sweep_report.md").is_file()
    assert f"Dry run: wrote {out / REPORT_JSON}: the report" in capsys.readouterr().out


def test_a_report_made_again_in_place_writes_the_same_json(tmp_path):
    sweep = carried_sweep(tmp_path / "carried")
    assert main(["report", str(sweep), "--dry-run"]) == 0
    first = (sweep / REPORT_JSON).read_bytes()
    assert main(["report", str(sweep), "--dry-run"]) == 0
    assert (sweep / REPORT_JSON).read_bytes() == first
