"""Where gemmlab keeps what it can make again faster than it can make it the first time."""

import os
from pathlib import Path
from typing import Optional

OFF = ("0", "off", "false", "no")


def cache_path(env: str, *default: str) -> Optional[Path]:
    """`$env` where it names a path, else $XDG_CACHE_HOME/gemmlab/<default…>
    (~/.cache/gemmlab/…); None where `$env` is 0 or off."""
    configured = os.environ.get(env, "")
    if configured.lower() in OFF:
        return None
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base, "gemmlab", *default)
