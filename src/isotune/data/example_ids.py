"""The names a ``task=files`` test file gives its examples, which its predictions file keeps.

The predictions file names each prediction by the test file's id column (``task.id_column``, by
default the first of :data:`ID_COLUMNS` present; without one, positions from 0 under ``index``),
as written, in file order, under its own header, so that predictions join back onto the data. It
is a TSV without quoting, so an id holding a tab or a line break is refused, naming its lines. A
checkpoint made before ids were kept (no ``keeps_ids``) predicts as it did, in index order.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from isotune.data.tasks import TaskSpec
from isotune.errors import IsotuneError

ID_COLUMNS = ("id", "idx", "index")  # the id column by default: the first the test file has
ID_KEY, ID_COLUMN_KEY = "id", "id_column"  # a test example's id, and the column it came from


def test_id_column(task: TaskSpec, columns: Sequence[str], path: Path | str) -> str | None:
    """The test file's column that names its examples: ``task.id_column``, which the file must
    have, else the first of :data:`ID_COLUMNS` it has; None where it has none."""
    if task.id_column is not None:
        if task.id_column not in columns:
            raise IsotuneError(
                f"{path} has no column {task.id_column!r} (task.id_column, the ids its "
                f"predictions keep); its columns are {list(columns)}. Fix: name one of them with "
                "task.id_column=<column>, or add the column to the file."
            )
        return task.id_column
    return next((name for name in ID_COLUMNS if name in columns), None)


def checked_ids(
    path: Path | str, column: str, values: Sequence[tuple[int, Any]]
) -> list[dict[str, str]]:
    """What each test example carries of its own id: its text as written (a JSON number as
    written), and the column's name, ``values`` being the column's ``(line, value)`` pairs;
    refused where an id holds a tab or a line break, which would break the predictions' rows."""
    ids = [str(value) for _, value in values]
    bad = [line for (line, _), text in zip(values, ids, strict=True) if _breaks_a_row(text)]
    if bad:
        more = f" (and {len(bad) - 1} more of its {len(ids)} rows)" if len(bad) > 1 else ""
        raise IsotuneError(
            f"{path}, line {bad[0]}{more}: the id column {column!r} holds a tab or a line break; "
            "the predictions file is a TSV without quoting, where such an id would break its "
            "row. Fix: remove them from the ids, or name another column with "
            "task.id_column=<column>."
        )
    return [{ID_KEY: text, ID_COLUMN_KEY: column} for text in ids]


def example_ids(examples: Sequence[dict[str, Any]]) -> tuple[str, list[str]] | None:
    """The id column and each example's id, in the examples' order, where they carry their
    own (:data:`ID_KEY`); None where they are named by their index."""
    if not examples or ID_KEY not in examples[0]:
        return None
    return examples[0][ID_COLUMN_KEY], [example[ID_KEY] for example in examples]


def _breaks_a_row(text: str) -> bool:
    return any(character in text for character in "\t\n\r")
