"""Each benchmark's ``--help`` opens with whole sentences: the description its parser is given is
read from the script's source and evaluated on its docstring, so no benchmark is imported (they
import torch) and a description cut from the docstring mid-sentence is caught. A description that
is the whole docstring (usage examples and all) is whole by construction. The parts of
``gpu_check.py`` that are no command of their own answer ``--help`` too (run in this process:
their torch imports are the suite's)."""

from __future__ import annotations

import ast
import runpy
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def parser_descriptions() -> list[tuple[str, str]]:
    """(script, the part of its docstring its ``ArgumentParser`` shows) for every benchmark whose
    parser shows a part."""
    found = []
    for script in sorted(BENCHMARKS.glob("*.py")):
        tree = ast.parse(script.read_text())
        docstring = ast.get_docstring(tree, clean=False) or ""
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "ArgumentParser":
                for keyword in node.keywords:
                    if keyword.arg == "description":
                        expression = compile(ast.Expression(keyword.value), script.name, "eval")
                        description = eval(expression, {"__doc__": docstring})
                        if description != docstring:
                            found.append((script.name, description))
    return found


DESCRIPTIONS = parser_descriptions()


def test_every_benchmark_with_a_command_line_is_found():
    assert len(DESCRIPTIONS) >= 8, DESCRIPTIONS


@pytest.mark.parametrize(("script", "description"), DESCRIPTIONS, ids=[s for s, _ in DESCRIPTIONS])
def test_a_benchmarks_help_ends_its_description_with_a_sentence(script, description):
    assert description.rstrip().endswith((".", ".)")), f"{script}: ...{description[-80:]!r}"


@pytest.mark.parametrize("script", ["gpu_measures.py", "gpu_sweep.py"])
def test_a_part_of_gpu_check_answers_help_and_names_the_command_to_run(script, monkeypatch, capsys):
    def run(*arguments: str) -> tuple[int, pytest.CaptureResult]:
        monkeypatch.setattr(sys, "argv", [script, *arguments])
        with pytest.raises(SystemExit) as exited:
            runpy.run_path(str(BENCHMARKS / script), run_name="__main__")
        return exited.value.code, capsys.readouterr()

    status, printed = run("--help")
    assert status == 0 and printed.out.startswith(f"usage: {script}")
    assert "gpu_check.py" in printed.out
    status, printed = run()
    assert status == 2 and "run python benchmarks/gpu_check.py" in printed.err
