"""A researcher's own data (``task=files``): CSV, TSV or JSON Lines files whose columns and
labels decide the task as Hugging Face's ``run_glue.py`` decides it
(docs/data.md#what-the-files-decide). :func:`own_task` completes the task config once, before a run
builds anything, so the saved config and every checkpoint name the labels and metrics used, and
each bad file is refused, with its fix, before training starts
(docs/data.md#one-spelling-one-name-one-type).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from isotune.data.example_ids import checked_ids, test_id_column
from isotune.data.tables import SHOWN_ROWS, Table, hub_table, named_lines, read_table
from isotune.data.tasks import TaskSpec, task_kind
from isotune.errors import IsotuneError

# The text columns looked for when task.text_fields is null, in this order (run_glue.py's own
# files use sentence1 and sentence2; its sentiment data sets sentence or text).
DEFAULT_TEXT_FIELDS = (("sentence1", "sentence2"), ("sentence",), ("text",))
SPLIT_KEYS = {split: f"data.{split}_file" for split in ("train", "validation", "test")}
CLASSIFICATION_METRICS = ("accuracy", "macro_f1")
REGRESSION_METRICS = ("pearson", "spearmanr")
# A test file's own index column, which its predictions keep: GLUE's test files call it index,
# its Hugging Face data set (and so run_glue.py's examples) idx.
INDEX_COLUMNS = ("index", "idx")


def _split_table(settings: Mapping[str, Any] | TaskSpec, split: str) -> Table:
    """A split's table: its file, or the Hub data set's split (``dataset``)."""
    get = settings.get if isinstance(settings, Mapping) else lambda key: getattr(settings, key)
    if get("dataset"):
        return hub_table(str(get("dataset")), get("dataset_config") or None, split)
    return read_table(Path(get("files")[split]))


@dataclass(frozen=True)
class OwnData:
    """A ``task=files`` task completed from its files, with each split's examples (handed on, so
    that a process reads each file once) and what the run warns of."""

    task: dict[str, Any]  # the completed task config
    examples: dict[str, list[dict[str, Any]]]  # {split: examples}, as read_own_split makes them
    warnings: list[str]


def own_task(config: Mapping[str, Any], test: bool = False) -> OwnData:
    """The ``task=files`` config ``config`` completed from its files: absolute paths, the text
    columns, the labels (or regression), the metrics; every file read and checked once, as the
    run reads it (``test``: the run predicts the test split, so its file is needed too)."""
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
    train_labels = _label_values(train, label_column)
    if regression is None:
        regression = labels is None and _scores(train, label_column, train_labels)
    if not regression:
        if not config.get("distinct_label_spellings"):
            _one_spelling_each(train, train_labels)
        values = [value for _, value in train_labels]
        labels = [str(label) for label in labels] if labels else _sorted_labels(values)
    completed = {
        **config,
        "source": "files",
        "files": {split: path and str(path) for split, path in paths.items()},
        "text_fields": list(text_fields),
        "label_column": label_column,
        "regression": bool(regression),
        "labels": None if regression else labels,
        "num_labels": 1 if regression else len(labels),
        "metrics": list(
            config.get("metrics") or (REGRESSION_METRICS if regression else CLASSIFICATION_METRICS)
        ),
        "eval_splits": ["validation"],
        "test_split": "test",
        "keeps_ids": True,  # its predictions name examples by the test file's own ids
    }
    completed["primary_metric"] = config.get("primary_metric") or completed["metrics"][0]
    task = TaskSpec.from_config(completed)
    examples = {  # every file read as the run will read it: its errors now
        split: read_own_split(task, split, train if split == "train" else None) for split in paths
    }
    warnings = [] if regression else _many_classes(train, len(labels), label_column)
    return OwnData(completed, examples, warnings)


def _many_classes(train: Table, classes: int, label_column: str) -> list[str]:
    """The warning for more classes than a quarter of the train rows: a column of scores or IDs
    read as classes trains too, each value a class the model sees a few times at most."""
    if classes * 4 <= len(train.rows):
        return []
    return [
        f"{train.path}: {classes} classes in {len(train.rows)} train rows (more than a quarter "
        f"of them), so most classes have few examples to learn from. If the label column "
        f"{label_column!r} holds scores, task.regression=true; if it is not the labels, "
        "task.label_column=<the labels' column>; if the classes are right, more examples."
    ]


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
    (``fix``: the caller's fix, None: training's) or rows lack a value."""
    if column not in table.columns:
        key = "task.label_column" if role == "label" else "task.text_fields"
        fix = fix or f"{key}=<one of them>, or rename the column in the file"
        raise IsotuneError(
            f"{table.path} has no column {column!r} (the {role} column task=files reads); its "
            f"columns are {list(table.columns)}. Fix: {fix}."
        )
    missing = [line for line, row in table.rows if _blank(row.get(column))]
    if missing:
        raise IsotuneError(
            f"{table.path}: the {role} column {column!r} is empty in {len(missing)} of "
            f"{len(table.rows)} rows (lines {named_lines(missing)}). Fix: fill in or remove "
            "those rows."
        )
    return ((line, row[column]) for line, row in table.rows)


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _label_values(table: Table, column: str) -> list[tuple[int, Any]]:
    """``(line, label)`` of every row, refused when the labels are not all of one JSON type: a
    label ``1`` among ``"pos"`` and ``"neg"`` would train as a class ``"1"`` of its own. Integers
    and decimals are both numbers (a regression's scores mix them)."""
    values = list(_column_values(table, column, "label"))
    types = Counter(_json_type(value) for _, value in values)
    if len(types) == 1:
        return values
    usual = types.most_common(1)[0][0]
    odd = [(line, value) for line, value in values if _json_type(value) != usual]
    line, value = odd[0]
    example = next(value for _, value in values if _json_type(value) == usual)
    raise IsotuneError(
        f"{table.path}, line {line}: the label {_json(value)} is a JSON {_json_type(value)}, "
        f"but {types[usual]} of the {len(values)} labels in the column {column!r} are "
        f"{usual}s, such as {_json(example)} ({len(odd)} of another type: lines "
        f"{named_lines([line for line, _ in odd])}), and a label of another type is read as a "
        "label of its own (the number 1 as the class '1'). Fix: write every label as a "
        f"{usual}, as the other rows do."
    )


def _json(value: Any) -> str:
    """A label as its JSON Lines file writes it."""
    return json.dumps(value, ensure_ascii=False, default=str)


def _json_type(value: Any) -> str:
    """A value's type as JSON names it (``bool`` before ``int``: Python's booleans are ints)."""
    kinds = ((bool, "boolean"), (int | float, "number"), (str, "string"), (list, "array"))
    return next((name for kind, name in kinds if isinstance(value, kind)), "object")


def _one_spelling_each(table: Table, values: Sequence[tuple[int, Any]]) -> None:
    """Refuse train labels that differ only in case or surrounding whitespace (``pos``, ``Pos``):
    read as written, each is a class of its own, one class's examples split between them."""
    first_line: dict[str, int] = {}
    for line, value in values:
        first_line.setdefault(label_text(value), line)
    spellings: dict[str, list[str]] = {}
    for label in first_line:
        spellings.setdefault(label.strip().casefold(), []).append(label)
    clashes = [labels for labels in spellings.values() if len(labels) > 1]
    if not clashes:
        return
    named = "; ".join(
        " and ".join(f"{label!r} (first on line {first_line[label]})" for label in labels)
        for labels in clashes[:SHOWN_ROWS]
    )
    raise IsotuneError(
        f"{table.path}: labels {named}{'; ...' if len(clashes) > SHOWN_ROWS else ''} differ "
        "only in case or surrounding whitespace, so each spelling would train as a class of its "
        "own. Fix: write each class one way, the same spelling in every row of every file; if "
        "they are distinct classes, say so: task.distinct_label_spellings=true."
    )


def label_text(value: Any) -> str:
    """A label as the labels list names it: a JSON ``true`` as ``true``, a number as written."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _scores(table: Table, column: str, values: Sequence[tuple[int, Any]]) -> bool:
    """Whether a label column holds scores: every value a number, some written with a decimal
    point or exponent (``5.000``); integers alone name classes. Mostly such scores but for some
    words is refused: read as classes, each distinct score would be a class of its own."""
    numbers = [value for _, value in values if _number(value)]
    decimals = [v for v in numbers if isinstance(v, float) or not _integer_literal(str(v))]
    if not decimals:
        return False
    if len(numbers) == len(values):
        return True
    if 2 * len(numbers) <= len(values):  # mostly words: classes, some written as decimals
        return False
    words = [(line, value) for line, value in values if not _number(value)]
    shown = list(dict.fromkeys(label_text(value) for _, value in words))
    raise IsotuneError(
        f"{table.path}: the label column {column!r} holds scores ({len(numbers)} of "
        f"{len(values)} values are numbers, such as {decimals[0]!r}), but "
        f"{len(words)} {'is' if len(words) == 1 else 'are'} not a number: "
        f"{', '.join(map(repr, shown[:SHOWN_ROWS]))}{', ...' if len(shown) > SHOWN_ROWS else ''} "
        f"(lines {named_lines([line for line, _ in words])}). Read as classes, each distinct "
        "score would be a class of its own. Fix: correct those rows (a score each, or remove "
        "them), or task.regression=false to read the labels as classes."
    )


def _number(value: Any) -> bool:
    """Whether a label is a number: a JSON number, or a text ``float`` reads (not a boolean)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return False
    try:
        float(value)
    except ValueError:
        return False
    return True


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


def read_own_split(
    task: TaskSpec, split: str, table: Table | None = None, text_fix: str | None = None
) -> list[dict[str, Any]]:
    """One split of a ``task=files`` task as ``{text fields..., "label", "idx"}`` examples, ``idx``
    the row's position from 0; a test file's labels are -1, and its examples carry their ids
    (:mod:`.example_ids`). ``text_fix``: predict.py's fix for a file lacking a text column."""
    table = table or _split_table(task, split)
    texts = {
        name: [value for _, value in _column_values(table, name, "text", text_fix)]
        for name in task.text_fields
    }
    indices, ids = range(len(table.rows)), None
    if split == task.test_split and not task.keeps_ids:
        indices = _test_indices(table) or indices
    elif split == task.test_split and (column := test_id_column(task, table.columns, table.path)):
        ids = checked_ids(table.path, column, list(_column_values(table, column, "id")))
    examples = [
        {**{name: str(values[i]) for name, values in texts.items()}, "idx": index}
        | (ids[i] if ids else {})
        for i, index in enumerate(indices)
    ]
    if split == task.test_split:
        return [{**example, "label": -1} for example in examples]
    values = _label_values(table, task.label_column)
    if not task.is_regression:
        unknown = Counter(label_text(v) for _, v in values if label_text(v) not in task.labels)
        if unknown:
            lines = [line for line, v in values if label_text(v) in unknown]
            raise IsotuneError(
                f"{table.path}: labels {sorted(unknown)} ({len(lines)} rows, lines "
                f"{named_lines(lines)}) are not among the train file's labels "
                f"{list(task.labels)}: a model trained on that file never predicts them. Fix: "
                "correct those rows, add examples of them to the train file, or name every label "
                "with task.labels=[...]."
            )
    for example, (line, value) in zip(examples, values, strict=True):
        where = f"{table.path}, line {line}"
        if task.is_regression:
            example["label"] = task.check_label(_score(value, where, task), where)
        else:
            example["label"] = task.labels.index(label_text(value))
    return examples


def _test_indices(table: Table) -> list[int] | None:
    """A checkpoint's from before ids were kept: the integer ``index`` (or ``idx``) column."""
    column = next((name for name in INDEX_COLUMNS if name in table.columns), None)
    if column is None:
        return None
    values = list(_column_values(table, column, "index"))
    bad = [line for line, value in values if isinstance(value, bool) or not _integer(value)]
    if bad:
        problem = f"is not an integer in {len(bad)} of {len(values)} rows"
    else:
        counts = Counter(int(value) for _, value in values)
        bad = [line for line, value in values if counts[int(value)] > 1]
        problem = f"names {len(bad)} of {len(values)} rows by an index another row has too"
    if bad:
        raise IsotuneError(
            f"{table.path}: the index column {column!r} {problem} (lines {named_lines(bad)}); "
            "the predictions file names each example by its index. Fix: give each row its own "
            "integer index, or rename the column (the predictions' index is then the row's "
            "position, from 0)."
        )
    return [int(value) for _, value in values]


def _integer(value: Any) -> bool:
    return isinstance(value, int) or (isinstance(value, str) and _integer_literal(value))


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


# data.* keys that name a task=files task's files: its task holds them (own_task)
FILE_KEYS = ("train_file", "validation_file", "test_file", "dataset_name", "dataset_config_name")


def complete_own_task(cfg: DictConfig) -> OwnData | None:
    """A ``task=files`` task completed in ``cfg`` from its files (:func:`own_task`), once per
    config; what reading the files gave (None: a GLUE task, or one completed before). A GLUE task
    with ``data.*_file`` set is refused: it reads GLUE's files, never those."""
    files = {key: cfg.data.get(key) for key in FILE_KEYS}
    if not task_kind(cfg.task).own_data:
        named = [f"data.{key}={value}" for key, value in files.items() if value is not None]
        if named:
            raise IsotuneError(
                f"{' '.join(named)} names your own data, but task={cfg.task.name} reads GLUE's "
                f"{cfg.task.name} files. Fix: task=files {' '.join(named)}, or leave them "
                "unset for GLUE."
            )
        return None
    if cfg.task.num_labels is not None:
        return None
    own_data = own_task(
        OmegaConf.to_container(cfg.task, resolve=True), test=bool(cfg.write_test_predictions)
    )
    with open_dict(cfg):
        cfg.task = own_data.task
    return own_data
