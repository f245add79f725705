"""What a run is asked to do: the Hydra schema, a kernel's spec turned into a launch plan, the
size rules, how a run measures (`measurement`: tolerance, warm-up, samples, the noise limit), the
safe expression evaluator and where configs and kernel sources are found.

Imports only `runner.errors`: every other layer may read configs, this one reads nothing above
(gemmlab's Hydra launchers are registered by the entry points, never here).
"""
