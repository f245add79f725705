"""Reading recorded runs back: the ladder and sweep report pages, the seeds' tables, the tuning
page, and the helpers that turn an MLflow run into a table row.

Reads MLflow only; never compiles or runs a kernel.
"""
