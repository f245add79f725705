"""`python -m runner.inspect`: see runner/inspect/command.py."""

import sys

from runner.inspect.command import main

sys.exit(main())
