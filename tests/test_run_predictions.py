"""``train.py write_test_predictions=true`` writes what ``predict.py`` writes (one writer,
:mod:`isotune.prediction.writer`): GLUE's server files (MNLI: MNLI-m, MNLI-mm and AX), its
labels, STS-B's scores in [0, 5] with three decimals, and a sidecar per file naming the run's
best checkpoint."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
import torch

from isotune.data.glue_format import LABELS
from isotune.errors import IsotuneError
from isotune.file_digest import file_sha256
from isotune.model.classifier import GLUEClassifier
from isotune.prediction.writer import SIDECAR_SUFFIX
from isotune.training.run import train
from tests.conftest import compose_train_config, tiny_run_overrides

MNLI_HEADER = "index\tpromptID\tpairID\tgenre\tb1\tb2\tp1\tp2\tsentence1\tsentence2"
MNLI_LABELS = ("entailment", "neutral", "contradiction")


def mnli_like(glue_dir: Path, root: Path) -> Path:
    """The fixture GLUE folder plus MNLI's layout: train, both dev sets (a label column last),
    both test sets, and the diagnostic (AX) that MNLI's model predicts."""
    shutil.copytree(glue_dir, root)
    (root / "MNLI").mkdir()
    (root / "diagnostic").mkdir()

    def rows(n: int, labelled: bool) -> list[str]:
        lines = []
        for i in range(n):
            label = f"\t{MNLI_LABELS[i % 3]}" if labelled else ""
            pair = f"a cat sat {i % 3}.\ta dog ran {i % 3}."
            lines.append(f"{i}\t0\t0\tg\tb\tb\tp\tp\t{pair}{label}")
        return lines

    for name, n, labelled in (
        ("train", 24, True),
        ("dev_matched", 9, True),
        ("dev_mismatched", 9, True),
        ("test_matched", 7, False),
        ("test_mismatched", 5, False),
    ):
        header = MNLI_HEADER + ("\tgold_label" if labelled else "")
        (root / "MNLI" / f"{name}.tsv").write_text("\n".join([header, *rows(n, labelled)]) + "\n")
    diagnostic = [f"{i}\tthe cat sat.\tthe cat did not sit." for i in (2, 0, 1)]  # out of order
    (root / "diagnostic" / "diagnostic.tsv").write_text(
        "\n".join(["index\tsentence1\tsentence2", *diagnostic]) + "\n"
    )
    return root


def rows_of(path: Path) -> list[list[str]]:
    with path.open(newline="") as file:
        return list(csv.reader(file, delimiter="\t", quoting=csv.QUOTE_NONE))


@pytest.mark.slow
def test_an_mnli_run_writes_the_servers_three_files_with_sidecars(tmp_path, tiny_bert, glue_dir):
    glue = mnli_like(glue_dir, tmp_path / "glue")
    run = tmp_path / "run"
    overrides = [*tiny_run_overrides(tiny_bert, glue), "task=mnli", "write_test_predictions=true"]
    results = train(compose_train_config([*overrides, "callbacks.isotropy=null"], run))
    assert results["status"] == "completed"
    folder = run / "predictions"
    written = sorted(path.name for path in folder.glob("*.tsv"))
    assert written == ["AX.tsv", "MNLI-m.tsv", "MNLI-mm.tsv"]  # not MNLI.tsv
    for name, indices in (("MNLI-m", range(7)), ("MNLI-mm", range(5)), ("AX", range(3))):
        rows = rows_of(folder / f"{name}.tsv")
        assert rows[0] == ["index", "prediction"]
        assert [int(index) for index, _ in rows[1:]] == list(indices)  # index order
        assert {label for _, label in rows[1:]} <= set(LABELS[name])
        sidecar = json.loads((folder / f"{name}.tsv{SIDECAR_SUFFIX}").read_text())
        assert sidecar["checkpoint"] == results["best_checkpoint"]
        assert sidecar["checkpoint_sha256"] == file_sha256(Path(results["best_checkpoint"]))
        assert sidecar["run"] == str(run.resolve()) and sidecar["epoch"] == results["best_epoch"]
        assert sidecar["rows"] == len(indices)
    assert json.loads((folder / f"AX.tsv{SIDECAR_SUFFIX}").read_text())["test_data"] == {
        "path": str((glue / "diagnostic" / "diagnostic.tsv").resolve()),
        "sha256": file_sha256(glue / "diagnostic" / "diagnostic.tsv"),
    }


def test_an_sts_b_run_clips_its_scores_to_0_5_with_three_decimals(
    train_config, tmp_path, monkeypatch
):
    def out_of_range(self, batch, batch_idx):  # a regression head's scores beyond STS-B's scale
        index, _ = predict_step(self, batch, batch_idx)
        return index, torch.where(index % 2 == 0, 9.25, -3.5)

    predict_step = GLUEClassifier.predict_step
    monkeypatch.setattr(GLUEClassifier, "predict_step", out_of_range)
    cfg = train_config("task=stsb", "write_test_predictions=true", "callbacks.isotropy=null")
    assert train(cfg)["status"] == "completed"
    rows = rows_of(tmp_path / "predictions" / "STS-B.tsv")
    assert rows[0] == ["index", "prediction"]
    assert rows[1:] == [[str(i), "5.000" if i % 2 == 0 else "0.000"] for i in range(10)]
    assert (tmp_path / "predictions" / f"STS-B.tsv{SIDECAR_SUFFIX}").is_file()


def test_a_missing_test_file_of_mnlis_three_is_refused_before_the_run_trains(
    tmp_path, tiny_bert, glue_dir
):
    glue = mnli_like(glue_dir, tmp_path / "glue")
    (glue / "diagnostic" / "diagnostic.tsv").unlink()
    overrides = [*tiny_run_overrides(tiny_bert, glue), "task=mnli", "write_test_predictions=true"]
    with pytest.raises(IsotuneError, match=r"has no diagnostic/diagnostic.tsv .*read for AX.tsv"):
        train(compose_train_config(overrides, tmp_path / "run"))
    assert not (tmp_path / "run" / "checkpoints").exists()  # nothing trained
