"""``python -m isotune.aggregate DIR``: the entry point of :mod:`isotune.sweeps.aggregate`, with
the study reports of the study folders it reads (:mod:`isotune.study.report`, a wing above the
sweeps')."""

import sys

from isotune.study.report import write_study_reports
from isotune.sweeps.aggregate import main

if __name__ == "__main__":
    sys.exit(main(study_reports=write_study_reports))
