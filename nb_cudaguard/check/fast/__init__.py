"""The fast checks (``%cudaguard check on``, the default): device-side checks of the assert-prone entry points, with
no synchronisation per op and one read of the boards per cell. The modules, and how they fit, are listed in
``nb_cudaguard.check``'s docstring and in docs/guard.md ("The fast mode").

Importing this package imports no torch; its modules do.
"""
