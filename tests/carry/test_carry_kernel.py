"""Carrying CPU values across the restart, in real kernels: what is carried equals the original, what holds
non-CPU memory or shares objects is replayed, and anything that goes wrong falls back to replay."""

from __future__ import annotations

import os
import re

import pytest
from kernel_helpers import ENV, run_ok, value

from nb_cudaguard.cli.kernelsession import KernelSession

pytestmark = [pytest.mark.kernel]


@pytest.fixture
def kernel():
    with KernelSession(extra_env=ENV) as session:
        run_ok(session, "%load_ext nb_cudaguard")
        yield session


NOTEBOOK = [
    "import time\nimport types\nimport numpy as np\nimport torch\nframe_was_there = 'frame' in globals()",
    "time.sleep(1.0)\nrng = np.random.default_rng(0)\nlegacy = np.random.RandomState(1)\n"
    "frame = {'x': rng.random(200_000), 'y': rng.integers(0, 5, 200_000) + legacy.randint(0, 2)}",
    "time.sleep(0.2)  # slower than carrying what it builds, so that the plan carries it\n"
    "tokenizer = types.SimpleNamespace(vocab={w: i for i, w in enumerate('abcdefg')}, lower=True)\n"
    "config = {'lr': 0.1, 'layers': [8, 4], 'name': 'run-1'}\nfeatures = torch.arange(12.0).reshape(3, 4)",
    "torch.manual_seed(0)\nmodel = torch.nn.Linear(4, 5)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)",
    "on_device = torch.ones(3, device='meta')",
    "alias_a = alias_b = [1, 2]",
    "%cudaguard simulate on",
]
FAILING = (
    "out = model(features)\nassert frame['x'].shape[0] and tokenizer.vocab and config and on_device.shape\n"
    "assert rng is not None and legacy is not None\n"
    "loss = torch.nn.functional.cross_entropy(out.cuda(), torch.tensor([0, 1, 9], device='cuda') + alias_a[0] * 0)"
)
SNAPSHOT = (
    "(float(frame['x'].sum()), int(frame['y'].sum()), sorted(tokenizer.vocab.items()), config, "
    "features.tolist(), model.weight.sum().item(), optimizer.param_groups[0]['params'][0] is model.weight, "
    "alias_a is alias_b, __import__('copy').deepcopy(rng).random(3).tolist(), "
    "__import__('copy').deepcopy(legacy).rand(3).tolist())"  # the next numbers, without drawing them
)


def test_cpu_values_are_carried_equal_and_the_rest_is_replayed(kernel):
    for cell in NOTEBOOK:
        run_ok(kernel, cell)
    before = value(kernel, SNAPSHOT)
    failing = kernel.run(FAILING)
    assert failing.status == "error" and "device-side assert" in failing.error["evalue"]

    dry = run_ok(kernel, "%cudaguard replay --dry-run").stdout
    assert "skip, carried" in dry and "frame" in dry
    assert "on_device: holds a tensor or storage on the meta device" in dry
    assert "shares objects with" in dry

    run_ok(kernel, "%cudaguard restart")
    first = run_ok(kernel, "print('ready')", timeout=120)
    assert "carried" in first.stdout and "0 failure(s)" in first.stdout, first.stdout
    assert value(kernel, SNAPSHOT) == before  # carried values equal; model/optimizer identity rebuilt by replay
    carried = value(kernel, "__import__('nb_cudaguard').get_guard().last_replay.carried")
    assert {"frame", "tokenizer", "config", "features", "rng", "legacy"} <= set(carried)
    assert not {"model", "optimizer", "on_device", "alias_a", "alias_b"} & set(carried)
    replayed = value(kernel, "[r.first_line for r, _ in __import__('nb_cudaguard').get_guard().last_replay.ran]")
    assert not any(line.startswith("time.sleep") for line in replayed)  # the slow loading cell was skipped
    assert any(line.startswith("torch.manual_seed") for line in replayed)
    assert value(kernel, "(type(on_device).__name__, on_device.device.type)") == ("Tensor", "meta")
    assert value(kernel, "frame_was_there") is False  # carried values arrive after the cells before their own


SNEAKY = '''
class Sneaky:
    """Its pickle would open (and truncate) a file when loaded, and its __reduce__ writes one when it runs."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        open(self.path + ".dumped", "w").close()
        return (open, (self.path, "w"))
'''


def test_values_that_cannot_be_carried_fall_back_to_replay_and_nothing_is_lost(tmp_path):
    (tmp_path / "sneaky_objects.py").write_text(SNEAKY)
    marker = tmp_path / "marker"
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), ENV["PYTHONPATH"]])}
    with KernelSession(extra_env=env) as kernel:
        for cell in [
            "%load_ext nb_cudaguard",
            "%config CudaGuard.carry_max_bytes = 3_000_000",
            "import threading, time\nimport numpy as np\nimport sneaky_objects",
            "time.sleep(0.5)\nhalfway = {'data': np.arange(100_000), 'lock': threading.Lock()}",
            "time.sleep(0.5)\ntoo_big = np.arange(1_000_000)",
            f"time.sleep(0.5)\nsneaky = sneaky_objects.Sneaky({str(marker)!r})",
            "time.sleep(0.5)\nsmall = np.arange(10)",
        ]:
            run_ok(kernel, cell)
        assert kernel.run("halfway['data'][too_big[-1]] + small.sum() + len(sneaky.path)").status == "error"
        dry = run_ok(kernel, "%cudaguard replay --dry-run").stdout
        assert "halfway: could not be pickled (TypeError: cannot pickle '_thread.lock' object)" in dry
        assert "too_big: its pickle passed the size budget" in dry
        assert "sneaky: its class has its own pickling code (sneaky_objects.Sneaky.__reduce__)" in dry
        assert "carried small" in dry
        run_ok(kernel, "%cudaguard restart")
        first = run_ok(kernel, "print(int(halfway['data'].sum()), int(too_big.sum()), sneaky.path, small.tolist())")
        assert "0 failure(s)" in first.stdout and "carried 1 value(s)" in first.stdout, first.stdout
        assert first.stdout.strip().splitlines()[-1] == f"4999950000 499999500000 {marker} {list(range(10))}"
        assert value(kernel, "__import__('nb_cudaguard').get_guard().last_replay.carried") == ["small"]
        assert not marker.exists() and not (tmp_path / "marker.dumped").exists()  # no pickle code of it ran
        assert isinstance(value(kernel, "halfway['lock'].locked()"), bool)  # rebuilt by its cell


TAMPER_CARRIED = """
import json, pathlib, nb_cudaguard.replay.handoff as handoff
real_write = handoff.write
def write_then_tamper(binding, payload, *reserved):
    for entry in payload["options"].get("carry", {}).get("values", []):
        path = pathlib.Path(payload["options"]["carry"]["dir"]) / entry["file"]
        data = bytearray(path.read_bytes())
        data[-2] = (data[-2] + 1) % 256  # after the restart took its hash
        path.write_bytes(bytes(data))
    return real_write(binding, payload, *reserved)
handoff.write = write_then_tamper
"""


def test_a_changed_carried_value_is_refused_and_its_cells_are_replayed(kernel):
    run_ok(kernel, "import time\nimport numpy as np")
    run_ok(kernel, "time.sleep(1.0)\nvalues = np.arange(50_000)")
    assert kernel.run("values[0] + missing_name").status == "error"
    run_ok(kernel, TAMPER_CARRIED)
    restart = run_ok(kernel, "%cudaguard restart")
    assert "skip, carried" in restart.stdout
    first = run_ok(kernel, "print(int(values.sum()))", timeout=120)
    assert "carried values not used" in first.stdout and "was changed after it was written" in first.stdout
    assert first.stdout.strip().splitlines()[-1] == str(sum(range(50_000)))
    assert value(kernel, "__import__('nb_cudaguard').get_guard().last_replay.carried") == []


def test_values_that_fail_to_load_after_replayed_cells_ran_switch_to_the_plain_plan_from_there(kernel, tmp_path):
    log = tmp_path / "ran.log"
    run_ok(kernel, f"import time\nimport numpy as np\nwith open({str(log)!r}, 'a') as f:\n    f.write('1')")
    run_ok(kernel, "time.sleep(1.0)\nvalues = np.arange(50_000)")
    run_ok(kernel, f"with open({str(log)!r}, 'a') as f:\n    f.write('3')\ntotal = int(values.sum())")
    assert kernel.run("print(values[0], total, np.pi)\nmissing_name").status == "error"
    run_ok(kernel, TAMPER_CARRIED)
    restart = run_ok(kernel, "%cudaguard restart")
    assert "skip, carried: values (0.4 MB, about" in restart.stdout, restart.stdout
    first = run_ok(kernel, "print(int(values.sum()), total)", timeout=120)
    assert "carried values not used" in first.stdout and "was changed after it was written" in first.stdout
    assert "replaying the cells that built them, from [3]" in first.stdout, first.stdout
    assert first.stdout.strip().splitlines()[-1] == f"{sum(range(50_000))} {sum(range(50_000))}"
    assert log.read_text() == "1313"  # the cell before the switch ran once, then the plain plan from there
    replay = "__import__('nb_cudaguard').get_guard().last_replay"
    assert value(kernel, f"[r.execution_count for r, _ in {replay}.ran]") == [2, 3, 4]  # [1] loaded nb_cudaguard
    assert value(kernel, f"{replay}.carried") == []


def test_a_value_whose_file_cannot_be_written_to_the_end_is_replayed_and_the_rest_carried(tmp_path):
    """The disk filling up half-way, for real: a file-size limit on the kernel (RLIMIT_FSIZE, with SIGXFSZ
    ignored) makes the write of the big value fail part-way with an OSError, as a full disk does. The limit holds
    for every file the kernel and its restarted process write, IPython's history database too: that one is the
    test's own (IPYTHONDIR), small, not the machine's, which a long test run grows past the limit."""
    with KernelSession(extra_env={**ENV, "IPYTHONDIR": str(tmp_path / "ipython")}) as kernel:
        run_ok(kernel, "%load_ext nb_cudaguard")
        for cell in [
            "import time\nimport numpy as np",
            "time.sleep(0.5)\nbig = np.arange(1_000_000)  # 8 MB",
            "time.sleep(0.5)\nsmall = np.arange(10)",
            "%cudaguard simulate on",
            "import resource, signal\nsignal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (2_000_000, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))",
        ]:
            run_ok(kernel, cell)
        assert kernel.run("import torch\ntorch.ones(1)[torch.tensor([big[-1] + small[0]])]").status == "error"
        printed = run_ok(kernel, "%cudaguard restart").stdout
        assert "big: could not be written (File too large)" in printed, printed
        first = run_ok(kernel, "print(int(big.sum()), small.tolist())")
        assert "0 failure(s)" in first.stdout and "carried 1 value(s)" in first.stdout, first.stdout
        assert first.stdout.strip().splitlines()[-1] == f"499999500000 {list(range(10))}"
        assert value(kernel, "__import__('nb_cudaguard').get_guard().last_replay.carried") == ["small"]


def test_carried_arrays_go_through_memory_when_the_budget_fits_there_else_the_disk_and_stay_mapped(kernel):
    from nb_cudaguard.carry import place as carry_place
    from nb_cudaguard.replay import handoff

    run_ok(kernel, "import time\nimport numpy as np")
    run_ok(kernel, "time.sleep(1.0)\nvalues = np.arange(1_000_000)")
    for budget in (10**15, 50_000_000):
        places = (handoff.private_dir(), carry_place.SHM)
        fits = budget < 10**15 and any(carry_place.fits_in_memory(place, budget) for place in places)
        run_ok(kernel, f"%config CudaGuard.carry_max_bytes = {budget}")
        assert kernel.run("np.sum(values[:1]) + missing_name").status == "error"
        printed = run_ok(kernel, "%cudaguard restart").stdout
        found = re.search(r"Carried values are written to (\S+) \((memory|disk)\)", printed)
        assert found is not None, printed
        assert found.group(2) == ("memory" if fits else "disk")
        first = run_ok(kernel, "print(int(values.sum()), values.flags.writeable)")
        assert "carried 1 value(s)" in first.stdout, first.stdout
        assert first.stdout.strip().splitlines()[-1] == f"{sum(range(1_000_000))} True"
        run_ok(kernel, "def backing(a):\n    while isinstance(a, np.ndarray):\n        a = a.base\n    return a")
        assert value(kernel, "type(backing(values).obj).__name__") == "mmap"  # mapped, not read and copied
        assert not os.path.exists(found.group(1))  # removed once mapped: the pages live as long as the array
