"""``python -m isotune.submission <sweep or study folder>``: GLUE's submission files and a zip
from each task's chosen run (:mod:`isotune.prediction.submission`)."""

import sys

from isotune.prediction.submission import main

if __name__ == "__main__":
    sys.exit(main())
