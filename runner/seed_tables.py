"""`python -m runner.seed_tables`: the command; the work is in runner/results/seed_tables.py."""

from runner.results.seed_tables import main

if __name__ == "__main__":
    main()
