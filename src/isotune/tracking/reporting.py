"""What the reports of every family share: Markdown tables (sweep tables, the analysis report)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A GitHub-flavoured Markdown table; cells are written with ``str``."""
    lines = [header, ["---"] * len(header), *rows]
    return "\n".join("| " + " | ".join(str(cell) for cell in line) + " |" for line in lines)
