"""``python -m isotune.aggregate DIR``: the entry point of :mod:`isotune.sweeps.aggregate`, with
the study reports of the study folders it reads and the stated runs their tables leave out
(:mod:`isotune.study.report`, a wing above the sweeps')."""

import sys

from isotune.study.report import stated_runs_held_back, write_study_reports
from isotune.sweeps.aggregate import main

if __name__ == "__main__":
    sys.exit(main(study_reports=write_study_reports, held_back=stated_runs_held_back))
