"""The user's input checked before anything is recorded: each problem is one RunError (Refused
where a sweep counts it as refused) whose message names the value and what is allowed.

- `command_line_error(argv)`: a top-level key the schema does not know (`sise=128`, with a
  did-you-mean), or a `+key` that would be added and then ignored (`+sise=128`,
  `+timing.repaets=3`); `+` adds only a preset group (`+experiment=`, `+search=`,
  `+seed_row/<table>=`) or a flag (`+rerun=true`); and the folders of `kernel_dirs=[…]` and
  GEMMLAB_KERNEL_PATH; and (`kernel_sweep_error`) in a sweep over kernels, a tiling value
  given once (`kernel.params.X=…`, `kernel.defines.X=…`) that some of the swept kernels do not
  have. Before Hydra composes anything, so a sweep says it once.
- `refuse_missing_searchpath()`: a `hydra.searchpath` folder that is not there, refused rather
  than Hydra's two-line UserWarning and a run that goes on without the user's configs.
- `check_kernel_complete(cfg)`: a kernel YAML that leaves out a key every kernel needs, named
  with its file.
- `check_kernel_dirs(cfg.kernel_dirs)`: a folder of `kernel_dirs` or GEMMLAB_KERNEL_PATH that
  is not there (the packaged kernel would run in its place).
- `check_shape(cfg)`: `k=` for a copy or transpose (no K: it would be dropped); a named shape
  with `size=`, `m=`, `n=` or `k=` beside it (one would silently win), but `k=` giving an M x N
  shape its K for an sgemm; a named shape of the wrong rank for the kernel (`shape=1000x1030`
  with an sgemm would take K from `size`).
- `check_kernel_name(cfg)`: a kernel YAML whose `name:` is not its file's name (its runs would
  be recorded under the other name), or a `kernel.name=` that renames a step.
"""

import dataclasses
import difflib
import os
import re
import typing
import warnings
from pathlib import Path
from typing import Iterable, Optional

from omegaconf import MISSING, OmegaConf

from runner.config.paths import CONF_DIR, KERNEL_PATH_VARIABLE
from runner.config.schema import FLAGS, Config, KernelConfig, Operation
from runner.errors import Refused, RunError

PRESETS = ("experiment=", "search=", "seed_row/<table>=")  # groups added with `+`
NOT_GROUPS = {"seeds"}  # conf/seeds/: the seed tables' data (runner.seed_tables), not configs


def _groups(folders: Iterable[Path]) -> set[str]:
    return {child.name for folder in folders if folder.is_dir() for child in folder.iterdir()
            if child.is_dir() and not child.name.startswith((".", "_"))} - NOT_GROUPS


def _searchpath_folders(overrides: list[str]) -> list[Path]:
    """The `file://` folders of a `hydra.searchpath=[…]` override on the command line."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    folders = []
    for text in overrides:
        if not text.lstrip("+").startswith("hydra.searchpath="):
            continue
        try:
            (override,) = OverridesParser.create().parse_overrides([text])
            entries = override.value()
        except Exception:  # Hydra says what is wrong with it
            continue
        for entry in entries if isinstance(entries, list) else [entries]:
            if isinstance(entry, str) and entry.startswith("file://"):
                folders.append(Path(entry[len("file://"):]))
    return folders


def _fields(node) -> Optional[dict]:
    """The fields of a schema dataclass (by name: their types), None for a node of any keys."""
    if not (isinstance(node, type) and dataclasses.is_dataclass(node)):
        return None
    hints = typing.get_type_hints(node)
    return {f.name: hints.get(f.name) for f in dataclasses.fields(node)}


def _unknown_key(key: str) -> Optional[tuple[str, list[str]]]:
    """Where a dotted key leaves the schema: (the part that no dataclass has, its siblings)."""
    node, path = Config, []
    for part in key.split("."):
        fields = _fields(node)
        if fields is None:  # a dict (kernel.params) or a node of any keys (backend): not ours
            return None
        if part not in fields:
            return ".".join([*path, part]), [".".join([*path, name]) for name in fields]
        node, path = fields[part], [*path, part]
    return None


def _suggestion(key: str, known: list[str], value: str) -> str:
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    return f"did you mean {close[0]}={value}? " if close else ""


def command_line_error(argv: list[str]) -> Optional[str]:
    """The first override of `argv` naming a key gemmlab does not have, in one line; None when
    every key is known (Hydra then says what else is wrong, if anything)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import OverrideType

    overrides = [arg for arg in argv if "=" in arg and not arg.startswith("-")]
    groups = _groups([CONF_DIR, *_searchpath_folders(overrides)]) | {"hydra"}
    top = list(_fields(Config))
    parser = OverridesParser.create()
    for text in overrides:
        try:
            (override,) = parser.parse_overrides([text])
        except Exception:  # not an override Hydra can parse: its own message says why
            continue
        if override.is_hydra_override() or override.type == OverrideType.DEL:
            continue
        key = override.key_or_group
        if key == "kernel_dirs" and not override.is_sweep_override():
            folders = override.value()
            try:  # here too, so that a sweep says it once, before any job
                check_kernel_dirs(folders if isinstance(folders, list) else [])
            except RunError as error:
                return str(error)
        value = text.split("=", 1)[1]
        adds = override.type in (OverrideType.ADD, OverrideType.FORCE_ADD)
        presets = ", ".join(f"+{group}" for group in PRESETS)
        flags = ", ".join(f"+{flag}=true" for flag in FLAGS)
        allowed = (f"allowed: the keys {', '.join(top)}; the groups "
                   f"{', '.join(sorted(groups - {'hydra'}))}; with +, a preset ({presets}) or a "
                   f"flag ({flags}); gemmlab --help lists them")
        if "/" in key or override.package is not None:
            if key.split("/")[0] not in groups:
                return f"{text}: there is no config group {key.split('/')[0]!r}; {allowed}"
            continue
        if "." not in key:
            if key in top or key in groups or (adds and key in FLAGS):
                continue
            if key in FLAGS:
                return (f"{text}: {key} is a flag, given with +: +{key}={value} "
                        f"({FLAGS[key]})")
            hint = _suggestion(key, [*top, *sorted(groups - {"hydra"}), *FLAGS], value)
            what = ("gemmlab has no key {!r}, and '+' would add it only to be ignored" if adds
                    else "gemmlab has no key {!r}").format(key)
            return f"{text}: {what}; {hint}{allowed}"
        if not adds:
            continue  # a dotted key to change: the schema's own message names the class
        unknown = _unknown_key(key)
        if unknown is not None:
            missing, siblings = unknown
            hint = _suggestion(missing, siblings, value)
            return (f"{text}: gemmlab has no key {missing!r}, and '+' would add it only to be "
                    f"ignored; {hint}allowed under {missing.rsplit('.', 1)[0]}: "
                    f"{', '.join(name.rsplit('.', 1)[1] for name in siblings)}")
    try:
        check_kernel_dirs()  # GEMMLAB_KERNEL_PATH's folders
    except RunError as error:
        return str(error)
    return kernel_sweep_error(argv)


def kernel_sweep(argv: list[str]):
    """The override of a multirun (`-m`) that sweeps the kernel (`kernel=a,b`, `choice(…)`,
    `glob(…)`), the last one given; None for a single run or a sweep of one kernel's values."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import OverrideType

    if not any(arg in ("-m", "--multirun") for arg in argv):
        return None
    parser = OverridesParser.create()
    found = None
    for text in argv:
        if not text.startswith("kernel="):
            continue
        try:
            (override,) = parser.parse_overrides([text])
        except Exception:  # Hydra says what is wrong with it
            continue
        if override.type == OverrideType.CHANGE and override.package is None:
            found = override if override.is_sweep_override() else None
    return found


def _kernel_names(folders: Iterable[Path]) -> list[str]:
    return sorted({path.stem for folder in folders if (folder / "kernel").is_dir()
                   for path in (folder / "kernel").glob("*.yaml")})


def swept_kernels(argv: list[str]) -> Optional[list[str]]:
    """The kernels a multirun sweeps on the command line, in the sweep's order (a `glob(…)`
    over the kernel YAMLs of conf/ and the `hydra.searchpath` folders); None when the kernel
    is not swept."""
    from hydra.core.override_parser.types import ChoiceSweep, Glob

    override = kernel_sweep(argv)
    if override is None:
        return None
    value = override.value()
    if isinstance(value, ChoiceSweep):
        names = [str(item) for item in value.list]
    elif isinstance(value, Glob):
        names = value.filter(_kernel_names([CONF_DIR, *_searchpath_folders(argv)]))
    else:  # a range of kernels: Hydra says what is wrong with it
        return None
    return list(dict.fromkeys(names))


def _kernel_section(name: str, section: str, folders: list[Path]) -> Optional[dict]:
    """The `params:` (or `defines:`) of kernel `name`'s YAML, the one Hydra would compose
    (conf/ first, then the `hydra.searchpath` folders); None where that cannot be told here (no
    such YAML, one that does not parse, one that composes others with `defaults:`): the run's
    own checks then say what is wrong."""
    import yaml

    sources = [{"schema": "file", "path": str(folder)} for folder in folders]
    path = config_file("kernel", name, sources)
    if path is None:
        return None
    try:
        data = yaml.safe_load(path.read_text())
    except Exception:
        return None
    if not isinstance(data, dict) or "defaults" in data:
        return None
    values = data.get(section) or {}
    return values if isinstance(values, dict) else None


def kernel_sweep_error(argv: list[str]) -> Optional[str]:
    """In a sweep over kernels, a tiling value given once (`kernel.params.X=v`, or a sweep of
    its own `kernel.params.X=a,b`; `kernel.defines.X=…` alike) is each job's: one line when some
    of the swept kernels have no X in their YAML's `params` (`defines`), naming the kernels that
    lack it and those that have it, before any job runs. None when every one has it, or when
    a kernel's YAML cannot be read here (its own refusal comes later)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import OverrideType

    kernels = swept_kernels(argv)
    if not kernels or len(kernels) < 2:
        return None
    folders = [CONF_DIR, *_searchpath_folders(argv)]
    parser = OverridesParser.create()
    kinds = {"params": ("parameter", "parameters"), "defines": ("define", "defines")}
    for text in argv:
        if not text.startswith(("kernel.params.", "kernel.defines.")):
            continue
        try:
            (override,) = parser.parse_overrides([text])
        except Exception:  # Hydra says what is wrong with it
            continue
        if override.type != OverrideType.CHANGE or override.package is not None:
            continue
        _, section, key = override.key_or_group.split(".", 2)
        key = key.split(".")[0]
        sections = {name: _kernel_section(name, section, folders) for name in kernels}
        if any(values is None for values in sections.values()):
            return None
        having = [name for name in kernels if key in sections[name]]
        lacking = [name for name in kernels if key not in sections[name]]
        if not lacking:
            continue
        one, many = kinds[section]
        listed = {name: ", ".join(map(str, values)) or "none" for name, values in sections.items()}
        if len(lacking) == 1:
            name = lacking[0]
            without = f"{name} has no {key} (its {many}: {listed[name]})"
        elif len(lacking) <= 3:
            without = (f"{', '.join(lacking)} have no {key} (their {many}: "
                       + "; ".join(f"{name}: {listed[name]}" for name in lacking) + ")")
        else:  # a glob over many: their names are enough
            without = f"{', '.join(lacking)} have no {key}"
        if having:
            return (f"{text}: kernel.{section}.{key} is a {one} of {', '.join(having)} only; "
                    f"{without}: sweep them apart (-m kernel={','.join(having)} {text}, then "
                    f"-m kernel={','.join(lacking)} without it), or leave {key} out")
        return (f"{text}: none of the swept kernels has a {one} {key}; {without}: leave {key} "
                f"out")
    return None


SEARCHPATH_WARNING = re.compile(r"provider=hydra\.searchpath in ([\w-]+), path=(.*) is not "
                                r"available\.?$")


def refuse_missing_searchpath() -> None:
    """Make Hydra's warning for a `hydra.searchpath` entry that is not there (a folder that does
    not exist, a package that cannot be imported) a RunError, which the command line prints as
    one line: a user's configs that are not found would leave the run composed without them."""
    if getattr(warnings.showwarning, "gemmlab", False):
        return
    shown = warnings.showwarning

    def showwarning(message, category, filename, lineno, file=None, line=None):
        found = SEARCHPATH_WARNING.match(str(message))
        if found is None:
            return shown(message, category, filename, lineno, file, line)
        where, path = found.groups()
        raise RunError(f"hydra.searchpath: {path} is not a folder of configs (from the "
                       f"{where}); allowed: a folder that exists, e.g. "
                       "hydra.searchpath=[file:///path/to/my_conf] holding kernel/<name>.yaml")

    showwarning.gemmlab = True
    warnings.showwarning = showwarning
    warnings.filterwarnings("always", message=r"provider=hydra\.searchpath in ")


def config_file(group: str, choice: Optional[str], sources) -> Optional[Path]:
    """The YAML Hydra composed for `group=choice`: the first file source of the search path
    that has `<group>/<choice>.yaml` (Hydra's own order)."""
    if not choice:
        return None
    for source in sources or ():
        if source.get("schema") == "file":
            path = Path(source.get("path")) / group / f"{choice}.yaml"
            if path.is_file():
                return path
    return None


REQUIRED_KERNEL_KEYS = [f.name for f in dataclasses.fields(KernelConfig) if f.default == MISSING]


def check_resolves(cfg) -> None:
    """Refused, in one line, where a value of the composed config does not resolve (an
    interpolation to a key that is not there, `size='${oops}'`): before anything reads it."""
    from omegaconf.errors import InterpolationResolutionError

    try:
        OmegaConf.to_container(cfg, resolve=True)
    except InterpolationResolutionError as error:
        where = getattr(error, "full_key", None)
        message = (str(getattr(error, "msg", None) or error).strip().splitlines() or [""])[0]
        raise Refused(f"{where + ': ' if where else ''}{message}") from None


def check_kernel_complete(cfg, choice: Optional[str] = None, sources=None) -> None:
    """A RunError naming the kernel's YAML and each key it leaves out (`operation:`, say);
    a size rule's `max_registers` may be left out (the kernel's own cap then)."""
    missing = sorted(key for key in OmegaConf.missing_keys(cfg.kernel)
                     if not re.fullmatch(r"(kernel\.)?size_rules\[\d+\]\.max_registers", key))
    if not missing:
        return
    shown = [key.removeprefix("kernel.") for key in missing]
    path = config_file("kernel", choice, sources)
    where = f"{path} (kernel={choice})" if path else f"the kernel config (kernel={choice})"
    allowed = ""
    if "operation" in shown:
        allowed = f" (allowed: {', '.join(op.value for op in Operation)})"
    raise RunError(f"{where} has no {', '.join(f'`{key}:`' for key in shown)}{allowed}; every "
                   f"kernel YAML sets {', '.join(REQUIRED_KERNEL_KEYS)} and work.bytes "
                   "(docs/adding-a-kernel.md)")


def check_kernel_dirs(configured: Iterable[str] = ()) -> None:
    """A RunError for a folder of `kernel_dirs` or GEMMLAB_KERNEL_PATH that is not there, or
    holds neither opencl/ nor cuda/: the packaged kernel would otherwise run in its place."""
    given = [("kernel_dirs", entry) for entry in configured or ()]
    given += [(KERNEL_PATH_VARIABLE, entry) for entry in
              os.environ.get(KERNEL_PATH_VARIABLE, "").split(os.pathsep) if entry]
    for where, entry in given:
        folder = Path(str(entry)).expanduser()
        if not folder.is_dir():
            problem = "does not exist" if not folder.exists() else "is not a folder"
        elif not ((folder / "opencl").is_dir() or (folder / "cuda").is_dir()):
            problem = "holds neither opencl/ nor cuda/"
        else:
            continue
        shown = f"{entry}" + ("" if str(folder.resolve()) == str(entry) else
                              f" ({folder.resolve()})")
        raise RunError(f"{where}: {shown} {problem}; allowed: folders "
                       "that exist, each holding opencl/ and/or cuda/ with the kernel sources "
                       + ("(os.pathsep-separated, like PATH)" if where == KERNEL_PATH_VARIABLE
                          else "(kernel_dirs=[/path/to/my_kernels])"))


SIZE_KEYS = ("size", "m", "n", "k")


def _size_keys_given(task_overrides: Iterable[str]) -> dict[str, str]:
    """The size keys the command line (or the sweep, for its job) sets, with their values as
    typed: `size=64`, `k=512`; a key deleted with `~` is not given."""
    given = {}
    for text in map(str, task_overrides):
        key, equals, value = text.partition("=")
        if equals and not key.startswith("~") and key.lstrip("+") in SIZE_KEYS:
            given[key.lstrip("+")] = value
    return given


def _shape_values(cfg, shape: str, sources) -> dict:
    """The size keys the shape's YAML sets (`m: 1000, n: 1030`); where the file cannot be read
    here, the keys the composed config holds as numbers rather than `${size}`."""
    import yaml

    path = config_file("shape", shape, sources or [{"schema": "file", "path": str(CONF_DIR)}])
    try:
        data = yaml.safe_load(path.read_text()) if path is not None else None
    except Exception:
        data = None
    if isinstance(data, dict):
        return {key: data[key] for key in SIZE_KEYS if key in data}
    fixed = {key: cfg[key] for key in ("m", "n", "k") if not OmegaConf.is_interpolation(cfg, key)}
    return fixed or {"size": cfg.size}


def check_shape(cfg, shape: Optional[str], task_overrides: Iterable[str] = (),
                sources=None) -> None:
    """Refused: `k=` for a copy or transpose (M x N: K would be dropped); a named shape together
    with `size=`, `m=`, `n=` or `k=` (one of them would be dropped, unseen), but for `k=` with an
    M x N shape and an sgemm, which is how such a shape is given its K; a named shape of the
    wrong rank: M and N only for an sgemm (K would come from `size`), or M, N and K for a copy
    or transpose (K unused)."""
    operation = Operation(getattr(cfg.kernel.operation, "value", cfg.kernel.operation))
    given = _size_keys_given(task_overrides)
    if "k" in given and operation is not Operation.sgemm:
        raise Refused(f"k={given['k']}: {cfg.kernel.name} is a {operation.value}, M x N, which "
                      f"has no K: k would be ignored; allowed: size=<S> (M = N), or m=<M> "
                      f"n=<N>")
    if not shape:
        return
    values = _shape_values(cfg, shape, sources)
    two_d_sgemm = operation is Operation.sgemm and set(values) == {"m", "n"}
    clashing = {key: value for key, value in given.items() if not (key == "k" and two_d_sgemm)}
    if clashing:
        dims = f"{cfg.m}x{cfg.n}" + (f"x{cfg.k}" if operation is Operation.sgemm else "")
        sets = " ".join(f"{key}={value}" for key, value in values.items())
        keys = " ".join(f"{key}={value}" for key, value in clashing.items())
        raise Refused(f"shape={shape} ({sets}) and {keys} both give the problem size, and one "
                      f"would silently win: the run would be {dims}; allowed: one of them, "
                      f"shape={shape} alone or size=, m=, n=, k= without a shape"
                      + (f" (an M x N shape takes an sgemm's K from k=<K>: shape={shape} "
                         f"k=<K>)" if two_d_sgemm else ""))
    if two_d_sgemm and "k" not in given:
        raise Refused(f"shape={shape} gives M x N only ({cfg.m}x{cfg.n}, a copy or transpose "
                      f"shape), and {cfg.kernel.name} is an sgemm, M x N x K: K would be "
                      f"size={cfg.size}; allowed: an M x N x K shape (e.g. shape=1000x1030x999), "
                      f"or add k=<K>")
    if operation is not Operation.sgemm and "k" in values:
        raise Refused(f"shape={shape} gives M x N x K ({cfg.m}x{cfg.n}x{cfg.k}, an sgemm "
                      f"shape), and {cfg.kernel.name} is a {operation.value}, M x N: K would be "
                      f"ignored; allowed: an M x N shape (e.g. shape=1000x1030), or m=… n=… "
                      f"without a shape")


def check_kernel_name(cfg, choice: Optional[str], sources=None,
                      task_overrides: Iterable[str] = ()) -> None:
    """Refused: a kernel YAML whose `name:` is not its file's name (kernel=my_step running as
    `name: matmul_2` would be recorded, compared and reported as matmul_2), or a `kernel.name=`
    on the command line that renames the step."""
    if not choice:
        return
    stem = str(choice).rsplit("/", 1)[-1]
    name = str(cfg.kernel.name)
    if name == stem:
        return
    if any(str(o).partition("=")[0].lstrip("+") == "kernel.name" for o in task_overrides):
        raise Refused(f"kernel.name={name}: kernel={choice}'s runs would be recorded as {name}; "
                      f"allowed: leave kernel.name out (a step is named by its file: "
                      f"kernel/{name}.yaml for a step {name})")
    path = config_file("kernel", choice, sources)
    where = f"{path} (kernel={choice})" if path else f"the kernel config kernel={choice}"
    raise Refused(f"{where} has `name: {name}`, not its file's name: its runs would be recorded "
                  f"as {name}; allowed: `name: {stem}`, or the file renamed to {name}.yaml")
