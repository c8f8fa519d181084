"""%%cudacheck: check the inputs of assert-prone torch ops before they launch (``mode``), op by op (``checks``),
naming the user's variables and line (``context``); the magics that turn it on (``magics``).

Importing this package imports no torch; ``mode`` and ``checks`` do.
"""
