"""Reading recorded runs back: the ladder and sweep reports (`report`: the command and
`build_report`; `report_page`: the Markdown; `report_plots`: the PNGs), the seeds' tables, the
tuning page, and the helpers that turn an MLflow run into a table row.

Reads MLflow only; never compiles or runs a kernel.
"""
