"""``python -m isotune.env [FOLDER ...]``: the entry point of :mod:`isotune.sweeps.environment`."""

import sys

from isotune.sweeps.environment import main

if __name__ == "__main__":
    sys.exit(main())
