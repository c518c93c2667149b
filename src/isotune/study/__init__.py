"""The study wing: interventions compared at equal tuning budgets on several tasks. A study is
arms x tasks; each (task, arm) is a search (:mod:`isotune.search`) with the same budget, and
every arm of a task is reported on the same held-out seeds, so that each comparison with the
baseline arm is paired. Its plan and the checks before any job, what each search gave, the
statistics across arms and tasks, and the study report (docs/study.md).
May import: record, search, sweeps, tracking."""
