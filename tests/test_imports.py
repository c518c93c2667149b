"""The house's floors. Each wing of ``src/isotune/`` imports only the wings its ``__init__``
names (``May import: ...``), so no arrow runs up; above them the Hydra plugins, above those the
entry scripts, and no module of the three imports another in a circle; the library wings
(measures, norms, whitening, penalties, enhancement) and the names of keys and runs and the
statistics import in a fresh interpreter without Lightning, Hydra or transformers; the offline
sweep tools answer ``--help`` without torch; every class the carried records name imports."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest
import yaml
from hydra.utils import get_object

import hydra_plugins.isotune_launcher
import isotune
from tests.conftest import ROOT

PACKAGE = Path(isotune.__file__).parent
PLUGINS = Path(hydra_plugins.isotune_launcher.__file__).parent
SCRIPTS = ("train", "analyze", "predict")  # the Hydra entry points, at the repository's root
TESTS = ROOT / "tests"
# every wing may import them; they import no wing
GROUND = ("errors", "atomic_files", "file_digest")
# `python -m isotune.<name>`: above every wing
ENTRY_MODULES = ("aggregate", "rerun", "env", "submission")
WINGS = sorted(path.parent.name for path in PACKAGE.glob("*/__init__.py"))
LIBRARY_WINGS = ("norms", "isotropy")
LIBRARY = (
    *(
        f"isotune.{wing}.{path.stem}".removesuffix(".__init__")
        for wing in LIBRARY_WINGS
        for path in sorted((PACKAGE / wing).glob("*.py"))
    ),
    "isotune.tracking.metric_keys",
    "isotune.tracking.run_names",
    "isotune.sweeps.statistics",
    "isotune.sweeps.score_resolution",
    "isotune.sweeps.power",
    "isotune.sweeps.correlation",
    "isotune.search.expected_best",
    "isotune.study.sequential",
)
TRAINING_STACK = {"lightning", "pytorch_lightning", "hydra", "omegaconf", "transformers", "peft"}
SEARCH_WINGS = ("isotune.search", "isotune.study")  # they import Optuna, SciPy
OFFLINE_TOOLS = ("isotune.aggregate", "isotune.rerun", "isotune.env", "isotune.sweeps.aggregate")


def top_level_modules_after(code: str) -> set[str]:
    """The top-level packages a fresh interpreter has imported after running ``code``."""
    report = "import json, sys; print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    result = subprocess.run(
        [sys.executable, "-c", f"{code}\n{report}"], capture_output=True, text=True, check=True
    )
    return set(json.loads(result.stdout.splitlines()[-1]))


@pytest.mark.slow
@pytest.mark.parametrize("module", LIBRARY)
def test_a_library_module_imports_without_the_training_stack(module):
    imported = top_level_modules_after(f"import {module}")
    assert imported.isdisjoint(TRAINING_STACK), sorted(imported & TRAINING_STACK)


@pytest.mark.slow
def test_the_search_core_imports_without_hydra():
    """The ask-launch-tell loop and the search it drives live beside the other cores; only the
    sweeper that adapts them to Hydra (hydra_plugins/isotune_launcher) imports Hydra."""
    imported = top_level_modules_after("import isotune.search.loop, isotune.search.search")
    assert "hydra" not in imported and "lightning" not in imported


@pytest.mark.slow
def test_hydras_plugin_scan_imports_neither_the_search_nor_optuna():
    """Hydra's plugin scan imports every plugin module on every run of train.py, a plain one
    included (issue 63 item 7): the sweepers hold their settings there, and import the search
    (:mod:`isotune.search`, :mod:`isotune.study`, Optuna with them) only when a search runs.
    SciPy is not asked after: Lightning, which the gpus launcher's run record imports, imports
    it anyway."""
    code = (
        "import json, sys\n"
        "from hydra.core.plugins import Plugins\n"
        "from hydra.plugins.sweeper import Sweeper\n"
        "found = sorted(p.__name__ for p in Plugins.instance().discover(Sweeper))\n"
        "print(json.dumps([found, sorted(sys.modules)]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    found, imported = json.loads(result.stdout.splitlines()[-1])
    assert {"OptunaSweeper", "StudySweeper"} <= set(found)  # the scan did find them
    search = [m for m in imported if m.split(".")[0] == "optuna" or m.startswith(SEARCH_WINGS)]
    assert search == []


@pytest.mark.slow
@pytest.mark.parametrize("module", OFFLINE_TOOLS)
def test_an_offline_tool_answers_help_without_torch(module):
    code = (
        "import runpy, sys\n"
        f"sys.argv = [{module!r}, '--help']\n"
        "try:\n"
        f"    runpy.run_module({module!r}, run_name='__main__')\n"
        "except SystemExit as exit:\n"
        "    assert exit.code == 0, exit.code"
    )
    imported = top_level_modules_after(code)
    heavy = {"torch", "lightning", "pytorch_lightning", "transformers", "peft"}  # omegaconf is fine
    assert imported.isdisjoint(heavy), sorted(imported & heavy)


def may_import(wing: str) -> set[str]:
    """The wings a wing's ``__init__`` docstring names after ``May import:``, up to the full stop
    (``no wing``: none)."""
    docstring = ast.get_docstring(ast.parse((PACKAGE / wing / "__init__.py").read_text())) or ""
    found = re.search(r"^May import: ([^.]+)\.$", docstring, re.MULTILINE)  # over lines
    assert found, f"isotune/{wing}/__init__.py names no 'May import: <wings>.' line"
    return set() if found[1] == "no wing" else set(re.split(r",\s+", found[1]))


def imported_names(path: Path, root: Path) -> set[str]:
    """The absolute dotted names a module under ``root`` (the folder its top package is in)
    imports, at the top or in a function: ``a.b`` for ``import a.b``, ``a.b.c`` for ``from a.b
    import c``, relative imports resolved."""
    module = ".".join(path.relative_to(root).with_suffix("").parts)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:  # relative: from the module's own package, or one above it
                source = ".".join([package.rsplit(".", node.level - 1)[0], source]).rstrip(".")
            names.update(f"{source}.{alias.name}" for alias in node.names)
    return names


def imported_wings(path: Path) -> set[str]:
    """The first names under ``isotune.`` that a module imports (at the top or in a function)."""
    names = imported_names(path, PACKAGE.parent)
    return {name.split(".")[1] for name in names if name.startswith("isotune.")}


def test_the_package_holds_wings_the_ground_and_the_entry_modules_only():
    modules = {path.stem for path in PACKAGE.glob("*.py")} - {"__init__"}
    assert modules == {*GROUND, *ENTRY_MODULES}, "a new top-level module belongs in a wing"


def test_each_wing_imports_only_the_wings_its_init_names_and_none_runs_up():
    declared = {wing: may_import(wing) for wing in WINGS}
    assert set().union(*declared.values()) <= set(WINGS), declared
    try:
        tuple(TopologicalSorter(declared).static_order())
    except CycleError as cycle:
        pytest.fail(f"the wings' May import lines form a cycle: {cycle.args[1]}")
    for wing in WINGS:
        for path in sorted((PACKAGE / wing).rglob("*.py")):
            beyond = imported_wings(path) - {wing, *GROUND, *declared[wing]}
            assert not beyond, f"{path.relative_to(PACKAGE)} imports the wings {sorted(beyond)}"
    for name in GROUND:
        assert imported_wings(PACKAGE / f"{name}.py") <= set(GROUND), name


def imported_test_modules(path: Path) -> set[str]:
    """The test modules (``test_*.py`` under tests/) that a file under tests/ imports, however
    spelt: ``tests.test_x``, ``from tests import test_x``, relative, or a bare ``test_x`` as a
    rootdir on ``sys.path`` would find it."""
    imported = (name.removeprefix("tests.").split(".")[0] for name in imported_names(path, ROOT))
    return {module for module in imported if module.startswith("test_")}


def test_no_test_module_imports_another():
    """Shared test code lives in tests/helpers/ (docs/testing.md): a test module that imports
    another breaks when that one's tests are edited or moved, and pytest collects again any test
    function it imports."""
    importing = {
        str(path.relative_to(ROOT)): sorted(imported_test_modules(path))
        for path in sorted([*TESTS.glob("*.py"), *TESTS.glob("helpers/*.py")])
    }
    assert {path: found for path, found in importing.items() if found} == {}


def module_graph() -> dict[str, set[str]]:
    """Every module of ``isotune``, of this project's Hydra plugins and the entry scripts, and
    the modules of the three it imports (at the top or in a function), a name imported from a
    module counted as the module (``from isotune.data import GLUEDataModule``: ``isotune.data``)."""
    paths = {
        ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): (
            path,
            root,
        )
        for root, folder in ((PACKAGE.parent, PACKAGE), (PLUGINS.parents[1], PLUGINS))
        for path in folder.rglob("*.py")
    }
    paths.update({script: (ROOT / f"{script}.py", ROOT) for script in SCRIPTS})
    graph = {}
    for module, (path, root) in paths.items():
        found = set()
        for name in imported_names(path, root):
            while name and name not in paths:
                name = name.rpartition(".")[0]
            found.add(name)
        graph[module] = found - {"", module}
    return graph


def layer(module: str) -> int:
    """0: isotune (its wings ordered by their ``May import`` lines); 1: the plugins; 2: a script."""
    return 2 if module in SCRIPTS else int(module.startswith("hydra_plugins."))


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of ``graph`` with more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in sorted(graph[module]):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            part = stack[stack.index(module) :]
            del stack[stack.index(module) :]
            if len(part) > 1:
                found.append(sorted(part))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_no_module_imports_itself_round_a_circle():
    """A circle, even through an import inside a function, makes each module of it need the
    others to be read or moved (issue 69 item 2)."""
    assert circles(module_graph()) == []


def test_no_import_runs_up_from_isotune_to_the_plugins_or_a_script():
    graph = module_graph()
    uphill = {
        module: sorted(other for other in imported if layer(other) > layer(module))
        for module, imported in graph.items()
    }
    assert {module: found for module, found in uphill.items() if found} == {}


def recorded_targets() -> set[str]:
    """The ``_target_``s that the Hydra records of the runs and sweeps carried under
    docs/results/ name (their ``multirun.yaml`` and ``.hydra/hydra.yaml``)."""
    targets: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            targets.update([node["_target_"]] if isinstance(node.get("_target_"), str) else [])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    results = ROOT / "docs" / "results"
    for path in [*results.rglob("multirun.yaml"), *results.rglob(".hydra/hydra.yaml")]:
        walk(yaml.safe_load(path.read_text()))
    return targets


@pytest.mark.slow
def test_every_target_the_carried_records_name_still_imports():
    """A carried sweep can be typed again, continued or read by the tools only while every class
    its records name is where they name it."""
    targets = recorded_targets()
    assert "isotune.callbacks.isotropy.IsotropyMonitor" in targets  # the records were read
    missing = []
    for target in sorted(targets):
        try:
            get_object(target)
        except Exception as error:  # Hydra's ImportError, or whatever the import raised
            missing.append(f"{target}: {error}")
    assert missing == []
