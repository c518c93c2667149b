"""The checks on a search's settings beyond their own ranges (:mod:`isotune.search.settings`):
what is checked before its first job, so that a bad setting costs no trial, and which settings a
study typed again must keep (docs/search.md#settings). A continued study is held only to what
ranks its trials (:data:`RANKING`; another sampler, or another seed of it, would ask the rest of
the trials by another rule than the first ones); the report's settings may change.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
    distribution_to_json,
    json_to_distribution,
)

from isotune.errors import IsotuneError
from isotune.search.space import SIGN, SearchSpace

SEEDS = 2**32  # numpy's seeds, the range train.py's config check holds every seed to
DEFAULT_SEEDS = {"seeds": (1, 3), "report_seeds": (101, 5)}  # (first, how many) of each default
AXES = ("task", "model", "adapt")  # config groups a search runs on, never tunes
# what a continued study keeps
RANKING = ("searched", "fixed", "seeds", "direction", "sampler", "tune_on")
# Overrides that leave every score as it is: where it is logged, what is kept on disk.
NOT_A_RUN_CHANGE = (
    "paths",  # where the folders lie (paths.log_dir=... for a folder carried elsewhere)
    "logger",
    "checkpoint.keep",
    "trainer.enable_progress_bar",
    "trainer.enable_model_summary",
)
BASELINE_FOLDER = "report/baseline"


def key_name(key: str) -> str:
    """An override key without its ``+``/``~`` prefix and ``@package``: ``reg``, ``optim.lr``."""
    return key.lstrip("+~").split("@")[0]


def check_seeds(seeds: Any, report_seeds: Any) -> None:
    """Tuning and report seeds: non-empty lists of different seeds (:func:`check_seed_list`),
    none of them in both. Each fix named leaves the other list as typed, and overlaps it in no
    seed."""
    lists = {"seeds": seeds, "report_seeds": report_seeds}
    for name, values in lists.items():
        other = lists["report_seeds" if name == "seeds" else "seeds"]
        fix = f"Fix: e.g. 'hydra.sweeper.{name}={_free_seeds(name, other)}'."
        check_seed_list(values, f"hydra.sweeper.{name}", fix, "each job of the search")
    overlap = sorted(set(seeds) & set(report_seeds))
    if overlap:
        raise IsotuneError(
            f"Seeds {overlap} are both tuning seeds (hydra.sweeper.seeds={seeds}) and report "
            f"seeds (hydra.sweeper.report_seeds={report_seeds}): the report would judge the "
            "winner on seeds it was chosen on. Fix: report seeds that are not tuning seeds, e.g. "
            f"'hydra.sweeper.report_seeds={_free_seeds('report_seeds', seeds)}'."
        )


def check_seed_list(
    values: Any, setting: str, fix: str, refused: str, paired: bool = False
) -> tuple[int, ...]:
    """``values``, typed as ``setting``, as sorted seeds: different integers in numpy's range, one
    or more (two where ``paired``); else refused, with ``fix``. A search's and a stated test's."""
    enough = 2 if paired else 1
    if (
        not isinstance(values, list)
        or len(set(map(str, values))) != len(values)
        or (len(values) < enough)
    ):
        count = "at least two" if paired else "one or more"
        why = ": a paired test needs two pairs to have a spread" if paired else ""
        raise IsotuneError(f"{setting}={values} must name {count} different seeds{why}. {fix}")
    bad = [v for v in values if isinstance(v, bool) or not isinstance(v, int)]
    bad += [v for v in values if v not in bad and not 0 <= v < SEEDS]
    if bad:
        raise IsotuneError(
            f"{setting}={values}: {bad} not a seed (an integer from 0 to 2**32 - 1 = "
            f"{SEEDS - 1}, the seeds numpy takes); {refused} would be refused. {fix}"
        )
    return tuple(sorted(values))


def _free_seeds(name: str, taken: Any) -> str:
    """``name``'s default seeds, shifted past any seed of ``taken``, as an override writes them."""
    first, count = DEFAULT_SEEDS[name]
    taken = set(taken) if isinstance(taken, list) else set()
    free: list[int] = []
    seed = first
    while len(free) < count:
        if seed not in taken:
            free.append(seed)
        seed += 1
    return f"[{','.join(map(str, free))}]"


def check_no_axis(space: SearchSpace) -> None:
    """Refuse a sweep over a task, model or adaptation: the search would rank them and keep the
    best scoring one, a question's axis turned into a knob."""
    for searched in space.searched:
        axis = key_name(searched.key)
        if axis not in AXES:
            continue
        options = getattr(searched.distribution, "choices", ())
        each = ", then ".join(f"{axis}={option}" for option in options) or f"{axis}=<one>"
        raise IsotuneError(
            f"{searched.key} is swept ({', '.join(map(str, options))}), but a {axis} is what a "
            f"search runs on, never what it tunes: it would pick the {axis} that scores higher. "
            f"Fix: run one search per {axis}, typing the command once with each: {each}"
            + (
                " (each search gets its own folder, named by its task and model)."
                if axis in ("task", "model")
                else f" and hydra.sweeper.study_name=<a name for each {axis}>."
            )
        )


def dry_run_jobs(
    space: SearchSpace, baseline: Sequence[str], report_seed: int, groups: Collection[str]
) -> list[tuple[str, list[str]]]:
    """The jobs to compose before the first one runs, each ``(what it is, overrides)``: the
    baseline on a report seed, and a job per option of each searched config group (``groups``:
    the config's group names). A searched value out of a key's range is the job's own refusal."""
    jobs = [("baseline (hydra.sweeper.baseline)", [*baseline, f"seed={report_seed}"])]
    for searched in space.searched:
        if key_name(searched.key) not in groups:
            continue
        for option in getattr(searched.distribution, "choices", ()):
            where = f"searched option {searched.key}={option}"
            jobs.append((where, [*space.fixed, f"{searched.key}={option}"]))
    return jobs


def dry_run(
    compose: Callable[[list[str]], Any], jobs: Sequence[tuple[str, list[str]]]
) -> list[Any]:
    """Compose each job's config as the launcher will, so that a job bound to be refused stops
    the search before its first job, not after every trial; the configs, in order."""
    composed = []
    for what, overrides in jobs:
        try:
            composed.append(compose(overrides))
        except Exception as error:  # Hydra's composition errors, the config check's
            first = str(error).split("\nConfig search path:")[0].strip()
            raise IsotuneError(
                f"The search's {what} cannot run ({' '.join(overrides)}): "
                f"{type(error).__name__}: {first}\nFix: correct it on the command line, in "
                "hydra.sweeper.params or hydra.sweeper.baseline; nothing has run yet."
            ) from None
    return composed


def changes_a_run(override: str) -> bool:
    """Whether an override can change a run's score (``logger=wandb`` cannot)."""
    name = key_name(override.split("=", 1)[0])
    return not any(name == key or name.startswith(key + ".") for key in NOT_A_RUN_CHANGE)


def ranking_settings(
    space: SearchSpace, seeds: Sequence[int], direction: str, sampler: Mapping[str, Any]
) -> dict[str, Any]:
    """What the trials of one study are ranked under, as the study records it (``sampler``: the
    sampler's config, its ``_target_`` and arguments)."""
    distributions = sorted(space.distributions().items())
    return {
        "searched": {name: distribution_to_json(d) for name, d in distributions},
        "fixed": sorted(o for o in space.fixed if changes_a_run(o)),
        "seeds": [int(seed) for seed in seeds],
        "direction": str(direction),
        "sampler": dict(sampler),
    }


def check_same_ranking(
    recorded: Mapping[str, Any], settings: Mapping[str, Any], study: str, folder: Path
) -> None:
    """Refuse to continue a study whose trials were ranked under other settings, naming each as
    typed; a record without a setting (older than it) is not held to it."""
    seen = {
        **recorded,
        "fixed": sorted(o for o in recorded.get("fixed", []) if changes_a_run(o)),
    }
    differ = [key for key in RANKING if key in seen and seen[key] != settings[key]]
    if not differ:
        return
    lines = "\n".join(
        f"  {key}: the study's {_typed(key, seen[key])}, this command's "
        f"{_typed(key, settings[key])}"
        for key in differ
    )
    raise IsotuneError(
        f"The study {study!r} in {folder} ranked its trials under other settings; continuing it "
        f"would rank trials run under different ones:\n{lines}\nThe baseline, the report seeds "
        "and the logger may change (the report is made again). Fix: type the command that made "
        "it (its multirun.yaml has the overrides) to continue it, or give this search a folder "
        "of its own: hydra.sweeper.study_name=<a new name>."
    )


def _typed(key: str, value: Any) -> str:
    """A recorded setting as the command line writes it."""
    if key == "searched":
        texts = searched_as_typed({k: json_to_distribution(v) for k, v in value.items()})
        return ", ".join(f"{k}={text}" for k, text in texts.items()) or "nothing"
    if key == "fixed":
        return " ".join(value) or "no override"
    if key == "seeds":
        return f"[{','.join(map(str, value))}]"
    if key == "sampler":
        arguments = ", ".join(f"{k}={v}" for k, v in sorted(value.items()) if k != "_target_")
        return f"{value.get('_target_')}({arguments})"
    return str(value)


def searched_as_typed(distributions: Mapping[str, BaseDistribution]) -> dict[str, str]:
    """Each searched key's distribution in the sweep grammar (``tag(log, interval(0.01, 1))``),
    a signed key's two parameters as one."""
    texts = {}
    for name, d in distributions.items():
        if name.endswith(SIGN):
            continue
        signed = name + SIGN in distributions
        if isinstance(d, CategoricalDistribution):
            texts[name] = f"choice({', '.join(map(str, d.choices))})"
        elif isinstance(d, (FloatDistribution, IntDistribution)) and d.step not in (None, 1):
            texts[name] = f"range({_number(d.low)}, {_number(d.high + d.step)}, {d.step})"
        elif isinstance(d, (FloatDistribution, IntDistribution)):
            low, high = _number(d.low), _number(d.high)
            if isinstance(d, FloatDistribution) and not any(c in low + high for c in ".en"):
                high += ".0"  # interval(1, 5) would read as integers
            interval = f"interval({low}, {high})"
            if isinstance(d, IntDistribution) and not d.log:
                interval = f"int({interval})"
            tags = ["log"] * d.log + ["signed"] * signed
            texts[name] = f"tag({', '.join(tags)}, {interval})" if tags else interval
        else:
            texts[name] = repr(d)
    return texts


def _number(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def baseline_folder(baselines: list[list[str]], baseline: Sequence[str]) -> str:
    """The report folder of ``baseline`` among the study's ``baselines`` (appended when new):
    ``report/baseline-<k>`` for the k-th, so a report remade with another keeps the old runs."""
    key = sorted(o for o in baseline if changes_a_run(o))
    if key not in baselines:
        baselines.append(key)
    k = baselines.index(key) + 1
    return BASELINE_FOLDER if k == 1 else f"{BASELINE_FOLDER}-{k}"
