"""The first error of a compiler's log, as `<source file>:<line>:<column>: error: <message>`.

Each compiler names the source its own way: Oclgrind `input.cl:3:12: error: …`, Intel's CPU
runtime `1:3:12: error: …`, NVIDIA's OpenCL `<kernel>:3:12: error: …`, PoCL `error:
/…/kcache/tempfile_x.cl:3:12: …`, NVRTC `name.cu(3): error: …`. The user's file name replaces the
compiler's name for the main source; a header it includes keeps its own name.
"""

import re
from pathlib import PurePath
from typing import Optional

_ERRORS = [
    # clang-based OpenCL compilers (Oclgrind, Intel, NVIDIA, AMD)
    re.compile(r"^(?P<file>\S*?):(?P<line>\d+):(?:(?P<col>\d+):)? (?:fatal )?error: (?P<msg>.+)$",
               re.M),
    # PoCL puts the word first
    re.compile(r"^error: (?P<file>\S+?):(?P<line>\d+):(?:(?P<col>\d+):)? (?P<msg>.+)$", re.M),
    # NVRTC (EDG front end)
    re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?:catastrophic )?error(?: #[\w-]+)?: (?P<msg>.+)$",
               re.M),
]
_HEADER_SUFFIXES = (".h", ".hpp", ".cuh", ".clh", ".inc")


def _file_name(named: str, source_name: str) -> str:
    """The user's name for the file the compiler named `named`."""
    if named.lower().endswith(_HEADER_SUFFIXES) and PurePath(named).name != source_name:
        return named  # an included header: its own name is the one to look in
    return source_name


def compile_errors(log: str, source_name: str) -> list[str]:
    """Every error of `log` as `file:line[:column]: error: message`, in the log's order."""
    found = []
    for pattern in _ERRORS:
        for match in pattern.finditer(log or ""):
            where = f"{_file_name(match['file'], source_name)}:{match['line']}"
            if match.groupdict().get("col"):
                where += f":{match['col']}"
            found.append((match.start(), f"{where}: error: {match['msg'].strip()}"))
    return [text for _, text in sorted(found)]


def first_error(log: str, source_name: str, fallback: str = "") -> str:
    """The first error with its place, and how many more there are; else the log's first line
    that says "error", else `fallback`."""
    errors = compile_errors(log, source_name)
    if errors:
        more = len(errors) - 1
        return errors[0] + (f" (and {more} more error{'s' if more > 1 else ''}: see "
                            "compile_log.txt)" if more else "")
    lines = [line.strip() for line in (log or "").splitlines() if line.strip()]
    return next((line for line in lines if "error" in line.lower()),
                fallback or (lines[0] if lines else "the compiler gave no reason"))


def pyopencl_build_log(message: str) -> Optional[str]:
    """The device's build log inside a pyopencl build error's text (`Build on <device>:` …
    `(options: …)`), or None where the text has none."""
    match = re.search(r"Build on [^\n]*:\n\n(.*?)(?:\n\n?\(options: |\n\n?\(source saved as |\Z)",
                      message, re.S)
    return match.group(1).strip() + "\n" if match else None
