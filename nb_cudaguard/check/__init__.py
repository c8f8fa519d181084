"""%%cudacheck: check the inputs of assert-prone torch ops before they launch (``mode``), with one check per op
(``ops``: the table; ``ops_*``: the checks by op group; ``conditions``: what they are made of), naming the user's
variables and line (``context``); the magics that turn it on (``magics``).

The fast mode (``%cudaguard check on``, the default): ``fast.entries`` (the one table of entry points) wraps the
assert-prone functions and methods of torch while it is on; ``fast.checks_*`` are their checks, made of
``fast.rules`` (violation mask, safe values) folded into ``fast.board`` (a device-side flag, read once per cell)
at a ``fast.sites`` site; ``fast.casts`` tracks float -> index casts; ``fast.mode`` is the ``FastChecker``,
``fast.error`` the error it raises, ``fast.cell`` the end-of-cell read.

Importing this package imports no torch; ``mode``, ``conditions`` and the ``ops`` modules do.
"""
