"""The sweep's report on its parent run: the page and plots of runner/results/report.py built
from the sweep's jobs (the best configuration per step and size), logged under `report/`."""

import sys
import tempfile
from pathlib import Path

from runner.sweep.summary import SweepSummary


def log_report(client, parent: str, summary: SweepSummary, name: str, uri: str) -> None:
    """The report's page and plots of this sweep (best configuration per step and size)."""
    from runner.results.report import build_report

    with tempfile.TemporaryDirectory() as folder:
        written = build_report(summary.runs, name, Path(folder), uri,
                               name="sweep",
                               command="python -m runner " + " ".join(sys.argv[1:]))
        for path in written:
            client.log_artifact(parent, str(path), "report")
