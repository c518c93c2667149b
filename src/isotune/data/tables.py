"""One data file of one's own (``task=files``) as rows: a CSV or TSV file with a header row, or a
JSON Lines file, chosen by its suffix, or a Hugging Face data set's split; each row with the line
an editor shows it at, so that every message about a row names its line. What a file's shape
gets wrong (a row of another length than the header, a column named twice, a line that is not a
JSON object) is refused here; what its values mean (labels, scores) is :mod:`.own_data`'s.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from isotune.data.hub import load_hub_split
from isotune.errors import IsotuneError

DELIMITERS = {".csv": ",", ".tsv": "\t"}
JSON_LINES = (".jsonl", ".json")  # run_glue.py's --train_file takes .json files of JSON Lines
SHOWN_ROWS = 10  # rows named in a message; the count says how many more
# What a row that csv cannot read (a field longer than its limit) says of its cause, by delimiter.
UNREADABLE = {
    "\t": "A TSV whose line endings were lost, or that is not tab-separated, reads as one huge "
    "field. Fix: one example a line, its fields separated by tabs (a GLUE file: the official one).",
    ",": "A quote opened and never closed reads the rest of the file as one field. Fix: quote "
    "fields holding a comma, a quote or a line break with double quotes (a quote inside them "
    "doubled), as spreadsheet programs and pandas' to_csv do.",
}


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
    rows = delimited_rows(path, delimiter)
    header = tuple(next(rows, (0, ()))[1])
    repeated = [name for name, count in Counter(header).items() if count > 1]
    if repeated:
        raise IsotuneError(
            f"{path}: the header names the column {repeated[0]!r} {header.count(repeated[0])} "
            f"times (its columns: {list(header)}), so each row would keep one of its values "
            "under that name and drop the others. Fix: give each column its own name in the "
            "header row (rename or remove the repeated one)."
        )
    table, uneven = [], []
    for line, values in rows:
        if len(values) != len(header):
            uneven.append((line, len(values)))
        else:
            table.append((line, dict(zip(header, values, strict=True))))
    if uneven:
        raise _uneven_rows(path, len(header), uneven, delimiter)
    return Table(path, header, table)


def delimited_rows(path: Path, delimiter: str) -> Iterator[tuple[int, list[str]]]:
    """``(line, fields)`` of each non-empty row of a CSV (``delimiter`` ``,``) or TSV (``\\t``)
    file, ``line`` the one it starts on; GLUE's files and one's own are read alike, as ``utf-8-sig``
    (MRPC starts with a byte-order mark). A TSV has no quoting (bare quote characters, as in SST-2
    and MRPC, are text); a CSV quotes a field holding a comma, a quote or a line break. A byte that
    is not UTF-8 and a row csv cannot read are named with their line (the decoder's own error knows
    only an offset in a buffered chunk)."""
    quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
    try:
        with path.open(encoding="utf-8-sig", newline="") as file:
            reader = csv.reader(file, delimiter=delimiter, quoting=quoting)
            start = 1
            for fields in reader:
                if fields:
                    yield start, fields
                start = reader.line_num + 1
    except csv.Error as error:
        raise IsotuneError(
            f"{path}, line {reader.line_num}: a row csv cannot read ({error}). "
            + UNREADABLE[delimiter]
        ) from None
    except UnicodeDecodeError as error:
        raise _not_utf8(path) or error from None


def _not_utf8(path: Path) -> IsotuneError | None:
    """The refusal of the first byte of ``path`` that is not UTF-8, naming its line (a decoder's
    own error knows only its offset in one buffered chunk of the file); None when the file
    decodes now (it changed while it was read)."""
    raw = path.read_bytes()
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        return IsotuneError(
            f"{path}, line {line}: byte "
            f"{raw[error.start : error.end]!r} is not UTF-8 text (the file was probably saved in "
            "another encoding, such as Latin-1 or Windows-1252). Fix: re-save the file as UTF-8."
        )
    return None


def _uneven_rows(
    path: Path, columns: int, uneven: Sequence[tuple[int, int]], delimiter: str
) -> IsotuneError:
    """The refusal of rows with more or fewer fields than the header: a text holding an
    unquoted delimiter is cut in two, and its second piece would be read as the label (a class
    of its own), or a row lacks a column; neither is guessed at."""
    line, fields = uneven[0]
    if delimiter == "\t":
        fix = (
            "a TSV is not quoted, so a text holds no tab: remove it, or write the data as CSV or "
            "JSON Lines"
        )
    else:
        fix = (
            'quote a field that holds a comma with double quotes ("it was long, but fun",good), '
            "as spreadsheet programs and pandas' to_csv write it"
        )
    return IsotuneError(
        f"{path}: line {line} has {fields} field{'s' if fields != 1 else ''}, the header "
        f"{columns} ({len(uneven)} row{'s' if len(uneven) != 1 else ''} of another length than "
        f"the header: lines {named_lines([line for line, _ in uneven])}). A row with more fields "
        "holds a delimiter in a text, which cuts the text and reads a piece of it as another "
        f"column; one with fewer lacks a column. Fix: {fix}; and give every row a value for each "
        "of the header's columns (an empty value: nothing between two delimiters)."
    )


def named_lines(lines: Sequence[int]) -> str:
    """The first lines of ``lines`` a message names, and how many more there are."""
    shown = ", ".join(map(str, lines[:SHOWN_ROWS]))
    return shown + (f" and {len(lines) - SHOWN_ROWS} more" if len(lines) > SHOWN_ROWS else "")


def _read_json_lines(path: Path) -> Table:
    rows, columns = [], {}
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as error:
        raise _not_utf8(path) or error from None
    # Lines end at "\n" alone (a CRLF line's "\r" is JSON whitespace): str.splitlines would also
    # cut at U+2028, U+2029 and U+0085, which a JSON string may hold as they are.
    for line, object_text in enumerate(text.split("\n"), start=1):
        if not object_text.strip():
            continue
        where = f"{path}, line {line}"
        try:
            row = json.loads(object_text, object_pairs_hook=partial(_json_object, where=where))
        except json.JSONDecodeError as error:
            raise IsotuneError(
                f"{where}: not JSON ({error.msg}). Fix: one JSON object a line (JSON Lines), "
                'e.g. {"sentence": "a fine film", "label": "positive"}.'
            ) from None
        if not isinstance(row, dict):
            raise IsotuneError(
                f"{where}: a JSON {type(row).__name__}, not an object. Fix: one JSON object a "
                'line (JSON Lines), e.g. {"sentence": "a fine film", "label": 1}.'
            )
        columns.update(dict.fromkeys(row))
        rows.append((line, row))
    return Table(path, tuple(columns), rows)


def _json_object(pairs: list[tuple[str, Any]], where: str) -> dict[str, Any]:
    """A JSON object of ``where``, refused when it names a key twice: ``json`` would keep the
    last value silently, and a row's text or label would be whichever came last."""
    row = dict(pairs)
    if len(row) < len(pairs):
        key = next(key for key, count in Counter(key for key, _ in pairs).items() if count > 1)
        raise IsotuneError(
            f"{where}: the key {key!r} appears {[k for k, _ in pairs].count(key)} times in one "
            "object, so all but its last value would be dropped. Fix: give each key once a "
            "object (rename or remove the repeated one)."
        )
    return row


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
