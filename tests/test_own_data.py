"""Your own data (task=files): CSV, TSV and JSON Lines files derived from the real GLUE files in
tmp folders, the task they decide, a tiny run on them, and one message for each bad file."""

from __future__ import annotations

import dataclasses
import logging
import os
from collections import Counter
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score

from isotune.analysis.run import analyze
from isotune.data import load_split, own_data
from isotune.data.example_ids import example_ids
from isotune.data.glue_format import SubmissionFile, submission_text
from isotune.data.metrics import build_metrics, compute_scores
from isotune.data.own_data import own_task, read_own_split
from isotune.data.reading import check_task_offline
from isotune.data.tasks import TaskSpec
from isotune.errors import IsotuneError
from isotune.file_digest import file_sha256
from isotune.prediction.run import check_inputs, files_to_predict, predict
from isotune.training.run import train
from tests.conftest import compose_config, compose_train_config, tiny_run_overrides
from tests.helpers.analysis import SMALL
from tests.helpers.own_files import files_task, write_delimited, write_json_lines, write_lines
from tests.helpers.tasks import load_task

SHARED_GLUE = os.environ.get("GLUE_DIR")
needs_glue = pytest.mark.skipif(not SHARED_GLUE, reason="GLUE_DIR is not set (the real GLUE files)")


def glue_rows(task: str, split: str, n: int) -> list[dict]:
    """The first ``n`` examples of a real GLUE split, read by the GLUE reader."""
    return load_split(load_task(task), split, SHARED_GLUE)[:n]


def sst2_tsv(folder: Path, split: str, n: int) -> Path:
    glue = "train" if split == "train" else "validation"
    rows = [[ex["sentence"], ex["label"]] for ex in glue_rows("sst2", glue, n)]
    return write_delimited(folder / f"{split}.tsv", ["sentence", "label"], rows, "\t")


@needs_glue
def test_a_tsv_reads_as_the_glue_file_it_came_from(tmp_path):
    task = files_task(sst2_tsv(tmp_path, "train", 300), sst2_tsv(tmp_path, "dev", 100))
    assert (task.text_fields, task.labels, task.is_regression) == (("sentence",), ("0", "1"), False)
    assert (task.metrics, task.primary_metric) == (("accuracy", "macro_f1"), "accuracy")
    own = read_own_split(task, "train")
    assert [(ex["sentence"], ex["label"]) for ex in own] == [
        (ex["sentence"], ex["label"]) for ex in glue_rows("sst2", "train", 300)
    ]


@needs_glue
@pytest.mark.parametrize(
    ("name", "folder", "label_column"), [("rte", "RTE", "label"), ("stsb", "STS-B", "score")]
)
def test_glue_tsvs_with_bare_quotes_read_as_files_as_the_glue_reader_reads_them(
    name, folder, label_column
):
    """A TSV is unquoted: RTE's and STS-B's texts with quote characters stay whole."""
    glue = Path(SHARED_GLUE) / folder
    task = files_task(glue / "train.tsv", glue / "dev.tsv", label_column=label_column)
    for split in ("train", "validation"):
        own, official = read_own_split(task, split), load_split(load_task(name), split, SHARED_GLUE)
        fields = zip(task.text_fields, load_task(name).text_fields, strict=True)
        pairs = [(mine, theirs) for mine, theirs in fields]
        assert [[ex[mine] for mine, _ in pairs] for ex in own] == [
            [ex[theirs] for _, theirs in pairs] for ex in official
        ]
        labels = [task.labels[ex["label"]] if task.labels else ex["label"] for ex in own]
        glue_task = load_task(name)
        assert labels == [
            glue_task.labels[ex["label"]] if glue_task.labels else ex["label"] for ex in official
        ]


@needs_glue
def test_a_csv_with_quoted_commas_and_quotes_reads_each_text_whole(tmp_path):
    names = ["not_equivalent", "equivalent"]

    def pairs(split: str, n: int) -> list[list]:
        return [
            [ex["sentence1"], ex["sentence2"], names[ex["label"]]]
            for ex in glue_rows("mrpc", split, n)
        ]

    header = ["sentence1", "sentence2", "label"]
    train_rows, dev_rows = pairs("train", 200), pairs("validation", 60)
    train_file = write_delimited(tmp_path / "train.csv", header, train_rows, ",")
    dev_file = write_delimited(tmp_path / "dev.csv", header, dev_rows, ",")
    assert '"' in train_file.read_text()  # MRPC's commas and quotes are quoted by the writer
    task = files_task(train_file, dev_file)
    assert task.text_fields == ("sentence1", "sentence2") and task.labels == tuple(sorted(names))
    own = read_own_split(task, "validation")
    assert [[ex["sentence1"], ex["sentence2"], task.labels[ex["label"]]] for ex in own] == dev_rows
    assert any("," in row[0] for row in dev_rows)


@needs_glue
def test_json_lines_with_named_columns_and_string_labels(tmp_path):
    def objects(split: str, n: int) -> list[dict]:
        names = load_task("rte").labels
        return [
            {"id": i, "premise": ex["sentence1"], "hypothesis": ex["sentence2"],
             "gold": names[ex["label"]]}
            for i, ex in enumerate(glue_rows("rte", split, n))
        ]  # fmt: skip

    train_file = write_json_lines(tmp_path / "train.jsonl", objects("train", 120))
    dev_file = write_json_lines(tmp_path / "dev.jsonl", objects("validation", 40))
    task = files_task(
        train_file, dev_file, text_fields=["premise", "hypothesis"], label_column="gold"
    )
    assert task.labels == ("entailment", "not_entailment")
    own = read_own_split(task, "validation")
    glue = glue_rows("rte", "validation", 40)
    assert [ex["label"] for ex in own] == [ex["label"] for ex in glue]


@needs_glue
def test_a_column_of_decimal_scores_is_a_regression_scored_by_pearson_and_spearman(tmp_path):
    def scores(split: str, n: int) -> list[list]:
        return [
            [ex["sentence1"], ex["sentence2"], f"{ex['label']:.3f}"]
            for ex in glue_rows("stsb", split, n)
        ]

    header = ["sentence1", "sentence2", "score"]
    train_file = write_delimited(tmp_path / "train.csv", header, scores("train", 200), ",")
    dev_file = write_delimited(tmp_path / "dev.tsv", header, scores("validation", 80), "\t")
    task = files_task(train_file, dev_file, label_column="score")
    assert task.is_regression and task.num_labels == 1 and task.labels is None
    assert (task.metrics, task.primary_metric) == (("pearson", "spearmanr"), "pearson")
    labels = [ex["label"] for ex in read_own_split(task, "validation")]
    assert labels == [ex["label"] for ex in glue_rows("stsb", "validation", 80)]


def test_integer_labels_are_classes_in_numeric_order_and_scores_match_scipy_and_sklearn(tmp_path):
    rows = [[f"text {i}", str(label)] for i, label in enumerate([2, 10, 1, 2, 10, 1, 2])]
    train_file = write_delimited(tmp_path / "train.csv", ["text", "label"], rows, ",")
    task = files_task(train_file, train_file)
    assert task.labels == ("1", "2", "10") and task.text_fields == ("text",)
    truth, guess = [0, 1, 2, 1, 0, 2, 2, 1], [0, 1, 1, 1, 0, 0, 2, 1]
    metrics = build_metrics(task.metrics, task.num_labels)
    metrics.update(torch.tensor(guess), torch.tensor(truth))
    scores = compute_scores(metrics)
    assert scores["accuracy"] == pytest.approx(accuracy_score(truth, guess))
    assert scores["macro_f1"] == pytest.approx(f1_score(truth, guess, average="macro"))
    regression = build_metrics(("pearson", "spearmanr"), 1)
    x, y = torch.tensor([0.1, 2.0, 1.5, 4.0, 3.3]), torch.tensor([0.0, 1.0, 2.0, 5.0, 3.0])
    regression.update(x, y)
    scores = compute_scores(regression)
    assert scores["pearson"] == pytest.approx(pearsonr(x, y).statistic, abs=1e-6)
    assert scores["spearmanr"] == pytest.approx(spearmanr(x, y).statistic, abs=1e-6)


def small_files(folder: Path, train: list[list], dev: list[list], suffix: str = ".csv"):
    header = ["sentence", "label"]
    return (
        write_delimited(folder / f"train{suffix}", header, train, ","),
        write_delimited(folder / f"dev{suffix}", header, dev, ","),
    )


GOOD = [["a fine film", "pos"], ["a dull film", "neg"], ["fine", "pos"]]


@pytest.mark.parametrize(
    ("train_rows", "dev_rows", "settings", "expected"),
    [
        (
            GOOD,
            GOOD,
            {"label_column": "stars"},
            [
                "has no column 'stars' (the label column task=files reads); its columns are "
                "['sentence', 'label']. Fix: task.label_column=<one of them>",
            ],
        ),
        (
            GOOD,
            [*GOOD, ["awful", "neutral"], ["meh", "neutral"]],
            {},
            [
                "dev.csv: labels ['neutral'] (2 rows, lines 5, 6) are not among the train "
                "file's labels ['neg', 'pos']",
                "Fix: correct those rows, add examples of them to the train file",
            ],
        ),
        (
            [*GOOD, ["", "pos"], ["  ", "neg"], ["ok", "pos"], ["", "neg"]],
            GOOD,
            {},
            [
                "train.csv: the text column 'sentence' is empty in 3 of 7 rows (lines 5, 6, 8). "
                "Fix: fill in or remove those rows."
            ],
        ),
        ([], GOOD, {}, ["train.csv has no examples (it is empty, or holds only a header row)"]),
        (
            GOOD,
            GOOD,
            {"text_fields": ["review"]},
            ["has no column 'review' (the text column task=files reads)", "task.text_fields="],
        ),
    ],
    ids=["no-such-column", "dev-label-not-in-train", "missing-texts", "empty", "no-text-column"],
)
def test_a_bad_file_is_refused_with_one_message_naming_the_fix(
    tmp_path, train_rows, dev_rows, settings, expected
):
    train_file, dev_file = small_files(tmp_path, train_rows, dev_rows)
    with pytest.raises(IsotuneError) as raised:
        files_task(train_file, dev_file, **settings)
    for part in expected:
        assert part in str(raised.value)


def test_a_zero_byte_file_and_a_file_of_no_known_kind_are_refused(tmp_path):
    train_file, _ = small_files(tmp_path, GOOD, GOOD)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(IsotuneError, match=r"empty\.jsonl has no examples"):
        files_task(train_file, empty)
    sheet = tmp_path / "dev.xlsx"
    sheet.write_text("x")
    with pytest.raises(IsotuneError, match=r"\.xlsx file, but data files are read by their suffix"):
        files_task(train_file, sheet)


REVIEWS = [f"review {i},{'good' if i % 2 else 'bad'}" for i in range(20)]  # lines 2-21


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ("it was long, but fun,good", "train.csv: line 13 has 3 fields, the header 2 (1 row of"),
        ("it was long", "train.csv: line 13 has 1 field, the header 2 (1 row of"),
    ],
    ids=["unquoted-comma", "short-row"],
)
def test_a_csv_row_of_another_length_than_the_header_is_refused_naming_its_line(
    tmp_path, row, expected
):
    """An unquoted comma cut a text in two and trained its second piece as a class of its own
    (labels [' but fun', 'bad', 'good']); a short row was a row with an empty label."""
    train_file = write_lines(tmp_path / "train.csv", ["sentence,label", *REVIEWS[:11], row])
    dev_file = write_lines(tmp_path / "dev.csv", ["sentence,label", *REVIEWS])
    with pytest.raises(IsotuneError) as raised:
        files_task(train_file, dev_file)
    assert expected in str(raised.value)
    assert '("it was long, but fun",good)' in str(raised.value)  # the fix: quote it


def test_a_tsv_row_with_a_tab_in_its_text_is_refused_and_an_empty_value_is_still_empty(tmp_path):
    header = "sentence\tlabel"
    rows = [row.replace(",", "\t") for row in REVIEWS]
    dev_file = write_lines(tmp_path / "dev.tsv", [header, *rows])
    tabbed = write_lines(tmp_path / "train.tsv", [header, *rows[:3], "a\ttab\tgood", *rows])
    with pytest.raises(IsotuneError, match=r"line 5 has 3 fields, the header 2.*no tab"):
        files_task(tabbed, dev_file)
    # A row of the header's length with nothing in its label: the empty label, as before.
    blank = write_lines(tmp_path / "blank.csv", ["sentence,label", *REVIEWS[:5], "a sentence,"])
    with pytest.raises(IsotuneError, match=r"the label column 'label' is empty in 1 of 6 rows"):
        files_task(blank, dev_file)


def scores_csv(path: Path, scores: list[str]) -> Path:
    return write_lines(path, ["sentence,label", *(f"text {i},{s}" for i, s in enumerate(scores))])


def test_a_score_column_with_a_value_that_is_not_a_number_is_refused_naming_its_lines(tmp_path):
    """Scores with one n/a trained a 52-class classifier that FAILED TO LEARN, warning nothing."""
    scores = [f"{i / 10:.1f}" for i in range(30, 50)]
    train_file = scores_csv(tmp_path / "train.csv", [*scores[:7], "n/a", *scores[7:]])
    dev_file = scores_csv(tmp_path / "dev.csv", scores)
    with pytest.raises(IsotuneError) as raised:
        files_task(train_file, dev_file)
    message = str(raised.value)
    assert (
        "train.csv: the label column 'label' holds scores (20 of 21 values are numbers" in message
    )
    assert "but 1 is not a number: 'n/a' (lines 9)" in message
    assert "Fix: correct those rows" in message and "task.regression=false" in message
    # Said to be classes, by task.regression=false or by naming them, they are read as classes.
    assert files_task(train_file, train_file, regression=False).num_labels == 21
    labels = ["n/a", *scores]
    assert files_task(train_file, train_file, labels=labels).labels == tuple(labels)
    # Words with a decimal or two among them are classes, as before.
    words = scores_csv(tmp_path / "words.csv", ["pos", "neg", "0.5", "pos", "neg"])
    assert files_task(words, words).labels == ("0.5", "neg", "pos")


def test_more_classes_than_a_quarter_of_the_train_rows_is_warned_naming_the_count(tmp_path):
    config = {"name": "files", "source": "files", "eval_splits": ["validation"]}
    many = scores_csv(tmp_path / "many.csv", [f"class{i % 6}" for i in range(20)])
    few = scores_csv(tmp_path / "few.csv", [f"class{i % 5}" for i in range(20)])
    files = {"train": str(many), "validation": str(many)}
    (warning,) = own_task({**config, "files": files}).warnings
    assert "many.csv: 6 classes in 20 train rows (more than a quarter of them)" in warning
    assert not own_task({**config, "files": {"train": str(few), "validation": str(few)}}).warnings


def _test_task(tmp_path: Path, test_file: Path, **settings) -> TaskSpec:
    train_file, dev_file = small_files(tmp_path, GOOD, GOOD)
    task = files_task(train_file, dev_file, **settings)
    return dataclasses.replace(task, files={"test": str(test_file)}, test_split="test")


def _predictions(task: TaskSpec) -> list[str]:
    """The predictions file's lines as the writer makes them, each example predicted class 0."""
    examples = read_own_split(task, "test")
    rows = [(example["idx"], 0) for example in examples]
    return submission_text(
        SubmissionFile(task.name, task), rows, example_ids(examples)
    ).splitlines()


def test_a_test_files_own_ids_name_its_predictions_as_written_in_file_order(tmp_path):
    """Ids of any kind (strings; integers out of order) name the predictions as the file writes
    them, in its order, under the column's own header; a file without one is named by position."""
    reviews = write_delimited(
        tmp_path / "test.csv",
        ["id", "sentence"],
        [["rev-0042", "fine"], ["b 7", "dull"], ["rev-0001", "fine again"]],
        ",",
    )
    assert _predictions(_test_task(tmp_path, reviews)) == [
        "id\tprediction",
        "rev-0042\tneg",
        "b 7\tneg",
        "rev-0001\tneg",
    ]
    numbered = write_json_lines(
        tmp_path / "test.jsonl", [{"index": n, "sentence": "x"} for n in (9, 3, 5)]
    )
    assert _predictions(_test_task(tmp_path, numbered))[1:] == ["9\tneg", "3\tneg", "5\tneg"]
    by_position = write_lines(tmp_path / "rows.csv", ["sentence", "fine", "dull"])
    assert _predictions(_test_task(tmp_path, by_position)) == [
        "index\tprediction",
        "0\tneg",
        "1\tneg",
    ]


def test_the_id_column_is_task_id_column_else_the_first_of_id_idx_index(tmp_path):
    columns = ["index", "idx", "uid", "id", "sentence"]
    rows = [["i1", "x1", "u1", "d1", "fine"]]
    every = write_delimited(tmp_path / "every.csv", columns, rows, ",")
    assert _predictions(_test_task(tmp_path, every))[:2] == ["id\tprediction", "d1\tneg"]
    no_id = write_delimited(
        tmp_path / "no_id.csv", ["index", "idx", "sentence"], [["i1", "x1", "fine"]], ","
    )
    assert _predictions(_test_task(tmp_path, no_id))[:2] == ["idx\tprediction", "x1\tneg"]
    named = _test_task(tmp_path, every, id_column="uid")
    assert named.keeps_ids and named.id_column == "uid"
    assert _predictions(named)[:2] == ["uid\tprediction", "u1\tneg"]
    with pytest.raises(IsotuneError, match=r"no_id.csv has no column 'uid' \(task.id_column"):
        read_own_split(dataclasses.replace(named, files={"test": str(no_id)}), "test")


@pytest.mark.parametrize("id_", ["a\tb", "a\nb"], ids=["tab", "line break"])
def test_an_id_holding_a_tab_or_a_line_break_is_refused_naming_its_line(tmp_path, id_):
    rows = [["fine-1", "fine"], [id_, "dull"], ["fine-3", "fine"]]
    test_file = write_delimited(tmp_path / "test.csv", ["id", "sentence"], rows, ",")
    with pytest.raises(
        IsotuneError, match=r"test.csv, line 3: the id column 'id' holds a tab or a line break"
    ):
        read_own_split(_test_task(tmp_path, test_file), "test")


def test_a_checkpoint_from_before_ids_were_kept_predicts_by_its_integer_index(tmp_path):
    """A task completed before ``keeps_ids`` (its checkpoint's) reads its test file as it did: an
    index column (5000, 5007, ...) names the predictions in index order; without one, the row's
    position from 0; one that is not distinct integers is refused."""
    indices = [5000 + 7 * i for i in range(4)]
    test_file = write_lines(
        tmp_path / "test.tsv", ["index\tsentence", *(f"{i}\tfine {i}" for i in reversed(indices))]
    )
    train_file, dev_file = small_files(tmp_path, GOOD, GOOD)
    files = {"train": str(train_file), "validation": str(dev_file), "test": str(test_file)}
    config = {"name": "files", "source": "files", "files": files, "eval_splits": ["validation"]}
    completed = own_task({**config, "test_split": "test"}).task
    before = {key: value for key, value in completed.items() if key != "keeps_ids"}
    task = TaskSpec.from_config(before)  # as a checkpoint from before holds it
    assert not task.keeps_ids
    examples = read_own_split(task, "test")
    assert [example["idx"] for example in examples] == list(reversed(indices))
    assert _predictions(task) == ["index\tprediction", *(f"{i}\tneg" for i in indices)]
    ids = write_json_lines(
        tmp_path / "ids.jsonl", [{"idx": 9 - i, "sentence": "x"} for i in (0, 1)]
    )
    by_position = write_lines(tmp_path / "rows.csv", ["sentence", "fine", "dull"])
    for file, expected in ((ids, [9, 8]), (by_position, [0, 1])):
        test = dataclasses.replace(task, files={"test": str(file)})
        assert [example["idx"] for example in read_own_split(test, "test")] == expected
    for rows, problem in ((["5000\ta", "5000\tb"], "by an index"), (["rev-1\ta"], "integer")):
        bad = write_lines(tmp_path / "bad.tsv", ["index\tsentence", *rows])
        with pytest.raises(IsotuneError, match=rf"the index column 'index' .*{problem}.*lines 2"):
            read_own_split(dataclasses.replace(task, files={"test": str(bad)}), "test")


def test_task_files_without_its_files_and_glue_with_files_are_refused(tmp_path):
    with pytest.raises(IsotuneError, match=r"data.train_file, which is not set. Fix: task=files"):
        train(compose_train_config(["task=files"], tmp_path / "run"))
    assert not (tmp_path / "run" / "checkpoints").exists()
    cfg = compose_train_config(["task=rte", "data.train_file=mine.csv"], tmp_path / "glue")
    with pytest.raises(IsotuneError, match=r"but task=rte reads GLUE's rte files. Fix: task=files"):
        train(cfg)


def test_a_study_leaves_a_files_task_to_its_runs_without_glue_or_the_hub(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = compose_train_config(["task=files", "data.train_file=t.csv"], tmp_path)
    check_task_offline("files", dict(cfg.task), None)  # GLUE_DIR unset, the Hub kept away


@pytest.fixture
def sst2_files(tmp_path) -> tuple[Path, Path]:
    folder = tmp_path / "data"
    folder.mkdir()
    return sst2_tsv(folder, "train", 64), sst2_tsv(folder, "dev", 32)


@needs_glue
@pytest.mark.slow
def test_a_tiny_run_on_own_files_records_their_metrics_baseline_isotropy_and_hashes(
    tmp_path, tiny_bert, glue_dir, sst2_files
):
    train_file, dev_file = sst2_files
    run = tmp_path / "run"
    overrides = [
        *tiny_run_overrides(tiny_bert, glue_dir),
        "task=files",
        f"data.train_file={train_file}",
        f"data.validation_file={dev_file}",
        f"data.test_file={dev_file}",
        "write_test_predictions=true",
    ]
    results = train(compose_train_config(overrides, run))
    assert results["status"] == "completed" and results["task"] == "files"
    assert results["primary_metric"] == "accuracy"
    assert set(results["best"]) == {"accuracy", "macro_f1", "combined_score", "loss"}
    assert results["trivial"]["predictor"].startswith("majority class")
    assert results["learned"] in (True, False) and results["isotropy"]
    data = results["provenance"]["data"]
    assert data["train"] == {"file": str(train_file), "sha256": file_sha256(train_file)}
    assert data["validation"]["sha256"] == file_sha256(dev_file)
    # The dev file as the test file: best.ckpt's predictions, scored by scikit-learn, are the
    # run's recorded best-epoch metrics.
    predictions = (run / "predictions" / "files.tsv").read_text().splitlines()
    assert predictions[0] == "index\tprediction" and len(predictions) == 33
    predicted = [int(line.split("\t")[1]) for line in predictions[1:]]
    truth = [ex["label"] for ex in glue_rows("sst2", "validation", 32)]
    assert results["best"]["accuracy"] == pytest.approx(accuracy_score(truth, predicted))
    assert results["best"]["macro_f1"] == pytest.approx(
        f1_score(truth, predicted, average="macro"), abs=1e-6
    )

    # predict.py on best.ckpt predicts the run's own test file as the run did, and with
    # test_file= a file the run never saw; a file without the run's text column stops before
    # anything is written.
    best = run / "checkpoints" / "best.ckpt"
    predicted_again = tmp_path / "predicted"
    predicting = [f"ckpt_path={best}", "paths.glue_dir=null", "accelerator=cpu"]
    summary = predict(compose_config("predict", predicting, predicted_again))
    assert summary["dev"]["largest_difference"] <= 1e-6
    assert (predicted_again / "files.tsv").read_text().splitlines() == predictions
    new_file = sst2_tsv(tmp_path, "new", 48)
    kept, files = check_inputs(str(best), None, None, tmp_path / "out", test_file=str(new_file))
    assert [file.spec.files["test"] for file in files] == [str(new_file.resolve())]
    no_text = write_delimited(tmp_path / "no_text.csv", ["review", "label"], [["fine", 1]], ",")
    with pytest.raises(IsotuneError, match="sentence"):
        check_inputs(str(best), None, None, tmp_path / "out", test_file=str(no_text))
    without_test = dataclasses.replace(kept.task, files={**kept.task.files, "test": None})
    assert files_to_predict(without_test) == []  # predict.py says so and scores the dev set only

    # analyze.py reads the files the checkpoint's task names, without GLUE_DIR.
    analysis = analyze(
        compose_config(
            "analyze",
            [
                f"ckpt_path={run}/checkpoints/best.ckpt",
                "paths.glue_dir=null",
                "data.max_length=128",
                *SMALL,
            ],
            tmp_path / "analysis",
        )
    )
    assert analysis["task"] == "files" and analysis["verdicts"]

    # Started again in its folder (it kept last.ckpt) after the train file changed: refused,
    # naming the file and both hashes, and its folder left byte for byte.
    before = {path: path.read_bytes() for path in run.rglob("*") if path.is_file()}
    old_hash = file_sha256(train_file)
    with train_file.open("a", encoding="utf-8") as file:
        file.write("one more review\t1\n")
    with pytest.raises(IsotuneError) as raised:
        train(compose_train_config(overrides, run))
    message = str(raised.value)
    assert f"{train_file} (the train split) changed since the run of" in message
    assert old_hash in message and file_sha256(train_file) in message
    assert "Fix: restore the file as that run read it" in message
    assert {path: path.read_bytes() for path in run.rglob("*") if path.is_file()} == before


@pytest.mark.slow
def test_a_run_and_predict_py_read_each_own_data_file_once(
    tmp_path, tiny_bert, glue_dir, monkeypatch, caplog
):
    """One read of each file per process, handed on from the task's completion to the data
    module and the test predictions (each read twice or three times before). Its six classes in
    20 train rows are warned of in the log and results.json; its test file's own index column
    names its predictions; its classes are recorded in results.json and logged once."""
    caplog.set_level(logging.INFO, logger="isotune.data.datamodule")
    reads = Counter()
    read_table = own_data.read_table

    def counted(path: Path) -> own_data.Table:
        reads[path.name] += 1
        return read_table(path)

    monkeypatch.setattr(own_data, "read_table", counted)
    classes = [f"class{i % 6}" for i in range(20)]
    train_file = scores_csv(tmp_path / "train.csv", classes)
    dev_file = scores_csv(tmp_path / "dev.csv", classes[:12])
    indices = [5000 + 7 * i for i in range(10)]
    test_file = write_lines(
        tmp_path / "test.csv", ["index,sentence", *(f"{i},text {i}" for i in indices)]
    )
    run = tmp_path / "run"
    overrides = [
        *tiny_run_overrides(tiny_bert, glue_dir),
        "trainer.max_epochs=1",
        "task=files",
        f"data.train_file={train_file}",
        f"data.validation_file={dev_file}",
        f"data.test_file={test_file}",
        "write_test_predictions=true",
    ]
    results = train(compose_train_config(overrides, run))
    assert dict(reads) == {"train.csv": 1, "dev.csv": 1, "test.csv": 1}
    assert results["status"] == "completed"
    (warning,) = results["warnings"]
    assert "train.csv: 6 classes in 20 train rows (more than a quarter of them)" in warning
    assert warning in caplog.text
    # The classes, in class-id order and by label, in results.json and once in the log.
    assert results["data"]["classes"] == [f"class{i}" for i in range(6)]
    assert results["data"]["label_ids"] == {f"class{i}": i for i in range(6)}
    assert caplog.text.count("files: 6 classes (id: label) 0: 'class0', 1: 'class1',") == 1
    lines = (run / "predictions" / "files.tsv").read_text().splitlines()
    assert [int(line.split("\t")[0]) for line in lines[1:]] == indices

    reads.clear()  # predict.py: its check reads the test file, handed on to be predicted
    predicting = [
        f"ckpt_path={run}/checkpoints/best.ckpt",
        "paths.glue_dir=null",
        "accelerator=cpu",
    ]
    predict(compose_config("predict", predicting, tmp_path / "predicted"))
    assert dict(reads) == {"dev.csv": 1, "test.csv": 1}
    assert (tmp_path / "predicted" / "files.tsv").read_text().splitlines() == lines


@needs_glue
@pytest.mark.slow
def test_a_tiny_regression_run_on_own_files_scores_pearson_and_spearman(
    tmp_path, tiny_bert, glue_dir
):
    def scores(split: str, n: int) -> list[list]:
        return [
            [ex["sentence1"], ex["sentence2"], f"{ex['label']:.3f}"]
            for ex in glue_rows("stsb", split, n)
        ]

    header = ["sentence1", "sentence2", "label"]
    train_file = write_delimited(tmp_path / "train.csv", header, scores("train", 64), ",")
    dev_file = write_delimited(tmp_path / "dev.csv", header, scores("validation", 32), ",")
    overrides = [
        *tiny_run_overrides(tiny_bert, glue_dir),
        "task=files",
        "task.name=my_sts",
        f"data.train_file={train_file}",
        f"data.validation_file={dev_file}",
        f"data.test_file={dev_file}",
        "write_test_predictions=true",
    ]
    results = train(compose_train_config(overrides, tmp_path / "run"))
    assert results["status"] == "completed" and results["task"] == "my_sts"
    assert results["primary_metric"] == "pearson"
    assert set(results["best"]) == {"pearson", "spearmanr", "combined_score", "loss"}
    assert results["trivial"]["predictor"].startswith("mean")
    lines = (tmp_path / "run" / "predictions" / "my_sts.tsv").read_text().splitlines()[1:]
    assert len(lines) == 32 and all(-1 <= results["best"][m] <= 1 for m in ("pearson", "spearmanr"))
    assert all(float(line.split("\t")[1]) >= 0 for line in lines)  # a score, not a class


def test_a_hub_data_set_by_name_reads_its_columns_and_labels(monkeypatch):
    datasets = pytest.importorskip("datasets")
    boolq = {  # SuperGLUE BoolQ's columns, as load_dataset gives them
        split: datasets.Dataset.from_list(
            [
                {"question": f"q {i}", "passage": f"p {i}", "idx": i, "label": i % 2}
                for i in range(n)
            ]
        )
        for split, n in (("train", 6), ("validation", 4))
    }
    asked = []

    def load_dataset(path: str, name: str | None, split: str):
        asked.append((path, name, split))
        return boolq[split]

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    cfg = compose_train_config(
        [
            "task=files",
            "data.dataset_name=aps/super_glue",
            "data.dataset_config_name=boolq",
            "task.text_fields=[question,passage]",
        ]
    )
    task = TaskSpec.from_config(own_task(dict(OmegaConf.to_container(cfg.task, resolve=True))).task)
    assert (task.labels, task.metrics) == (("0", "1"), ("accuracy", "macro_f1"))
    examples = read_own_split(task, "validation")
    assert [(ex["question"], ex["label"]) for ex in examples] == [
        (f"q {i}", i % 2) for i in range(4)
    ]
    assert ("aps/super_glue", "boolq", "train") in asked


def test_a_data_set_folder_is_read_by_datasets_load_dataset_itself(tmp_path, monkeypatch):
    """The real ``datasets.load_dataset`` on a folder of JSON Lines splits (what it takes in
    place of a Hub name): the same call, offline, its cache in the test's folder."""
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    folder = tmp_path / "boolq"
    folder.mkdir()
    for split, n in (("train", 6), ("validation", 4)):
        rows = [{"question": f"q {i}", "passage": f"p {i}", "label": i % 2} for i in range(n)]
        write_json_lines(folder / f"{split}.jsonl", rows)
    cfg = compose_train_config(
        ["task=files", f"data.dataset_name={folder}", "task.text_fields=[question,passage]"]
    )
    task = TaskSpec.from_config(own_task(dict(OmegaConf.to_container(cfg.task, resolve=True))).task)
    assert (task.labels, task.metrics) == (("0", "1"), ("accuracy", "macro_f1"))
    examples = read_own_split(task, "validation")
    assert [(ex["passage"], ex["label"]) for ex in examples] == [
        (f"p {i}", i % 2) for i in range(4)
    ]
    assert (tmp_path / "cache" / "boolq").is_dir()  # nothing written to the user's cache


def test_a_hub_data_set_offline_and_not_cached_is_refused_naming_the_fix(tmp_path):
    overrides = ["task=files", "data.dataset_name=aps/super_glue", "data.dataset_config_name=boolq"]
    with pytest.raises(IsotuneError) as raised:
        train(compose_train_config(overrides, tmp_path))
    assert str(raised.value).startswith(
        "Could not load aps/super_glue/boolq (train) from the Hugging Face Hub: HF_HUB_OFFLINE=1 "
        "keeps the Hub away and it is not cached. Fix: unset HF_HUB_OFFLINE and run once with "
        "network access to cache it, or save its splits as CSV or JSON Lines files"
    )
    assert not (tmp_path / "checkpoints").exists()
