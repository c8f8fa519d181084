"""Fold a device assertion's repeats in the notebook: the first few lines of a cell, then one line that says so.

A GPU prints one ``... Assertion `cond` failed.`` line per failing thread: an embedding row out of range prints one
per thread that copies a column of it, a segmentation mask's 255 "void" pixels one per pixel. That is hundreds or
thousands of lines above the traceback and the report that explains them, which then take screens to reach.
ipykernel forwards what C writes to fds 1 and 2 into the cell's output from a thread of its own; past the first
``keep`` assertion lines of a cell, that thread's text passes on without them, and one line says that more were
printed. Nothing is lost: the capture still reads every line (the report counts them, "printed 1024x"), and
ipykernel writes the raw bytes to the process's own stderr as well (a terminal, the server's log).

Only C-level output is folded, never what Python code prints. A line can arrive in two pieces (ipykernel reads the
pipe 1000 bytes at a time): once a cell is folding, the unfinished last line of a piece waits for the rest, so a
folded line is never half shown; before that a piece passes on as it came, so a progress bar is never held back.
"""

from __future__ import annotations

import threading

from nb_cudaguard.record.assertions import is_assertion_line

NOTICE = "nb_cudaguard: the GPU printed more lines like these; they are not shown here (the report counts them).\n"


class Fold:
    """One stream's folding, per cell: ``pass_on`` is called by the thread that forwards C-level output."""

    def __init__(self, keep: int) -> None:
        self.keep = keep  # assertion lines shown per cell; 0 shows them all
        self._lock = threading.Lock()
        self._shown = 0
        self.folded = 0  # lines left out in this cell
        self._partial = ""

    def begin(self) -> None:
        with self._lock:
            self._shown = self.folded = 0
            self._partial = ""

    def pass_on(self, text: str) -> str:
        """What of ``text`` the notebook shows."""
        if self.keep <= 0 or (not self.folded and "ssert" not in text):
            return text
        with self._lock:
            *complete, last = (self._partial + text).split("\n")
            self._partial = ""
            shown = []
            for line in complete:
                if not is_assertion_line(line):
                    shown.append(line + "\n")
                elif self._shown < self.keep:
                    self._shown += 1
                    shown.append(line + "\n")
                else:
                    if not self.folded:
                        shown.append(NOTICE)
                    self.folded += 1
            if self.folded and last:
                self._partial = last  # wait for the rest of the line: it may be one to leave out
            else:
                shown.append(last)
            return "".join(shown)

    def end(self) -> str:
        """The unfinished line held back, if any (the cell is over: it is shown as it is), and no more folding."""
        with self._lock:
            rest, self._partial = self._partial, ""
            self.folded = 0
            self._shown = 0
        return rest
