"""``python -m isotune.aggregate DIR``: the entry point of :mod:`isotune.sweeps.aggregate`."""

import sys

from isotune.sweeps.aggregate import main

if __name__ == "__main__":
    sys.exit(main())
