"""How long explaining an incident takes with a namespace holding a 1 GB CPU tensor and 10,000 names.

The incident is real: ``features[idx]`` with an out-of-range index, run through the simulated GPU so the context
is poisoned and the device assertion is printed, then built into an Incident the way the extension does. The
baseline is the same incident diagnosed with a namespace holding only the failing line's own names, measured in
the same run; the ratio is what the big namespace costs. Target: under 200 ms.

    PYTHONPATH=. python benchmarks/bench_diagnose.py
"""

from __future__ import annotations

import statistics
import time

import torch

from nb_cudaguard import testing
from nb_cudaguard.diagnosis import diagnose
from nb_cudaguard.incident.incident import build_incident
from nb_cudaguard.record.assertions import parse_assertions

RUNS = 15
NAMES = 10_000


def _namespace() -> dict:
    namespace = {"features": torch.zeros(268_435_456), "idx": torch.tensor([3, 270_000_000, 5])}  # 1 GiB float32
    for i in range(NAMES):
        kind = i % 5
        namespace[f"v{i}"] = (
            i
            if kind == 0
            else f"s{i}"
            if kind == 1
            else torch.randn(8)
            if kind == 2
            else [i]
            if kind == 3
            else {"k": i}
        )
    return namespace


def _incident(namespace: dict):
    testing.enable()
    try:
        features, idx = namespace["features"], namespace["idx"]
        features[idx]
    except RuntimeError as exc:
        error = exc
    finally:
        testing.reset()
    text = "\n".join(testing.assertion_line(testing._ADV_INDEX, t) for t in range(4))
    return build_incident(error, output_tail=text, assertions=parse_assertions(text), namespace=namespace)


def _median_ms(incident) -> float:
    times = []
    for _ in range(RUNS):
        started = time.perf_counter()
        diagnosis = diagnose(incident)
        times.append((time.perf_counter() - started) * 1000)
    assert diagnosis.top.family == "advanced_index_out_of_bounds" and diagnosis.top.variable == "idx"
    return statistics.median(times)


def main() -> None:
    namespace = _namespace()
    full = _incident(namespace)
    small = _incident({"features": namespace["features"], "idx": namespace["idx"]})
    baseline, loaded = _median_ms(small), _median_ms(full)
    print(f"names in namespace: {len(namespace):,}; largest tensor: {namespace['features'].nbytes / 2**30:.2f} GiB")
    print(f"baseline (2 names):       {baseline:8.2f} ms (median of {RUNS})")
    print(f"10,000 names + 1 GiB:     {loaded:8.2f} ms (median of {RUNS})")
    print(f"ratio:                    {loaded / baseline:8.2f}x")
    print(f"target < 200 ms:          {'met' if loaded < 200 else 'MISSED'}")


if __name__ == "__main__":
    main()
