"""`python -m runner.report`: the command; the work is in runner/results/report.py."""

from runner.results.report import main

if __name__ == "__main__":
    main()
