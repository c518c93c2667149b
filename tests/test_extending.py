"""The steps of docs/extending.md marked *(checked)* are done for every existing entry, and every
relative link in README.md and docs/*.md points to a file (and heading) that exists.

Each test reads the registries and the config folders, never a list of names written here, so a
task, model, norm, regularizer, isotropy measure or analysis statement added later is checked too.
"""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path

import pytest
import torch
import yaml

from isotune.data.own_data import own_task
from isotune.data.tasks import TaskSpec
from isotune.isotropy import measure_cloud, measure_outliers
from isotune.isotropy.penalties import REGULARIZERS
from isotune.model.regularization import MEASURES
from isotune.norms.registry import NORMS
from isotune.training.config_checks import RULES
from tests.conftest import CONF_DIR, ROOT
from tests.helpers.norms import (
    CODE_SPAN,
    code_words,
    documented_options,
    norms_with_interventions,
    unchecked_options,
    unranged_norm_options,
)
from tests.helpers.presets import load, options, overrides, stated_job_counts, sweep_params

CONF = CONF_DIR
DOCS = ROOT / "docs"
ANALYSIS = ROOT / "src" / "isotune" / "analysis"
RULE_KEYS = {rule[0] for rule in RULES if not callable(rule)}  # a norm's: on its entry in NORMS
# What the isotropy callback logs besides measure_cloud's and measure_outliers' scalars.
CALLBACK_MEASURES = ("isoscore_star", "outliers_kept")


def swept_interventions() -> set[str]:
    return set(sweep_params("interventions")["intervention"])


def table_column(markdown: str, header: str) -> set[str]:
    """The code words of the first cell of each row of the table whose header row starts with
    ``header``."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    cells = []
    for line in lines[start + 2 :]:  # after the header and its |---| line
        if not line.startswith("|"):
            break
        cells.append(line.split("|")[1])
    return code_words(" ".join(cells))


CONFIG_GROUPS_HEADER = "| group | options |"  # docs/training.md's config groups table
GROUPS = sorted(path.name for path in CONF.iterdir() if path.is_dir())  # as --help lists them


# -- tasks and models -------------------------------------------------------------------------


@pytest.mark.parametrize("name", options("task"))
def test_every_task_config_is_a_valid_task_named_as_its_file(name, tmp_path):
    config = load("task", name)
    if config.get("source") == "files":  # completed from its files first (test_own_data.py)
        data = tmp_path / "data.csv"
        data.write_text("text,label\na fine film,pos\na dull film,neg\n")
        files = {"train": str(data), "validation": str(data)}
        config = own_task({**config, "files": files, "dataset": None, "dataset_config": None}).task
    assert TaskSpec.from_config(config).name == name


def test_the_config_groups_table_names_every_group_and_no_other():
    """Every folder of conf/ is a group `python train.py --help` lists (intervention_weight and
    study were missing from the table, issue 70 item 6)."""
    training = (DOCS / "training.md").read_text()
    assert table_column(training, CONFIG_GROUPS_HEADER) == set(GROUPS), (
        "give every folder of conf/ a row of the config groups table in docs/training.md"
    )


@pytest.mark.parametrize("group", GROUPS)
def test_the_config_groups_table_names_every_option_and_no_other(group):
    documented, expected = documented_options(group)
    assert documented == expected, (
        f"update the `{group}` row of the config groups table in docs/training.md"
    )


@pytest.mark.parametrize("name", options("model"))
def test_every_model_config_is_named_as_its_file(name):
    assert load("model", name)["name"] == name


# -- norms -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", norms_with_interventions())
def test_every_norm_with_an_intervention_has_its_own_in_the_interventions_sweep(name):
    assert (CONF / "intervention" / f"{name}.yaml").is_file(), f"no conf/intervention/{name}.yaml"
    assert overrides(name) == {"norm": name, "reg": "none"}
    assert name in swept_interventions(), "not in conf/experiment/interventions.yaml's sweep"


@pytest.mark.parametrize("name", list(NORMS))
def test_every_norm_option_has_a_range_on_its_entry(name):
    assert unranged_norm_options(name) == [], "add its range to the entry in NORMS"


# -- regularizers ------------------------------------------------------------------------------


def test_every_reg_config_is_a_registered_regularizer():
    assert {load("reg", name)["name"]: name for name in options("reg")} == {
        key: key for key in REGULARIZERS
    }


@pytest.mark.parametrize("name", [key for key in REGULARIZERS if key != "none"])
def test_every_regularizer_names_its_measure_and_is_an_intervention(name):
    assert name in MEASURES, "regularization.MEASURES: what the penalty logs as train/reg_<...>"
    setting_it = [
        intervention
        for intervention in options("intervention")
        if overrides(intervention) == {"norm": "none", "reg": name}
    ]
    assert setting_it, f"no conf/intervention/*.yaml sets reg={name} alone"
    assert set(setting_it) <= swept_interventions()


@pytest.mark.parametrize("name", list(REGULARIZERS))
def test_every_regularizer_option_has_a_config_check(name):
    assert unchecked_options("reg", name, RULE_KEYS) == [], "add a rule to config_checks.RULES"


def test_interventions_doc_tables_every_regularizer_and_intervention():
    interventions = (DOCS / "interventions.md").read_text()
    assert table_column(interventions, "| `reg=` |") == set(REGULARIZERS) - {"none"}, (
        "update the `reg=` table of docs/interventions.md"
    )
    assert table_column(interventions, "| `intervention=` |") == set(options("intervention")), (
        "update the `intervention=` table of docs/interventions.md"
    )


def test_every_intervention_is_swept_by_the_interventions_preset():
    missing = set(options("intervention")) - swept_interventions()
    assert not missing, f"add {sorted(missing)} to conf/experiment/interventions.yaml's sweep"
    assert swept_interventions() <= set(options("intervention"))


SWEEP_PRESETS = [name for name in options("experiment") if sweep_params(name)]


@pytest.mark.parametrize("experiment", SWEEP_PRESETS)
def test_every_count_of_a_sweep_presets_jobs_is_its_sweeps(experiment):
    """README, docs and a preset's own comments may count its jobs (``7 tasks x 2 norms x 5 seeds
    = 70 jobs``); each count is the sweep's, so adding a task or seed fails here naming each line
    to update. The interventions preset states none (a new intervention joins it): its sweep's
    first line prints the count."""
    sizes = sorted(len(values) for values in sweep_params(experiment).values())
    jobs = math.prod(sizes)
    wrong = [
        f"{where} says {stated} jobs{' (' + ' x '.join(map(str, factors)) + ')' if factors else ''}"
        for where, factors, stated in stated_job_counts(experiment)
        if stated != jobs or (factors and sorted(factors) != sizes)
    ]
    assert not wrong, (
        f"conf/experiment/{experiment}.yaml sweeps {' x '.join(map(str, sizes))} = {jobs} jobs, "
        "but " + "; ".join(wrong) + ": update each line named"
    )


# -- isotropy measures -------------------------------------------------------------------------


def test_every_logged_isotropy_measure_is_defined_in_docs():
    points = torch.randn(40, 6, generator=torch.Generator().manual_seed(0))
    logged = {
        *measure_cloud(points).scalars,
        *measure_outliers(points).scalars,
        *CALLBACK_MEASURES,
    }
    documented = {word.strip(",") for word in code_words((DOCS / "isotropy.md").read_text())}
    assert sorted(logged - documented) == []


# -- analysis statements -----------------------------------------------------------------------


def statements() -> list[str]:
    """The first argument of every ``Verdict(...)`` in verdicts.py: T1-T5, O1, O2."""
    tree = ast.parse((ANALYSIS / "verdicts.py").read_text())
    return [
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", None) == "Verdict"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    ]


def test_verdicts_are_found():
    assert {"T1", "T5", "O1", "O2"} <= set(statements())


@pytest.mark.parametrize("statement", statements())
def test_every_statement_is_reported_and_documented(statement):
    assert statement[0] in "TO", "report.py puts verdicts into report.md by their first letter"
    word = re.compile(rf"\b{statement}\b")
    assert word.search((ANALYSIS / "report_template.md").read_text()), "its rule in the report"
    assert word.search((DOCS / "analysis.md").read_text())


@pytest.mark.parametrize(
    "threshold", sorted(yaml.safe_load((CONF / "analyze.yaml").read_text())["verdict"])
)
def test_every_verdict_threshold_is_documented_and_in_the_report(threshold):
    assert f"`verdict.{threshold}`" in (DOCS / "analysis.md").read_text()
    assert f"cfg.verdict.{threshold}" in (ANALYSIS / "report_template.md").read_text()


# -- links -------------------------------------------------------------------------------------

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def without_code_blocks(markdown: str) -> str:
    return re.sub(r"^```.*?^```", "", markdown, flags=re.MULTILINE | re.DOTALL)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation other than - and _ dropped, spaces
    to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    headings = re.findall(r"^#+ (.+)$", without_code_blocks(page.read_text()), re.MULTILINE)
    return {slug(heading) for heading in headings}


def links(page: Path) -> list[str]:
    """The targets of the links and images of ``page``'s prose (not of its code)."""
    return LINK.findall(CODE_SPAN.sub("", without_code_blocks(page.read_text())))


def test_slugs_follow_github():
    assert slug("I-STAR (`reg=istar`)") == "i-star-registar"
    assert slug("W&B never holds up a run") == "wb-never-holds-up-a-run"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page):
    broken = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no {linked}")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.name}")
    assert broken == []


# -- the study of every intervention -----------------------------------------------------------


STUDY = "isotropy"  # conf/study/isotropy.yaml: every intervention an arm (docs/study.md)


def study_settings(name: str = STUDY) -> dict:
    return yaml.safe_load((CONF / "study" / f"{name}.yaml").read_text())["hydra"]["sweeper"]


def arm_overrides(arm: dict) -> dict[str, str]:
    return dict(override.split("=", 1) for override in arm["overrides"])


def test_every_intervention_is_an_arm_of_the_study_of_every_intervention():
    """A new intervention preset joins conf/study/isotropy.yaml too: its catalog restates each
    preset's norm and reg (a regularizer's weight searched there, the presets fixing one each
    way), and its arm list names every catalog entry."""
    settings = study_settings()
    catalog = settings["catalog"]
    arms = {(o["norm"], o["reg"]): name for name, o in
            ((name, arm_overrides(arm)) for name, arm in catalog.items())}  # fmt: skip
    for intervention in options("intervention"):
        set_by = overrides(intervention)
        key = (set_by["norm"], set_by["reg"])
        assert key in arms, (
            f"intervention={intervention} (norm={key[0]} reg={key[1]}) has no arm in "
            f"conf/study/{STUDY}.yaml's catalog"
        )
        if key[1] != "none":
            assert "reg.weight" in catalog[arms[key]].get("params", {}), (
                f"arm {arms[key]} fixes reg={key[1]}: it searches reg.weight"
            )
    presets = {(overrides(i)["norm"], overrides(i)["reg"]) for i in options("intervention")}
    assert set(arms) <= presets, "a catalog arm no intervention preset sets"
    assert sorted(settings["arms"]) == sorted(catalog), "the study's arms: every catalog entry"


def test_the_study_of_every_intervention_states_its_run_count_right():
    settings = study_settings()
    per_search = settings["n_trials"] * len(settings["seeds"]) + len(settings["report_seeds"])
    runs = len(settings["arms"]) * len(settings["tasks"]) * per_search
    header = (CONF / "study" / f"{STUDY}.yaml").read_text().split("defaults:")[0]
    stated = [int(n.replace(",", "")) for n in re.findall(r"([\d,]+) runs", header)]
    assert stated and set(stated) == {runs}, (
        f"conf/study/{STUDY}.yaml's opening comment says {stated} runs; its arms x tasks x "
        f"(trials x seeds + report seeds) are {runs}"
    )
    rows = [line for line in (DOCS / "study.md").read_text().splitlines()
            if line.startswith(f"| `{STUDY}` |")]  # fmt: skip
    assert rows and f"{runs:,}" in rows[0], "docs/study.md's preset table states its runs"
