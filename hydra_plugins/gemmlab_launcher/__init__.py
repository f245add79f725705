"""gemmlab's Hydra launchers (`hydra/launcher: gemmlab`, gemmlab_launcher.py).

Hydra finds plugins by scanning the `hydra_plugins` namespace package, and importing a launcher's
module stores its config. An editable install's import hook hides this folder from that scan, so
the entry points (runner/app.py, runner/inspect/command.py) call `register()` too: Hydra's own
`Plugins.register`, never from a lower floor (the config schema knows no launcher).
"""


def register() -> None:
    """Register gemmlab's launchers with Hydra, and store their configs (by importing them)."""
    from hydra.core.plugins import Plugins

    from hydra_plugins.gemmlab_launcher.gemmlab_launcher import GemmlabLauncher
    from hydra_plugins.gemmlab_launcher.slurm_launcher import GemmlabSlurmLauncher

    Plugins.instance().register(GemmlabLauncher)
    Plugins.instance().register(GemmlabSlurmLauncher)
