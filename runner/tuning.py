"""`python -m runner.tuning`: the command; the work is in runner/results/tuning.py."""

from runner.results.tuning import main

if __name__ == "__main__":
    main()
