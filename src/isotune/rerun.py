"""``python -m isotune.rerun SWEEP_DIR``: the entry point of :mod:`isotune.sweeps.rerun`."""

import sys

from isotune.sweeps.rerun import main

if __name__ == "__main__":
    sys.exit(main())
