"""What the reports of every family share: Markdown tables (sweep tables, the analysis report), and
counts with their nouns."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any


def counted(n: int, noun: str) -> str:
    """``1 run``, ``2 runs``, ``0 runs``: ``n`` and its noun (a regular one), singular for one."""
    return f"{n} {noun if n == 1 else noun + 's'}"


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A GitHub-flavoured Markdown table; cells are written with ``str``."""
    lines = [header, ["---"] * len(header), *rows]
    return "\n".join("| " + " | ".join(str(cell) for cell in line) + " |" for line in lines)
