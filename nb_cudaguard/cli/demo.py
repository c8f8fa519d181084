"""``nb-cudaguard demo``: what a user sees when a GPU notebook hits a device-side assert, with and without us.

Runs in a separate, real kernel, so that a demo never poisons the caller's session. Without a GPU the kernel
uses the fault injection (``nb_cudaguard.testing``); with one, the same cells run on the real device.
"""

from __future__ import annotations

import re
import sys
import textwrap
from collections.abc import Callable

from nb_cudaguard.cli.kernelsession import CellResult, KernelSession

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

DEMO_CELLS = [
    (
        "Load the extension. No GPU here, so a simulated one stands in for it.",
        "%load_ext nb_cudaguard\n"
        "import torch\n"
        "if not torch.cuda.is_available():\n"
        "    %cudaguard simulate on\n"
        "device = 'cuda' if torch.cuda.is_available() else 'cpu'",
    ),
    (
        "The minutes-long setup a notebook builds: data, a model, an optimizer.",
        "import torch.nn as nn\n"
        "torch.manual_seed(0)\n"
        "X = torch.randn(256, 20, device=device)\n"
        "y = torch.randint(0, 5, (256,), device=device)\n"
        "model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 5)).to(device)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "print('setup done')",
    ),
    (
        "A few training steps: everything works.",
        "for step in range(20):\n"
        "    loss = nn.functional.cross_entropy(model(X), y)\n"
        "    opt.zero_grad(); loss.backward(); opt.step()\n"
        "print(f'loss {loss.item():.3f}')",
    ),
    (
        "New labels arrive numbered 1..5 instead of 0..4: the GPU asserts.",
        "y_new = y + 1\nloss = nn.functional.cross_entropy(model(X), y_new)\nprint(loss.item())",
    ),
    (
        "The context is poisoned: even an innocent cell now fails.",
        "print(model(X).sum().item())",
    ),
]


def _render(result: CellResult) -> str:
    parts = []
    for output in result.outputs:
        if output["output_type"] == "stream":
            parts.append(output["text"].rstrip("\n"))
        elif output["output_type"] == "error":
            parts.append(f"{output['ename']}: {output['evalue'].splitlines()[0] if output['evalue'] else ''}")
        elif "text/plain" in output.get("data", {}):
            parts.append(output["data"]["text/plain"])
    return _ANSI.sub("", "\n".join(p for p in parts if p))


def run_demo(write: Callable[[str], object] = print, cells=None) -> list[CellResult]:
    results = []
    write("nb_cudaguard demo: a real Jupyter kernel, a tiny training setup, and a device-side assert.\n")
    with KernelSession() as kernel:
        for number, (caption, code) in enumerate(cells or DEMO_CELLS, 1):
            write(f"--- {number}. {caption}")
            write(textwrap.indent(code, "    >>> ", lambda line: True))
            result = kernel.run(code)
            results.append(result)
            shown = _render(result)
            if shown:
                write(textwrap.indent(shown, "    "))
            write("")
    write("That report is what %load_ext nb_cudaguard adds to a notebook. Try `nb-cudaguard explain LOGFILE` on a log.")
    return results


def main() -> int:
    results = run_demo(lambda text: print(text, flush=True))
    poisoned = any("POISONED" in _render(r) for r in results)
    return 0 if poisoned else 1


if __name__ == "__main__":
    sys.exit(main())
