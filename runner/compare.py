"""`python -m runner.compare A B`: the command; the work is in runner/results/compare.py."""

import sys

from runner.results.compare import main

if __name__ == "__main__":
    sys.exit(main())
