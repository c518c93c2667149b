"""What the reports of every family share: Markdown tables (sweep tables, the analysis report), and
counts with their nouns."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``1 run``, ``2 runs``, ``0 runs``: ``n`` and its noun, singular for one; ``plural`` for a
    noun whose plural is not the noun and an s (``search``: ``searches``)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A GitHub-flavoured Markdown table; cells are written with ``str``."""
    lines = [header, ["---"] * len(header), *rows]
    return "\n".join("| " + " | ".join(str(cell) for cell in line) + " |" for line in lines)
