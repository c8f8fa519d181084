"""Regenerate ``nb_cudaguard/data/device_asserts.json`` from the shared reference.

The reference (``../shared/reference/torch_cuda_asserts.json``) was read out of the device code of official
PyTorch wheels; it carries its own family tags. We keep only what the matcher needs, and translate the
tags into the project's one vocabulary (docs/architecture.md) so that nothing downstream sees two names for
one cause.

    python tools/build_catalog.py [PATH_TO_REFERENCE_JSON]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SOURCE = ROOT.parent / "shared" / "reference" / "torch_cuda_asserts.json"
TARGET = ROOT / "nb_cudaguard" / "data" / "device_asserts.json"

FAMILY = {
    "label_out_of_range": "label_out_of_range",
    "embedding_index": "embedding_index_out_of_range",
    "index_out_of_range": "advanced_index_out_of_bounds",
    "gather_scatter_index": "gather_scatter_index",
    "bce_input_range": "bce_input_range",
    "bce_target_range": "bce_target_range",
    "probability_invalid": "multinomial_invalid_probs",
}


def translate(entry: dict) -> dict:
    family = FAMILY.get(entry["family"], "other")
    condition = entry["condition"]
    if entry["family"] == "async_assert":
        family = "other"
    if "Indexing.cu" in entry["file"] and "dstIndex" in condition:
        family = "advanced_index_out_of_bounds"
    return {
        "file": entry["file"],
        "kernels": [k.strip() for k in entry["kernel_or_function"].split(",")],
        "condition": condition,
        "family": family,
        "reference_family": entry["family"],
        "ops": entry["python_ops"],
        "cause": entry["cause"],
        "fix": entry["fix"],
        "user_facing": entry["user_facing"],
    }


def main(argv: list[str]) -> int:
    source = Path(argv[1]) if len(argv) > 1 else DEFAULT_SOURCE
    entries = [translate(e) for e in json.loads(source.read_text())]
    TARGET.write_text(json.dumps(entries, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(entries)} assertions to {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
