"""What a compiled kernel is: PTX, SASS, registers and the instruction mix.

`program` makes a run's inspection files, `sass` reads disassembly, `command` is
`python -m runner.inspect`. Imports `runner.config` and `runner.backends`.
"""
