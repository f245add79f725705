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


# racecheck's hazard report (`--racecheck-report all` or `hazard`): a header, then the two
# accesses in the order they happened, each with its source line when the code has line info
# (NVRTC's -lineinfo: runner/backends/nvrtc.py):
#   ========= Error: Potential WAR hazard detected at __shared__ 0x580 in block (0,2,0) :
#   =========     Read Thread (3,1,0) at matmul_2+0x4d0 in matmul_2.cu:31
#   =========     Write Thread (3,0,0) at matmul_2+0x2b0 in matmul_2.cu:27
# (older releases: "ERROR:"/"WARN:(Warp Level Programming)", "at 0x170 in race.cu:4:test(int*)").
_HAZARD = re.compile(r"^=========\s(?:(?:Error|ERROR|Warning|WARN)\s*:\s*)?(?P<note>\(.*?\)\s*)?"
                     r"Potential (?P<kind>\w+) hazard detected at (?P<space>\S+) (?P<address>\S+)"
                     r"(?: in block \((?P<block>[^)]*)\))?.*$", re.M)
_ACCESS = re.compile(r"^=========\s+(?P<what>Read|Write)\b\s*(?:Thread\s*\((?P<thread>[^)]*)\))?"
                     r".*?\sat (?P<at>.+?)\s*$", re.M)
# Its analysis report (`all` or `analysis`), one per pair of instructions:
#   ========= Error: Race reported between Read access at matmul_2+0x4d0 in matmul_2.cu:31
#   =========     and Write access at matmul_2+0x2b0 in matmul_2.cu:27 [1024 hazards]
_RACE = re.compile(r"^=========\s.*?Race reported between (?P<first>Read|Write) access at "
                   r"(?P<first_at>.+?)\s*\n=========\s+and (?P<second>Read|Write) access at "
                   r"(?P<second_at>.+?)(?:\s*\[(?P<count>\d+) hazards?\])?\s*$", re.M)
# "matmul_2+0x4d0 in matmul_2.cu:31", "0x170 in ./race.cu:4:test(int*)": the file and line.
_SOURCE_LINE = re.compile(r"\sin (?P<file>\S+?):(?P<line>\d+)(?::.*)?$")


def _where(at: str) -> str:
    """An access's place: file:line where the report has it, else what it names (an offset)."""
    found = _SOURCE_LINE.search(" " + at)
    return f"{found['file']}:{found['line']}" if found else at.strip()


def _racecheck_finding(report: str) -> Optional[str]:
    """The first hazard: its kind and the source line of each of its two accesses, earlier
    first; with how many hazards and how many other pairs of lines the report holds."""
    pairs: dict[tuple, None] = {}
    first = None
    for header in _HAZARD.finditer(report):
        following = report[header.end():].split("\n", 3)[1:3]  # the two lines after it
        accesses = [_ACCESS.match(line) for line in following]
        if len(accesses) < 2 or not all(accesses):
            continue
        pair = tuple((a["what"].lower(), _where(a["at"])) for a in accesses)
        pairs.setdefault((header["kind"], pair))
        if first is None:
            first = header, accesses
    if first is not None:
        header, accesses = first
        block = f" in block ({header['block']})" if header["block"] is not None else ""
        note = f" {header['note'].strip()}" if header["note"] else ""
        sides = ", then ".join(
            f"{a['what'].lower()} at {_where(a['at'])}"
            + (f" by thread ({a['thread']})" if a["thread"] else "") for a in accesses)
        head = (f"{header['kind']} hazard{note} on {header['space']} {header['address']}{block}: "
                f"{sides}")
    else:
        race = _RACE.search(report)
        if race is None:
            return None
        head = (f"race between a {race['first'].lower()} at {_where(race['first_at'])} and a "
                f"{race['second'].lower()} at {_where(race['second_at'])}")
        pairs = {match.group(0): None for match in _RACE.finditer(report)}
    total = re.search(r"RACECHECK SUMMARY: (\d+ hazards? \w+)", report)  # "3 hazards displayed"
    counts = [total.group(1)] if total else []
    if len(pairs) > 1:
        counts.append(f"{len(pairs) - 1} more pair{'s' if len(pairs) > 2 else ''} of lines "
                      "in the report")
    return head + (f" ({'; '.join(counts)})" if counts else "")


def sanitizer_finding(tool: str, report: str, source_name: str = "",
                      partial: bool = False) -> Optional[str]:
    """The first thing the tool reported, with the kernel line it names; None when clean.
    `partial`: a report cut short (the tool was stopped), which has no summary to go by."""
    if tool in COMPUTE_SANITIZER_TOOLS:
        summary = re.search(r"ERROR SUMMARY: (\d+) error", report)
        races = re.search(r"RACECHECK SUMMARY: (\d+) hazard", report)
        if not partial and (summary is None or summary.group(1) == "0") and \
                (races is None or races.group(1) == "0"):
            return None
        if tool == "racecheck":
            found_race = _racecheck_finding(report)
            if found_race or partial:
                return found_race
        found = _FINDING.search(report)
        if found is None and partial:
            return None
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
