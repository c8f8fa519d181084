"""%%cudacheck: check the inputs of assert-prone torch ops before they launch (``mode``), with one check per op
(``ops``: the table; ``ops_*``: the checks by op group; ``conditions``: what they are made of), naming the user's
variables and line (``context``); the magics that turn it on (``magics``).

Importing this package imports no torch; ``mode``, ``conditions`` and the ``ops`` modules do.
"""
