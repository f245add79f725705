"""`gemmlab <overrides>`: the console script, the same as `python -m runner <overrides>`.

`gemmlab --version` answers with gemmlab's version (Hydra's own `--version` would name Hydra's)
and does not compose any config; every other argument goes to the Hydra app unchanged.
"""

import sys


def main() -> None:
    if "--version" in sys.argv[1:]:
        from runner import __version__

        print(f"gemmlab {__version__}")
        return
    from runner.app import main as hydra_app

    hydra_app()
