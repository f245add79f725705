"""Each config file's YAML parsed once per process, for the many compositions of a multirun.

Hydra composes every job's config from the files again (a grid sweep: all of the batch before
its first job), and about a third of a composition was OmegaConf.load parsing the same YAML
(pure-Python PyYAML, then the nodes built; kernel/matmul_9.yaml alone took 20 ms of a 100 ms
composition). Hydra's config sources (file:// and pkg://) read each file through
`OmegaConf.load(open file)`; this replaces that, in the whole process, with a version that reads
the text, loads it as before only when that text was not seen before, and returns a deep copy of
the kept config (a quarter of the cost of a load). The copy is the point: Hydra changes the
configs it loads (takes the defaults list out, sets flags, merges them into the composed config
without copying), so each load must get an object of its own, as a fresh load would be. Keyed
on the text itself, an edited file is loaded again. A path (not an open file) is loaded as
OmegaConf always does.

`GemmlabLauncher.setup` (hydra_plugins/gemmlab_launcher) installs it: only a multirun composes
many configs.
"""

import copy
import io
import threading
from typing import IO, Any

from omegaconf import DictConfig, ListConfig, OmegaConf

KEPT_TEXTS = 512  # far more than conf/ and Hydra's own configs hold; edits add entries

_load_uncached = OmegaConf.load
_parsed_by_text: dict[str | bytes, DictConfig | ListConfig] = {}
_lock = threading.Lock()


def _load(file_: Any) -> DictConfig | ListConfig:
    if not callable(getattr(file_, "read", None)):
        return _load_uncached(file_)
    text = file_.read()
    with _lock:
        parsed = _parsed_by_text.get(text)
    if parsed is None:
        parsed = _load_uncached(_stream_like(file_, text))  # a bad file raises here, as before
        with _lock:
            if len(_parsed_by_text) >= KEPT_TEXTS:
                _parsed_by_text.clear()
            _parsed_by_text[text] = parsed
    return copy.deepcopy(parsed)  # never the kept one: the caller may change what it gets


def _stream_like(file_: IO, text: str | bytes) -> IO:
    """The text as a stream named as the file was, so a YAML error still names the file."""
    stream: IO = io.StringIO(text) if isinstance(text, str) else io.BytesIO(text)
    name = getattr(file_, "name", None)
    if isinstance(name, str):
        stream.name = name  # type: ignore[misc]
    return stream


def install() -> None:
    OmegaConf.load = staticmethod(_load)  # type: ignore[method-assign]


def uninstall() -> None:
    OmegaConf.load = staticmethod(_load_uncached)  # type: ignore[method-assign]
    with _lock:
        _parsed_by_text.clear()


def installed() -> bool:
    return OmegaConf.load is _load
