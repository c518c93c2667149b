"""The verdicts on the statements T1-T5 of Rajaee & Pilehvar (2021), read from the tables.

Each verdict compares the fine-tuned model's numbers with the pre-trained twin's at the last layer;
the rules, and how to read each outcome, are in ``docs/analysis.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from isotune.analysis.experiments import METHODS, MODELS, PROPERTIES, SEPARABILITY
from isotune.data.tasks import TaskSpec


@dataclass(frozen=True)
class Verdict:
    """What this analysis says about one statement of the paper."""

    statement: str
    claim: str
    outcome: str  # supported | mixed | not supported
    evidence: str


def judge(
    tables: Mapping[str, pd.DataFrame],
    task: TaskSpec,
    sentence_view: str,
    last_layer: int,
    thresholds: Mapping,
) -> list[Verdict]:
    """T1-T5 against the numbers, at the last layer, for the tokens and for ``sentence_view`` (the
    model's sentence vector before the norm, :func:`~.experiments.sentence_view`), by the rules of
    docs/analysis.md#the-statements-and-their-verdicts (``thresholds``: the ``verdict.*``
    settings)."""
    layers = tables["isotropy_by_layer"]
    last = layers[layers.layer == last_layer].set_index(["model", "view"])
    views = ("tokens", sentence_view)

    def compare(measure: str, view: str) -> tuple[float, float]:
        return last.loc[("pretrained", view), measure], last.loc[("finetuned", view), measure]

    iw = {view: compare("log_iw", view) for view in views}
    rose = [fine > pre for pre, fine in iw.values()]
    t1 = Verdict(
        "T1",
        "fine-tuning does not necessarily make the space more isotropic",
        "not supported" if all(rose) else "supported",
        "; ".join(f"{view}: log I(W) {pre:.4g} → {fine:.4g}" for view, (pre, fine) in iw.items())
        + (" (rose at both levels)" if all(rose) else " (did not rise everywhere)"),
    )

    local = tables["local_structure"]
    local = local[local.layer == last_layer].set_index(["model", "property"])
    changes, evidence = [], []
    for name in PROPERTIES:
        for score in SEPARABILITY:
            pre, fine = (local.loc[(model, name), score] for model in MODELS)
            changes.append(abs(fine - pre))
            evidence.append(f"{name} {score} {pre:.3f} → {fine:.3f}")
    t2 = Verdict(
        "T2",
        "the local structure (token type, frequency) changes massively",
        "supported" if max(changes, default=0.0) >= thresholds.local_change else "not supported",
        "; ".join(evidence) + f" (threshold: a change of {thresholds.local_change})",
    )

    dominant = {view: compare("n_dominant", view) for view in views}
    grew = [fine > pre for pre, fine in dominant.values()]
    t3 = Verdict(
        "T3",
        "the number of dominant directions grows after fine-tuning",
        _outcome(grew),
        "; ".join(f"{view}: {pre:.0f} → {fine:.0f}" for view, (pre, fine) in dominant.items()),
    )

    enhanced = tables["enhancement"].set_index(["setting", "method"])
    metric, tolerance = task.primary_metric, thresholds.metric_tolerance

    def methods_verdict(setting: str, metric_ok: Callable[[float], bool]) -> tuple[str, str]:
        base = enhanced.loc[(setting, "none")]
        held, evidence = [], []
        for method in METHODS[1:]:
            after = enhanced.loc[(setting, method)]
            change = after[metric] - base[metric]
            held.append(after.log_iw > base.log_iw and metric_ok(change))
            evidence.append(
                f"{method}: log I(W) {base.log_iw:.4g} → {after.log_iw:.4g}, "
                f"{metric} {base[metric]:.3f} → {after[metric]:.3f}"
            )
        return _outcome(held), "; ".join(evidence)

    t4 = Verdict(
        "T4",
        "on pre-trained vectors, enhancement raises isotropy and does not hurt a probe",
        *methods_verdict("pretrained_probe", lambda change: change >= -tolerance),
    )
    t5 = Verdict(
        "T5",
        "on fine-tuned vectors, enhancement raises isotropy but hurts the task",
        *methods_verdict("finetuned_head", lambda change: change < -tolerance),
    )
    return [t1, t2, t3, t4, t5]


def _outcome(held: Sequence[bool]) -> str:
    if all(held):
        return "supported"
    return "mixed" if any(held) else "not supported"


def judge_outliers(summary: Mapping, thresholds: Mapping) -> list[Verdict]:
    """O1 and O2 of Rudman, Chen & Eickhoff (2023) from
    :func:`~.outlier_dimensions.outlier_experiment`'s summary, by the rules of
    docs/analysis.md#outlier-dimensions-o1-o2 (``thresholds``: the ``verdict.*`` settings)."""
    pretrained, kept = summary["pretrained"], summary["kept"]
    needed = thresholds.outlier_survival
    if not pretrained:
        o1 = ("not supported", "the pre-trained model has no outlier dimension")
    else:
        survival = summary["survival"]
        outcome = "supported" if survival >= needed else "mixed" if kept else "not supported"
        o1 = (
            outcome,
            f"pre-trained outliers {_dims(pretrained)}; fine-tuned {_dims(summary['finetuned'])}; "
            f"{len(kept)} of {len(pretrained)} kept ({survival:.0%}; needed {needed:.0%})",
        )

    share = thresholds.one_dimension_share
    full, baseline = summary["full_score"], summary["baseline_score"]
    best_outlier, best_dimension = summary["best_outlier"], summary["best_dimension"]
    scores = f"full model {full:.3f}, majority baseline {baseline:.3f}"
    if not full > baseline:
        o2 = ("not supported", f"{scores}: the model does no better than the baseline")
    else:

        def carries(best: Mapping | None) -> bool:
            return best is not None and best["recovery"] >= share

        def described(best: Mapping | None, what: str) -> str:
            if best is None:
                return f"no {what}"
            return (
                f"best {what}: dim {best['dim']} ({best['variance_ratio']:.3g}x the mean "
                f"variance) scores {best['score']:.3f}, {best['recovery']:.0%} of the gain"
            )

        outcome = (
            "supported"
            if carries(best_outlier)
            else "mixed"
            if carries(best_dimension)
            else "not supported"
        )
        o2 = (
            outcome,
            f"{scores}; {described(best_outlier, 'outlier dimension')}; "
            f"{described(best_dimension, 'dimension')} (needed {share:.0%})",
        )
    return [
        Verdict("O1", "outlier dimensions of pre-training persist after fine-tuning", *o1),
        Verdict("O2", "one outlier dimension carries most of the task", *o2),
    ]


def _dims(dims: Sequence[int], most: int = 8) -> str:
    shown = ", ".join(str(dim) for dim in dims[:most])
    return f"[{shown}{', ...' if len(dims) > most else ''}]" if dims else "none"
