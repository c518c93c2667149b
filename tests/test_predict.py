"""predict.py: a run's kept model (slim or full) scores the dev set as the run recorded it and
writes the test set in GLUE's submission format, with a sidecar per file; from a run folder moved
elsewhere; and each bad input is one message, with nothing written."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from isotune.data.example_ids import example_ids
from isotune.data.glue_format import (
    LABELS,
    SubmissionFile,
    prediction_cell,
    submission_files,
    submission_text,
)
from isotune.data.own_data import own_task
from isotune.data.reading import load_split
from isotune.data.tasks import TaskSpec
from isotune.errors import IsotuneError
from isotune.file_digest import file_sha256
from isotune.prediction import run as prediction_run
from isotune.prediction.kept_model import read_kept_model
from isotune.prediction.run import check_inputs, predict, predict_run
from isotune.prediction.writer import SIDECAR_SUFFIX
from isotune.record.checkpoints import model_only
from isotune.training.hydra_callbacks import InputsChecked
from isotune.training.run import train
from tests.conftest import ROOT, compose_config, compose_train_config, tiny_run_overrides
from tests.helpers.prediction import task_spec, tiny_checkpoint
from tests.helpers.resume import load
from tests.helpers.untrusted import code_running_checkpoint, folder_digest

REAL_GLUE = Path("/work/shared/data/glue")  # GLUE's real test files, where this machine has them
TOLERANCE = 1e-6  # the dev scores against the run's recorded ones, on the same machine


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory, tiny_bert, glue_dir) -> Path:
    """A tiny BERT fine-tuned on the RTE fixture for two epochs, keeping both checkpoints whole."""
    folder = tmp_path_factory.mktemp("runs") / "rte"
    cfg = compose_train_config(
        [
            *tiny_run_overrides(tiny_bert, glue_dir),
            "norm=isobn",  # running statistics: buffers a prediction must load too
            "callbacks.isotropy=null",
            "logger=none",
        ],
        folder,
    )
    results = train(cfg)
    assert results["status"] == "completed"
    return folder


def predict_config(tmp_path: Path, *overrides: str, glue_dir: Path):
    return compose_config(
        "predict", [*overrides, f"paths.glue_dir={glue_dir}", "accelerator=cpu"], tmp_path / "out"
    )


def rows_of(path: Path) -> list[list[str]]:
    with path.open(newline="") as file:
        return list(csv.reader(file, delimiter="\t", quoting=csv.QUOTE_NONE))


@pytest.mark.parametrize("kept", ["full", "slim"])
def test_a_kept_model_scores_the_dev_set_as_its_run_recorded_and_predicts_the_test_set(
    run_folder, glue_dir, tmp_path, kept
):
    best = run_folder / "checkpoints" / "best.ckpt"
    if kept == "slim":  # the file checkpoint.keep=slim keeps: the model only
        best = tmp_path / "run" / "checkpoints" / "best.ckpt"
        shutil.copytree(run_folder, tmp_path / "run", ignore=shutil.ignore_patterns("*.ckpt"))
        torch.save(model_only(load(run_folder / "checkpoints" / "best.ckpt")), best)
    results = json.loads((run_folder / "results.json").read_text())
    summary = predict(predict_config(tmp_path, f"ckpt_path={best}", glue_dir=glue_dir))

    dev = summary["dev"]
    assert dev["recorded"]["epoch"] == results["best_epoch"]
    for key, value in results["best"].items():  # accuracy and loss of the best epoch
        assert dev["scores"]["validation"][key] == pytest.approx(value, abs=TOLERANCE), key
    assert dev["largest_difference"] <= TOLERANCE
    out = tmp_path / "out"
    rows = rows_of(out / "RTE.tsv")
    assert rows[0] == ["index", "prediction"]
    assert [int(index) for index, _ in rows[1:]] == list(range(10))  # the fixture's test file
    assert {label for _, label in rows[1:]} <= {"entailment", "not_entailment"}
    sidecar = json.loads((out / f"RTE.tsv{SIDECAR_SUFFIX}").read_text())
    assert sidecar["checkpoint_sha256"] == file_sha256(best)
    assert sidecar["sha256"] == file_sha256(out / "RTE.tsv")
    assert sidecar["run"] == str(best.parent.parent.resolve()) and sidecar["rows"] == 10
    assert sidecar["commit"] == results["attempts"][-1]["provenance"]["code"]["commit"]
    assert sidecar["test_data"]["sha256"] == file_sha256(glue_dir / "RTE" / "test.tsv")
    assert not list(out.glob("*.tmp*"))  # written whole


def test_the_recorded_scores_are_logged_with_their_epoch_once_as_a_whole_number(
    run_folder, glue_dir, tmp_path, caplog
):
    caplog.set_level("INFO", logger="isotune.prediction.run")
    best = f"ckpt_path={run_folder}/checkpoints/best.ckpt"
    predict(predict_config(tmp_path, best, "test=false", glue_dir=glue_dir))
    epoch = json.loads((run_folder / "results.json").read_text())["best_epoch"]
    (line,) = [m for m in caplog.messages if m.startswith("recorded for these weights")]
    assert line.startswith(f"recorded for these weights (epoch {epoch}): accuracy ")
    assert "epoch" not in line.split(":", 1)[1]  # not again as "epoch 2.000000"


def test_inputs_checked_before_the_folder_is_made_are_read_once(
    run_folder, glue_dir, tmp_path, monkeypatch
):
    reads, hashes = [], []
    read, changed = prediction_run.read_kept_model, prediction_run.changed_splits
    monkeypatch.setattr(prediction_run, "read_kept_model", lambda *a: reads.append(a) or read(*a))
    monkeypatch.setattr(
        prediction_run, "changed_splits", lambda *a: hashes.append(a) or changed(*a)
    )
    best = f"ckpt_path={run_folder}/checkpoints/best.ckpt"
    cfg = predict_config(tmp_path, best, f"hydra.run.dir={tmp_path / 'out'}", glue_dir=glue_dir)
    InputsChecked().on_run_start(config=cfg)  # as predict.py's Hydra callback, before the folder
    summary = predict(cfg, InputsChecked.handed_over(cfg))  # as predict.py hands it over
    assert (len(reads), len(hashes)) == (1, 1)
    assert summary["dev"]["largest_difference"] <= TOLERANCE
    predict(cfg, InputsChecked.handed_over(cfg))  # again: checked again, not handed the first's
    assert (len(reads), len(hashes)) == (2, 2)


def test_predict_uses_only_the_check_it_is_handed(run_folder, glue_dir, tmp_path, monkeypatch):
    """The callback's check reaches predict() as an argument, never through a hidden cache: not
    handed over, it is not used (the inputs are checked again), and it stays for its taker."""
    reads = []
    read = prediction_run.read_kept_model
    monkeypatch.setattr(prediction_run, "read_kept_model", lambda *a: reads.append(a) or read(*a))
    best = f"ckpt_path={run_folder}/checkpoints/best.ckpt"
    out = f"hydra.run.dir={tmp_path / 'out'}"
    cfg = predict_config(tmp_path, best, out, "dev=false", "test=false", glue_dir=glue_dir)
    InputsChecked().on_run_start(config=cfg)
    predict(cfg)
    assert len(reads) == 2
    kept, files = InputsChecked.handed_over(cfg)
    assert kept.file == run_folder / "checkpoints" / "best.ckpt" and files == []
    assert InputsChecked.handed_over(cfg) is None  # taken once


def test_a_run_folder_moved_elsewhere_predicts_the_same_and_is_left_as_it_was(
    run_folder, glue_dir, tmp_path
):
    moved = tmp_path / "elsewhere" / "run"
    shutil.copytree(run_folder, moved)
    before = folder_digest(moved)
    here = predict(
        predict_config(tmp_path, f"ckpt_path={moved}/checkpoints/best.ckpt", glue_dir=glue_dir)
    )
    there = predict(
        predict_config(
            tmp_path / "2", f"ckpt_path={run_folder}/checkpoints/best.ckpt", glue_dir=glue_dir
        )
    )
    assert here["dev"]["scores"] == there["dev"]["scores"]
    assert (tmp_path / "out" / "RTE.tsv").read_text() == (
        tmp_path / "2" / "out" / "RTE.tsv"
    ).read_text()
    assert folder_digest(moved) == before


# -- GLUE's format, against the real test files -------------------------------------------------
def real_glue_with_mnli_tests(tmp_path: Path) -> Path:
    """The real GLUE folder's files, and MNLI test files in their layout (MNLI's are not here):
    AX, predicted by an MNLI model, is read from the real diagnostic/diagnostic.tsv."""
    root = tmp_path / "glue"
    root.mkdir()
    for entry in REAL_GLUE.iterdir():
        (root / entry.name).symlink_to(entry)
    (root / "MNLI").mkdir()
    for name in ("test_matched", "test_mismatched"):
        lines = [
            "\t".join(
                [
                    "index",
                    "promptID",
                    "pairID",
                    "genre",
                    "b1",
                    "b2",
                    "p1",
                    "p2",
                    "sentence1",
                    "sentence2",
                ]
            )
        ]
        lines += [f"{i}\t0\t0\tg\tb\tb\tp\tp\tA cat sat {name}.\tA dog ran." for i in range(7)]
        (root / "MNLI" / f"{name}.tsv").write_text("\n".join(lines) + "\n")
    return root


def test_glues_files_keep_their_index_header_and_index_order(glue_dir):
    """Keeping a task=files test file's own ids leaves GLUE's files as the server reads them:
    GLUE's test examples carry no ids of their own, and each file is ``index<TAB>prediction`` in
    index order."""
    rte = task_spec("rte")
    examples = load_split(rte, rte.test_split, str(glue_dir))
    assert example_ids(examples) is None
    rows = [(example["idx"], example["idx"] % 2) for example in reversed(examples)]
    lines = submission_text(SubmissionFile("RTE", rte), rows, example_ids(examples)).splitlines()
    assert lines[0] == "index\tprediction"
    assert [line.split("\t")[0] for line in lines[1:]] == [str(i) for i in range(len(examples))]
    assert {line.split("\t")[1] for line in lines[1:]} == {"entailment", "not_entailment"}


@pytest.mark.skipif(not REAL_GLUE.is_dir(), reason="no GLUE test files on this machine")
@pytest.mark.parametrize(
    "task", ["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli"]
)
def test_each_file_is_in_glues_submission_format_for_every_real_test_file(
    task, tiny_bert, tmp_path
):
    glue = real_glue_with_mnli_tests(tmp_path)
    spec = task_spec(task)
    present = [f for f in submission_files(spec) if (glue / f.test_file).is_file()]
    if not present:
        pytest.skip(f"no {task} test file on this machine")
    checkpoint = tiny_checkpoint(task, tmp_path / "run", tiny_bert)
    kept, files = check_inputs(str(checkpoint), task, str(glue), tmp_path / "out", dev=False)
    assert [f.name for f in files] == (
        ["MNLI-m", "MNLI-mm", "AX"] if task == "mnli" else [f.name for f in present]
    )
    predict_run(kept, files, tmp_path / "out", str(glue), "cpu", dev=False)
    for file in files:
        test_rows = rows_of(glue / file.test_file)
        written = rows_of(tmp_path / "out" / file.file_name)
        assert written[0] == ["index", "prediction"]
        assert [index for index, _ in written[1:]] == [
            row[0] for row in test_rows[1:]
        ]  # every example, in order
        values = [value for _, value in written[1:]]
        if LABELS[file.name] is None:  # STS-B: a score in [0, 5], three decimals
            assert all(0 <= float(v) <= 5 and len(v.split(".")[1]) == 3 for v in values)
        else:
            assert set(values) <= set(LABELS[file.name])


def test_an_sts_b_score_is_clipped_to_0_5_with_three_decimals_and_labels_are_the_servers():
    stsb, cola, mnli = (task_spec(t) for t in ("stsb", "cola", "mnli"))
    score = SubmissionFile("STS-B", stsb)
    assert [prediction_cell(score, v) for v in (5.7, -0.2, 2.34567)] == ["5.000", "0.000", "2.346"]
    assert prediction_cell(SubmissionFile("CoLA", cola), 1) == "1"
    assert [f.name for f in submission_files(mnli)] == ["MNLI-m", "MNLI-mm", "AX"]
    assert submission_files(mnli)[2].test_file == "diagnostic/diagnostic.tsv"
    renamed = SubmissionFile(
        "CoLA", TaskSpec.from_config({**cola.__dict__, "labels": ["bad", "good"]})
    )
    with pytest.raises(IsotuneError, match=r"restore labels in conf/task/cola.yaml"):
        prediction_cell(renamed, 1)


# -- bad input: one message naming the fix, nothing written --------------------------------------
def test_a_checkpoint_of_another_task_than_typed_is_refused(run_folder, glue_dir, tmp_path):
    with pytest.raises(IsotuneError, match=r"holds a model of task rte, not mrpc.*Fix: drop task="):
        check_inputs(f"{run_folder}/checkpoints/best.ckpt", "mrpc", str(glue_dir), tmp_path)


def test_a_test_file_for_a_glue_checkpoint_is_refused_naming_glues(run_folder, glue_dir, tmp_path):
    best = str(run_folder / "checkpoints" / "best.ckpt")
    with pytest.raises(IsotuneError, match=r"GLUE_DIR's RTE/test\.tsv\. Fix: drop test_file="):
        check_inputs(best, None, str(glue_dir), tmp_path / "out", test_file="new.csv")


def test_a_test_file_without_the_runs_text_columns_is_refused_naming_them_to_rename(
    tiny_bert, tmp_path
):
    # A task=files run's text columns are its checkpoint's: predict.py has no task.text_fields=
    # to offer (Hydra refuses the key), so the fix is renaming the file's columns to the run's.
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("sentence1,sentence2,label\na,b,yes\nc,d,no\n", encoding="utf-8")
    task = own_task({"name": "files", "files": {"train": pairs, "validation": pairs}}).task
    best = tiny_checkpoint(task, tmp_path / "run", tiny_bert)
    new = tmp_path / "new.csv"
    new.write_text("premise,hypothesis\na,b\n", encoding="utf-8")
    with pytest.raises(IsotuneError) as raised:
        check_inputs(str(best), None, None, tmp_path / "out", dev=False, test_file=str(new))
    message = str(raised.value)
    assert f"{new.resolve()} has no column 'sentence1'" in message
    assert "Fix: rename the file's text columns to the run's, 'sentence1' and 'sentence2'" in (
        message
    )
    assert "task.text_fields" not in message


def test_a_dev_file_changed_since_the_run_is_refused_naming_both_hashes(
    run_folder, glue_dir, tmp_path
):
    changed = tmp_path / "glue"
    shutil.copytree(glue_dir, changed)
    dev = changed / "RTE" / "dev.tsv"
    then = file_sha256(dev)
    dev.write_text(dev.read_text().replace("\tentailment\n", "\tnot_entailment\n", 1))
    best = f"{run_folder}/checkpoints/best.ckpt"
    with pytest.raises(IsotuneError) as raised:
        check_inputs(best, None, str(changed), tmp_path / "out")
    message = str(raised.value)
    assert f"{dev} (the validation split) changed since the run of" in message
    assert then in message and file_sha256(dev) in message and "dev=false" in message
    check_inputs(best, None, str(changed), tmp_path / "out", dev=False)  # the test set only


def test_a_missing_test_file_is_refused_naming_it(run_folder, glue_dir, tmp_path):
    partial = tmp_path / "glue"
    shutil.copytree(glue_dir, partial)
    (partial / "RTE" / "test.tsv").unlink()
    with pytest.raises(
        IsotuneError, match=r"has no RTE/test.tsv .*read for RTE.tsv.*Fix: .*test=false"
    ):
        check_inputs(f"{run_folder}/checkpoints/best.ckpt", None, str(partial), tmp_path / "out")


def test_a_checkpoint_that_is_not_the_projects_is_refused(tmp_path, glue_dir):
    other = tmp_path / "other" / "model.ckpt"
    other.parent.mkdir()
    torch.save({"state_dict": {"w": torch.zeros(2)}, "hyper_parameters": {"lr": 0.1}}, other)
    with pytest.raises(
        IsotuneError, match=r"not a checkpoint of this project.*Fix: point ckpt_path"
    ):
        read_kept_model(other)
    torch.save({"w": torch.zeros(2)}, other)
    with pytest.raises(IsotuneError, match=r"not a checkpoint written by train.py.*Fix: point"):
        read_kept_model(other)


def test_a_checkpoint_that_names_code_is_refused_and_none_of_it_runs(tmp_path):
    marker = tmp_path / "ran"
    evil = code_running_checkpoint(tmp_path / "run" / "checkpoints" / "best.ckpt", marker)
    with pytest.raises(IsotuneError, match=r"holds more than data .*posix.system"):
        read_kept_model(evil)
    assert not marker.exists()


def test_a_link_leading_out_of_the_run_folder_is_refused(run_folder, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run_folder, copy)
    elsewhere = tmp_path / "someone" / "best.ckpt"
    elsewhere.parent.mkdir()
    (copy / "checkpoints" / "best.ckpt").rename(elsewhere)
    (copy / "checkpoints" / "best.ckpt").symlink_to(elsewhere)
    with pytest.raises(IsotuneError, match=r"links that lead out of it.*Fix: replace each link"):
        read_kept_model(copy / "checkpoints" / "best.ckpt")


def test_an_output_folder_inside_the_run_folder_is_refused(run_folder, glue_dir):
    with pytest.raises(IsotuneError, match=r"lies inside the run folder.*Fix: leave hydra.run.dir"):
        check_inputs(
            f"{run_folder}/checkpoints/best.ckpt", None, str(glue_dir), run_folder / "predictions"
        )


def test_a_run_that_kept_no_model_names_the_command_that_trains_it_again(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    record = {"status": "completed", "best_checkpoint": None, "overrides": ["task=rte", "seed=3"]}
    (folder / "results.json").write_text(json.dumps(record))
    with pytest.raises(IsotuneError) as refused:
        read_kept_model(folder / "checkpoints" / "best.ckpt")
    message = str(refused.value)
    assert "kept no model" in message
    assert "python train.py task=rte seed=3 checkpoint.keep=slim resume=never" in message


@pytest.mark.slow
def test_predict_py_refuses_another_task_in_one_line_and_writes_nothing(
    run_folder, glue_dir, tmp_path
):
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "predict.py"),
            f"ckpt_path={run_folder}/checkpoints/best.ckpt",
            "task=mrpc",
            f"paths.glue_dir={glue_dir}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    assert "holds a model of task rte, not mrpc" in result.stderr
    assert "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []  # no logs/predict/<stamp>/ either
