"""What a person sees: a run's one-line summary and one-line failures, progress bars, and how
Ctrl-C and SIGTERM end a run.
"""
