"""A researcher's own data: classification or regression examples in CSV, TSV or JSON Lines files
named by path (``task=files data.train_file=... data.validation_file=... data.test_file=...``, the
names of Hugging Face's ``run_glue.py``), with no task config of their own to write.

The files decide the task, as ``run_glue.py`` decides it: the text columns (``sentence1`` and
``sentence2``, else ``sentence``, else ``text``, unless ``task.text_fields`` names them), the
labels (the train file's, sorted; a label column of decimal numbers is a regression), and from
those the metrics. :func:`own_task` completes the task config from the files once, before a run
builds anything, so the run's saved config and every checkpoint name the labels and metrics it
used; each bad file is refused there, with its fix, before training starts.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from isotune.data.hub import load_hub_split
from isotune.data.tasks import TaskSpec
from isotune.errors import IsotuneError

DELIMITERS = {".csv": ",", ".tsv": "\t"}
JSON_LINES = (".jsonl", ".json")  # run_glue.py's --train_file takes .json files of JSON Lines
# The text columns looked for when task.text_fields is null, in this order (run_glue.py's own
# files use sentence1 and sentence2; its sentiment data sets sentence or text).
DEFAULT_TEXT_FIELDS = (("sentence1", "sentence2"), ("sentence",), ("text",))
SPLIT_KEYS = {split: f"data.{split}_file" for split in ("train", "validation", "test")}
CLASSIFICATION_METRICS = ("accuracy", "macro_f1")
REGRESSION_METRICS = ("pearson", "spearmanr")
SHOWN_ROWS = 10  # rows named in a message; the count says how many more


@dataclass(frozen=True)
class Table:
    """The rows of one data file: each ``(line, {column: value})``, ``line`` counted from 1 as an
    editor shows it (a CSV row spanning lines: the line it starts on)."""

    path: Path | str  # a file, or a Hub data set's split (its rows' lines: row numbers from 1)
    columns: tuple[str, ...]
    rows: list[tuple[int, dict[str, Any]]]


def read_table(path: Path) -> Table:
    """The rows of a CSV or TSV file with a header row, or of a JSON Lines file (one object a
    line), chosen by its suffix; refused when it is missing, of another kind, or has no rows."""
    if not path.is_file():
        what = "is a folder" if path.is_dir() else "does not exist"
        raise IsotuneError(f"{path} {what}. Fix: name an existing data file (CSV, TSV or JSONL).")
    suffix = path.suffix.lower()
    if suffix in DELIMITERS:
        table = _read_delimited(path, DELIMITERS[suffix])
    elif suffix in JSON_LINES:
        table = _read_json_lines(path)
    else:
        raise IsotuneError(
            f"{path}: a {suffix or 'suffix-less'} file, but data files are read by their "
            f"suffix: {', '.join([*DELIMITERS, *JSON_LINES])}. Fix: rename it with the suffix "
            "of its format."
        )
    if not table.rows:
        raise IsotuneError(
            f"{path} has no examples (it is empty, or holds only a header row). Fix: name the "
            "file that holds the data; a CSV or TSV file has a header row, then one example a row."
        )
    return table


def _read_delimited(path: Path, delimiter: str) -> Table:
    try:
        with path.open(encoding="utf-8-sig", newline="") as file:
            # A TSV has no quoting (GLUE's files and the IANA format: bare quote characters are
            # text); a CSV quotes a field holding a comma, a quote or a line break.
            quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
            reader = csv.reader(file, delimiter=delimiter, quoting=quoting)
            header = tuple(next(reader, ()))
            rows = []
            start = reader.line_num + 1
            for values in reader:
                if values:
                    rows.append((start, dict(zip(header, values, strict=False))))
                start = reader.line_num + 1
    except UnicodeDecodeError as error:
        raise IsotuneError(
            f"{path}: byte {error.object[error.start : error.end]!r} is not UTF-8 text (saved in "
            "another encoding, such as Latin-1 or Windows-1252). Fix: re-save the file as UTF-8."
        ) from None
    except csv.Error as error:
        raise IsotuneError(
            f"{path}, line {reader.line_num}: {error}. Fix: quote fields holding the delimiter, "
            "a quote character or a line break with double quotes, as spreadsheet programs and "
            "pandas' to_csv do."
        ) from None
    return Table(path, header, rows)


def _read_json_lines(path: Path) -> Table:
    rows, columns = [], {}
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except UnicodeDecodeError as error:
        raise IsotuneError(
            f"{path}: byte {error.object[error.start : error.end]!r} is not UTF-8 text. Fix: "
            "re-save the file as UTF-8."
        ) from None
    for line, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as error:
            raise IsotuneError(
                f"{path}, line {line}: not JSON ({error.msg}). Fix: one JSON object a line "
                '(JSON Lines), e.g. {"sentence": "a fine film", "label": "positive"}.'
            ) from None
        if not isinstance(row, dict):
            raise IsotuneError(
                f"{path}, line {line}: a JSON {type(row).__name__}, not an object. Fix: one JSON "
                'object a line (JSON Lines), e.g. {"sentence": "a fine film", "label": 1}.'
            )
        columns.update(dict.fromkeys(row))
        rows.append((line, row))
    return Table(path, tuple(columns), rows)


def hub_table(dataset: str, config: str | None, split: str) -> Table:
    """A split of a Hugging Face data set as a table (``data.dataset_name``), its rows numbered
    from 1 as lines."""
    rows = load_hub_split(
        dataset,
        config,
        split,
        fix="save its splits as CSV or JSON Lines files (datasets' to_csv, to_json) and name "
        "them: data.train_file=... data.validation_file=...",
    )
    name = f"{dataset}{f'/{config}' if config else ''} ({split})"
    return Table(name, tuple(rows.column_names), [(i, dict(row)) for i, row in enumerate(rows, 1)])


def _split_table(settings: Mapping[str, Any] | TaskSpec, split: str) -> Table:
    """A split's table: its file, or the Hub data set's split (``dataset``)."""
    get = settings.get if isinstance(settings, Mapping) else lambda key: getattr(settings, key)
    if get("dataset"):
        return hub_table(str(get("dataset")), get("dataset_config") or None, split)
    return read_table(Path(get("files")[split]))


def own_task(config: Mapping[str, Any], test: bool = False) -> dict[str, Any]:
    """The ``task=files`` config ``config`` completed from its files: absolute paths, the text
    columns, the labels (or regression), the metrics; every file checked as it will be read
    (``test``: the run predicts the test split, so its file is needed too)."""
    files = dict(config.get("files") or {})
    for split in ("train", "validation", "test") if test else ("train", "validation"):
        if not files.get(split) and not config.get("dataset"):
            raise IsotuneError(
                f"task=files reads its {split} split from {SPLIT_KEYS[split]}, which is not set"
                + (" (write_test_predictions=true predicts it)" if split == "test" else "")
                + ". Fix: task=files data.train_file=<train.csv> data.validation_file=<dev.csv> "
                "(CSV, TSV or JSONL; data.test_file optional)."
            )
    paths = {split: Path(str(path)).expanduser().resolve() for split, path in files.items() if path}
    if config.get("dataset"):  # the Hub data set's splits, not files
        paths = dict.fromkeys(("train", "validation", "test") if test else ("train", "validation"))
    train = _split_table({**config, "files": paths}, "train")
    text_fields = tuple(config.get("text_fields") or _default_text_fields(train))
    label_column = str(config.get("label_column") or "label")
    labels = config.get("labels")
    regression = config.get("regression")
    train_labels = [value for _, value in _column_values(train, label_column, "label")]
    if regression is None:
        regression = labels is None and _decimal_numbers(train_labels)
    if not regression:
        labels = [str(label) for label in labels] if labels else _sorted_labels(train_labels)
    completed = {
        **config,
        "source": "files",
        "files": {split: path and str(path) for split, path in paths.items()},
        "text_fields": list(text_fields),
        "label_column": label_column,
        "regression": bool(regression),
        "labels": None if regression else labels,
        "num_labels": 1 if regression else len(labels),
        "metrics": list(config.get("metrics") or _metrics(regression)),
        "eval_splits": ["validation"],
        "test_split": "test",
    }
    completed["primary_metric"] = config.get("primary_metric") or completed["metrics"][0]
    task = TaskSpec.from_config(completed)
    for split in paths:  # every file read as the run will read it: its errors now
        read_own_split(task, split, train if split == "train" else None)
    return completed


def _default_text_fields(train: Table) -> tuple[str, ...]:
    for fields in DEFAULT_TEXT_FIELDS:
        if all(name in train.columns for name in fields):
            return fields
    raise IsotuneError(
        f"{train.path} has none of the text columns task=files looks for (sentence1 and "
        f"sentence2, sentence, text); its columns are {list(train.columns)}. Fix: name them, e.g. "
        f"task.text_fields=[{train.columns[0]}] (one text) or "
        f"task.text_fields=[{','.join(train.columns[:2])}] (a pair)."
    )


def _column_values(
    table: Table, column: str, role: str, fix: str | None = None
) -> Iterator[tuple[int, Any]]:
    """``(line, value)`` of ``column`` in every row; refused when the file has no such column
    (``fix``: the caller's fix for that, None: training's, which names the column in the task's
    config), or when rows lack a value (counted, and the first rows named)."""
    if column not in table.columns:
        key = "task.label_column" if role == "label" else "task.text_fields"
        fix = fix or f"{key}=<one of them>, or rename the column in the file"
        raise IsotuneError(
            f"{table.path} has no column {column!r} (the {role} column task=files reads); its "
            f"columns are {list(table.columns)}. Fix: {fix}."
        )
    missing = [line for line, row in table.rows if _blank(row.get(column))]
    if missing:
        shown = ", ".join(map(str, missing[:SHOWN_ROWS]))
        more = f" and {len(missing) - SHOWN_ROWS} more" if len(missing) > SHOWN_ROWS else ""
        raise IsotuneError(
            f"{table.path}: the {role} column {column!r} is empty in {len(missing)} of "
            f"{len(table.rows)} rows (lines {shown}{more}). Fix: fill in or remove those rows."
        )
    return ((line, row[column]) for line, row in table.rows)


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def label_text(value: Any) -> str:
    """A label as the labels list names it: a JSON ``true`` as ``true``, a number as written."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _decimal_numbers(values: Sequence[Any]) -> bool:
    """Whether a label column holds scores: every value a number, some written with a decimal
    point or exponent (``3.8``, ``5.000``; JSON floats): integers alone name classes."""
    decimal = False
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            return False
        try:
            float(value)
        except ValueError:
            return False
        decimal = decimal or isinstance(value, float) or not _integer_literal(str(value))
    return decimal


def _integer_literal(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def _sorted_labels(values: Sequence[Any]) -> list[str]:
    """The distinct labels in class-id order: numerically when all are integers, else A-Z."""
    labels = sorted({label_text(value) for value in values})
    if all(_integer_literal(label) for label in labels):
        labels.sort(key=int)
    return labels


def _metrics(regression: bool) -> tuple[str, ...]:
    return REGRESSION_METRICS if regression else CLASSIFICATION_METRICS


def read_own_split(
    task: TaskSpec, split: str, table: Table | None = None, text_fix: str | None = None
) -> list[dict[str, Any]]:
    """One split of a ``task=files`` task (a :class:`~isotune.data.tasks.TaskSpec`) as
    ``{text fields..., "label", "idx"}`` examples; a test file's labels are not read (-1).
    ``text_fix``: the fix for a file without a text column where the caller's differs from
    training's ``task.text_fields=`` (predict.py's text columns are its checkpoint's)."""
    table = table or _split_table(task, split)
    texts = {
        name: [value for _, value in _column_values(table, name, "text", text_fix)]
        for name in task.text_fields
    }
    examples = [
        {**{name: str(values[i]) for name, values in texts.items()}, "idx": i}
        for i in range(len(table.rows))
    ]
    if split == task.test_split:
        return [{**example, "label": -1} for example in examples]
    values = list(_column_values(table, task.label_column, "label"))
    if not task.is_regression:
        unknown = Counter(label_text(v) for _, v in values if label_text(v) not in task.labels)
        if unknown:
            lines = [line for line, v in values if label_text(v) in unknown][:SHOWN_ROWS]
            raise IsotuneError(
                f"{table.path}: labels {sorted(unknown)} ({sum(unknown.values())} rows, lines "
                f"{', '.join(map(str, lines))}{'...' if sum(unknown.values()) > SHOWN_ROWS else ''}"
                f") are not among the train file's labels {list(task.labels)}: a model trained "
                "on that file never predicts them. Fix: correct those rows, add examples of them "
                "to the train file, or name every label with task.labels=[...]."
            )
    for example, (line, value) in zip(examples, values, strict=True):
        where = f"{table.path}, line {line}"
        if task.is_regression:
            example["label"] = task.check_label(_score(value, where, task), where)
        else:
            example["label"] = task.labels.index(label_text(value))
    return examples


def _score(value: Any, where: str, task: TaskSpec) -> float:
    try:
        score = float(value)
    except (TypeError, ValueError):
        raise IsotuneError(
            f"{where}: label {value!r} is not a number, but the train file's label column "
            f"{task.label_column!r} holds scores (a regression). Fix: correct the row, or "
            "task.regression=false to read the labels as classes."
        ) from None
    return score  # a nan or inf is refused by TaskSpec.check_label, naming the row
