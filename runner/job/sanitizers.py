"""Correctness tools around a run's checked launch: NVIDIA's compute-sanitizer for CUDA,
Oclgrind (a simulator) for OpenCL. The worker runs under the tool; its report is read here."""

import re
from typing import Optional

COMPUTE_SANITIZER_TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")


def sanitizer_of(cfg) -> Optional[str]:
    tool = cfg.check.get("sanitizer")
    return getattr(tool, "value", tool) or None


# compute-sanitizer starts every report line with "========= "; the first line of a finding is
# unindented after that prefix, its details (addresses, the stack) are indented.
_FINDING = re.compile(r"^=========\s(?!\s)(?!COMPUTE-SANITIZER|ERROR SUMMARY|RACECHECK SUMMARY|"
                      r"Program hit|Target application|Saved host backtrace|LEAK SUMMARY)(.+)$",
                      re.M)
_OCLGRIND = re.compile(r"^(.*(?:Invalid (?:read|write)|data race|Uninitialized|out of bounds|"
                       r"[Ee]rror).*)$", re.M)


def sanitizer_finding(tool: str, report: str, source_name: str = "") -> Optional[str]:
    """The first thing the tool reported, with the kernel line it names; None when clean."""
    if tool in COMPUTE_SANITIZER_TOOLS:
        summary = re.search(r"ERROR SUMMARY: (\d+) error", report)
        races = re.search(r"RACECHECK SUMMARY: (\d+) hazard", report)
        if (summary is None or summary.group(1) == "0") and \
                (races is None or races.group(1) == "0"):
            return None
        found = _FINDING.search(report)
        first = found.group(1).strip() if found else "see the report"
        where = re.search(r"^=========\s+at (.+)$", report[found.end():] if found else "", re.M)
        count = f" ({summary.group(1)} errors)" if summary and summary.group(1) != "0" else ""
        return first + (f" at {where.group(1).strip()}" if where else "") + count
    found = _OCLGRIND.search(report)
    if found is None:
        return None
    details = "\n".join(report[found.end():].splitlines()[:8])
    line = re.search(r"At line (\d+) \(column (\d+)\) of (\S+?):?$", details, re.M)
    entity = re.search(r"Entity: (.+)$", details, re.M)
    where = (f" at line {line.group(1)}, column {line.group(2)} of "
             f"{source_name or line.group(3)}") if line else ""
    by = f" by work-item {entity.group(1).strip()}" if entity else ""
    total = len(_OCLGRIND.findall(report))
    return found.group(1).strip() + where + by + (f" ({total} reports)" if total > 1 else "")
