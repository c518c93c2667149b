"""Own data (task=files) that trained silently wrong before, each now refused naming the file, the
line and the fix: labels spelled two ways, a column or JSON key named twice, a label of another
JSON type; JSON Lines texts holding line separators read whole; and the classes a run trained on
recorded where a reader looks for them."""

from __future__ import annotations

import json
import logging

import pytest

from isotune.data.datamodule import GLUEDataModule
from isotune.data.own_data import read_own_split
from isotune.errors import IsotuneError
from isotune.model.encoders import load_tokenizer
from isotune.record.same_run import config_differences
from tests.helpers.config_checks import problems
from tests.helpers.own_files import files_task, write_delimited, write_json_lines, write_lines

SPELLED_TWICE = [
    ["a fine film", "pos"],
    ["a dull film", "neg"],
    ["fine", "Pos"],
    ["great", "pos "],
    ["good", "pos"],
    ["bad", "neg"],
]


def test_labels_that_differ_only_in_case_or_whitespace_are_refused_unless_declared(tmp_path):
    """pos, Pos and 'pos ' trained as three classes, with no warning."""
    train_file = write_delimited(tmp_path / "train.csv", ["sentence", "label"], SPELLED_TWICE, ",")
    with pytest.raises(IsotuneError) as raised:
        files_task(train_file, train_file)
    message = str(raised.value)
    assert message.startswith(
        f"{train_file}: labels 'pos' (first on line 2) and 'Pos' (first on line 4) and 'pos ' "
        "(first on line 5) differ only in case or surrounding whitespace"
    )
    assert "Fix: write each class one way" in message
    assert message.endswith("task.distinct_label_spellings=true.")
    declared = files_task(train_file, train_file, distinct_label_spellings=True)
    assert declared.labels == ("Pos", "neg", "pos", "pos ")
    # A switch, checked before a run; and a check only, so a run continues whatever its value.
    (line,) = problems("task=files", "task.distinct_label_spellings=yes")
    assert line.strip().startswith("task.distinct_label_spellings='yes': must be true or false")
    settings = {"task": {"name": "files", "labels": ["neg", "pos"]}}
    switched = {"task": {**settings["task"], "distinct_label_spellings": True}}
    assert config_differences(settings, switched) == config_differences(settings, settings)


@pytest.mark.parametrize(
    ("suffix", "header", "name"),
    [(".csv", ["review", "sentiment", "review"], "review"), (".tsv", ["x", "y", "y"], "y")],
)
def test_a_header_naming_a_column_twice_is_refused(tmp_path, suffix, header, name):
    """The last column of the name won, silently: a row's text or label was whichever came last."""
    rows = [["a fine film", "pos", "a dull film"], ["dull", "neg", "fine"]]
    path = write_delimited(
        tmp_path / f"train{suffix}", header, rows, "\t" if suffix == ".tsv" else ","
    )
    with pytest.raises(IsotuneError) as raised:
        files_task(path, path, text_fields=[header[0]], label_column=header[1])
    assert str(raised.value).startswith(f"{path}: the header names the column {name!r} 2 times")
    assert "Fix: give each column its own name in the header row" in str(raised.value)


def test_a_json_object_naming_a_key_twice_is_refused_naming_file_line_and_key(tmp_path):
    """json.loads keeps the last value of a repeated key, silently."""
    path = write_lines(
        tmp_path / "train.jsonl",
        [
            '{"sentence": "a fine film", "label": "pos"}',
            '{"sentence": "a dull film", "label": "neg"}',
            '{"sentence": "fine", "label": "pos", "label": "neg"}',
        ],
    )
    with pytest.raises(IsotuneError) as raised:
        files_task(path, path)
    assert str(raised.value).startswith(
        f"{path}, line 3: the key 'label' appears 2 times in one object"
    )
    assert "Fix: give each key once" in str(raised.value)


def test_a_label_of_another_json_type_than_the_rest_is_refused_naming_its_line(tmp_path):
    """A label 1 among "pos" and "neg" trained as a third class, '1'."""
    rows = [{"sentence": f"text {i}", "sentiment": ["pos", "neg"][i % 2]} for i in range(5)]
    rows.insert(3, {"sentence": "text", "sentiment": 1})
    path = write_json_lines(tmp_path / "train.jsonl", rows)
    with pytest.raises(IsotuneError) as raised:
        files_task(path, path, label_column="sentiment")
    message = str(raised.value)
    assert message.startswith(
        f"{path}, line 4: the label 1 is a JSON number, but 5 of the 6 labels in the column "
        "'sentiment' are strings, such as \"pos\""
    )
    assert "Fix: write every label as a string" in message
    # A dev file's labels are checked as the train file's are.
    train = write_json_lines(tmp_path / "ok.jsonl", [r for r in rows if r["sentiment"] != 1])
    with pytest.raises(IsotuneError, match=r"line 4: the label 1 is a JSON number"):
        files_task(train, path, label_column="sentiment")
    # Scores may mix integers and decimals: both are JSON numbers.
    scores = write_json_lines(
        tmp_path / "scores.jsonl", [{"text": "a", "label": 3}, {"text": "b", "label": 2.5}]
    )
    assert files_task(scores, scores).is_regression


def test_json_lines_texts_holding_unicode_line_separators_read_whole(tmp_path):
    """U+2028, U+2029 and U+0085 are characters a JSON string may hold as they are;
    str.splitlines cut the line there, and the file was refused as not JSON. CRLF lines read
    as before."""
    texts = ["one\u2028line", "another\u2029one", "a next\u0085line", "plain"]
    rows = [{"sentence": text, "label": ["pos", "neg"][i % 2]} for i, text in enumerate(texts)]
    lines = [json.dumps(row, ensure_ascii=False) for row in rows]
    path = tmp_path / "train.jsonl"
    path.write_bytes("".join(f"{line}\r\n" for line in lines).encode())
    task = files_task(path, path)
    assert [example["sentence"] for example in read_own_split(task, "train")] == texts
    broken = tmp_path / "broken.jsonl"
    broken.write_bytes("".join(f"{line}\r\n" for line in [*lines, "{not json"]).encode())
    with pytest.raises(IsotuneError, match=r"broken\.jsonl, line 5: not JSON"):
        files_task(broken, path)


def test_the_classes_are_in_the_data_record_and_logged_once(tmp_path, tiny_bert, caplog):
    """results.json's data (and the log) name a classification's classes by id; a regression
    has none. The record is not among the settings a resume compares (recorded_settings)."""
    rows = [["a fine film", "pos"], ["a dull film", "neg"], ["fine", "pos"], ["dull", "neg"]]
    path = write_delimited(tmp_path / "train.csv", ["sentence", "label"], rows, ",")
    tokenizer = load_tokenizer(str(tiny_bert))
    datamodule = GLUEDataModule(files_task(path, path), tokenizer)
    with caplog.at_level(logging.INFO):
        record = datamodule.data_record()
    assert record["classes"] == ["neg", "pos"]
    assert record["label_ids"] == {"neg": 0, "pos": 1}
    assert caplog.text.count("files: 2 classes (id: label) 0: 'neg', 1: 'pos'") == 1
    scores = write_delimited(
        tmp_path / "scores.csv", ["sentence", "label"], [["a", "0.5"], ["b", "1.5"]], ","
    )
    regression = GLUEDataModule(files_task(scores, scores), tokenizer).data_record()
    assert "classes" not in regression and "label_ids" not in regression
