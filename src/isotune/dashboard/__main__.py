"""``python -m isotune.dashboard``: the entry point of :mod:`isotune.dashboard.cli`."""

import sys

from isotune.dashboard.cli import main

if __name__ == "__main__":
    sys.exit(main())
