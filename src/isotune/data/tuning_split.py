"""A tuning split: part of the train set held out to choose on, so that dev reports on data that
chose nothing.

With ``data.tuning_split=true`` a run trains on train minus a split carved from it and evaluates
on that split: the dev set that chose a search's trial would flatter it. The split is stratified
by label (a regression's by quantile bins), drawn with its own seed (``data.tuning_split_seed``)
so every trial and seed sees the same one, and the dev set's size unless
``data.tuning_split_size`` says otherwise. Examples with identical text are held out or kept
together (RTE's train has exact duplicates, which would score tuning runs on trained examples);
only RTE's split changed with that rule (:data:`RULE_CHANGE`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from isotune.data.reading import TaskSplits
from isotune.errors import IsotuneError

REGRESSION_BINS = 5  # quantile bins that stratify a regression's scores
OFF = "data.tuning_split=false (choose on dev)"
# What changed the split a seed draws, for a search continued from a folder tuned before it
RULE_CHANGE = (
    "the tuning split keeps train examples with identical text on one side (a duplicate held "
    "out and trained on scored the tuning runs on an example they had seen), so a train set "
    "with duplicates (RTE's) is split otherwise than before that rule"
)


@dataclass(frozen=True)
class TuningSplit:
    """Indices into train: ``held`` (the tuning split) and ``kept`` (what trains), both sorted."""

    held: tuple[int, ...]
    kept: tuple[int, ...]
    seed: int

    @property
    def sha256(self) -> str:
        """The digest of the held indices: two records name the same split when they agree."""
        return hashlib.sha256(",".join(map(str, self.held)).encode()).hexdigest()

    def describe(self) -> str:
        """What a record says the tuning runs evaluated on."""
        return f"tuning split of train (n={len(self.held)}, seed {self.seed}, sha256 {self.sha256})"


def tuning_split_of(splits: TaskSplits, size: int | float | None, seed: int) -> TuningSplit:
    """The tuning split of the train examples of a task's ``splits``: ``size`` as
    :func:`split_size` reads it (None: the size of the dev split that chooses)."""
    task, train = splits.task, splits["train"]
    dev = len(splits[task.primary_split]) if size is None else 0
    count = split_size(size, len(train), dev)
    labels = [example["label"] for example in train]
    texts = [tuple(example[field] for field in task.text_fields) for example in train]
    return carve_tuning_split(labels, count, seed, task.is_regression, task.labels, texts)


def check_continued_on_this_split(split: TuningSplit, recorded: Mapping[Path, str]) -> None:
    """Refuse to continue a search whose runs evaluated on a tuning split of ``split``'s size and
    seed but of other examples (``recorded``: each run's results.json and its
    ``data.evaluated_on``): its trials would be chosen on two splits and ranked as one. Runs on
    dev, or on a split of another size or seed, are not this check's to judge."""
    same_draw = f"tuning split of train (n={len(split.held)}, seed {split.seed}, sha256 "
    for path, evaluated_on in recorded.items():
        if evaluated_on.startswith(same_draw) and evaluated_on != split.describe():
            raise IsotuneError(
                f"{path} evaluated on {evaluated_on}, and this version draws sha256 "
                f"{split.sha256} for the same size and seed: {RULE_CHANGE}. The folder's search "
                "was tuned before that (or its train file changed since), and continuing it "
                "would rank trials chosen on the new split against trials chosen on the old. "
                "Fix: start the search anew in a folder of its own (another "
                "hydra.sweeper.study_name or hydra.sweep.dir=...), or finish this one at the "
                "commit its runs name (results.json's provenance: git checkout <commit>)."
            )


def split_size(size: int | float | None, train: int, dev: int) -> int:
    """The number of train examples to hold out: ``dev`` when ``size`` is None, a count given as
    an integer, a fraction of ``train`` given as a number between 0 and 1."""
    if size is None:
        count = dev
    elif isinstance(size, bool) or not isinstance(size, int | float) or size <= 0:
        count = -1
    elif isinstance(size, float) and size < 1:
        count = round(size * train)
    else:
        count = int(size) if float(size).is_integer() else -1
    if count < 1:
        raise IsotuneError(
            f"data.tuning_split_size={size!r} is no size of a tuning split. Fix: null (the dev "
            "set's size), a count (data.tuning_split_size=300) or a fraction of train "
            "(data.tuning_split_size=0.1)."
        )
    if count >= train:
        given = "the dev set's size" if size is None else f"data.tuning_split_size={size!r}"
        raise IsotuneError(
            f"A tuning split of {count} examples ({given}) leaves nothing of the {train} train "
            "examples to train on. Fix: a smaller data.tuning_split_size, a count "
            f"or a fraction (data.tuning_split_size=0.1), or {OFF}."
        )
    return count


def strata(labels: Sequence[float], regression: bool) -> np.ndarray:
    """Each example's stratum: its class, or for a regression its quantile bin of the scores
    (equal counts, ties broken by position, so the bins do not depend on the seed)."""
    values = np.asarray(labels, dtype=float)
    if not regression:
        return values.astype(int)
    order = np.argsort(values, kind="stable")
    bins = np.empty(len(values), dtype=int)
    bins[order] = np.arange(len(values)) * REGRESSION_BINS // len(values)
    return bins


def quotas(counts: np.ndarray, size: int) -> np.ndarray:
    """How many of each stratum's ``counts`` the split holds: proportional, the remainder going to
    the largest fractional parts (the first stratum on a tie), so the sizes add up to ``size``."""
    exact = counts * size / counts.sum()
    taken = np.floor(exact).astype(int)
    remainder = size - taken.sum()
    by_fraction = sorted(range(len(counts)), key=lambda i: (-(exact[i] - taken[i]), i))
    taken[by_fraction[:remainder]] += 1
    return taken


def carve_tuning_split(
    labels: Sequence[float],
    size: int,
    seed: int,
    regression: bool,
    names: Sequence[str] | None = None,
    texts: Sequence[Hashable] | None = None,
) -> TuningSplit:
    """Hold ``size`` of the examples with ``labels`` out, stratified, examples of equal ``texts``
    (their text fields; None: every example's own) on one side; refused when a class of train would
    be missing from either side (``names``: the classes' labels, for the message). Each group of
    identical examples counts in its first's stratum; groups are drawn in a random order and held
    out while they fit the stratum's quota (so a few fewer than ``size`` where only large groups
    remain). Groups of one are drawn exactly as examples were before groups were kept together: a
    train set without duplicates gets the same split, bit for bit."""
    copies = identical_groups(texts if texts is not None else range(len(labels)))
    first_of = np.empty(len(labels), dtype=int)
    for group in copies:
        first_of[group] = group[0]
    groups = strata(labels, regression)[first_of]
    index = np.arange(len(labels))
    present = np.unique(groups)
    counts = np.array([(groups == g).sum() for g in present])
    taken = quotas(counts, size)
    if not regression:
        _check_every_class_on_both_sides(present, counts, taken, size, names)
    members_of = {group[0]: group for group in copies}
    rng = np.random.default_rng(seed)
    held: list[int] = []
    for group, count in zip(present, taken, strict=True):
        left = int(count)
        for first in rng.permutation(np.flatnonzero((groups == group) & (first_of == index))):
            if left == 0:
                break
            if len(members_of[first]) <= left:
                held.extend(members_of[first])
                left -= len(members_of[first])
    held_set = set(held)
    kept = tuple(i for i in range(len(groups)) if i not in held_set)
    return TuningSplit(held=tuple(sorted(held)), kept=kept, seed=seed)


def identical_groups(texts: Sequence[Hashable]) -> list[list[int]]:
    """The positions of equal ``texts``, each group in order, the groups by their first."""
    positions: dict[Hashable, list[int]] = {}
    for i, text in enumerate(texts):
        positions.setdefault(text, []).append(i)
    return list(positions.values())


def _check_every_class_on_both_sides(
    classes: np.ndarray,
    counts: np.ndarray,
    taken: np.ndarray,
    size: int,
    names: Sequence[str] | None,
) -> None:
    for group, count, held in zip(classes, counts, taken, strict=True):
        label = names[group] if names is not None else str(group)
        if held == 0:
            side, fix = "the tuning split", "a larger data.tuning_split_size"
        elif held == count:
            side, fix = "the remaining train", "a smaller data.tuning_split_size"
        else:
            continue
        raise IsotuneError(
            f"Class {label!r} ({count} of the train examples) would be missing from {side} "
            f"(a stratified split of {size}): a run would never "
            f"{'evaluate' if held == 0 else 'train'} on it. Fix: {fix}, or {OFF}."
        )
