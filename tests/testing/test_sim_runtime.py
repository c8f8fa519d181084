"""The simulated GPU's ``torch.cuda`` runtime API (nb_cudaguard/testing/runtime.py): it answers as one GPU does,
fails after a device assert exactly where a real one fails, names the kernel CUDA picks for the input, and its errors
show in IPython without the simulation's frames.
"""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import nb_cudaguard  # noqa: E402
from nb_cudaguard import testing  # noqa: E402

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture
def simulated():
    testing.reset()
    testing.enable()
    yield
    testing.reset()


def test_one_gpu_answers(simulated):
    assert torch.cuda.is_available() and torch.cuda.device_count() == 1
    assert not torch.cuda.is_initialized()  # nothing has started CUDA yet
    torch.cuda.set_device(0)
    torch.cuda.set_device("cuda:0")
    assert torch.cuda.is_initialized() and torch.cuda.current_device() == 0
    props = torch.cuda.get_device_properties(0)
    assert props.name == torch.cuda.get_device_name() and props.total_memory > 0 and props.multi_processor_count > 0
    assert torch.cuda.get_device_capability() == (props.major, props.minor)
    assert not torch.cuda.is_current_stream_capturing()
    torch.cuda.manual_seed(0)
    torch.cuda.manual_seed_all(0)
    torch.manual_seed(0)  # torch's own seeding, which calls torch.cuda.manual_seed_all

    before = torch.cuda.memory_allocated()
    block = torch.zeros(1024, device="cuda")
    assert torch.cuda.memory_allocated() == before + block.untyped_storage().nbytes()
    free, total = torch.cuda.mem_get_info()
    assert total == props.total_memory and free == total - torch.cuda.memory_allocated()
    assert torch.cuda.max_memory_allocated() >= torch.cuda.memory_allocated()
    del block
    torch.cuda.reset_peak_memory_stats()
    assert torch.cuda.max_memory_allocated() == torch.cuda.memory_allocated() == before
    torch.cuda.empty_cache()
    torch.cuda.synchronize()


def test_streams_events_and_timing_code_run(simulated):
    side = torch.cuda.Stream()
    assert torch.cuda.current_stream() == torch.cuda.default_stream()
    with torch.cuda.stream(side):
        assert torch.cuda.current_stream() is side
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = torch.ones(64, 64, device="cuda") @ torch.ones(64, 64, device="cuda")
        end.record()
    assert torch.cuda.current_stream() == torch.cuda.default_stream()
    torch.cuda.current_stream().wait_stream(side)
    end.synchronize()
    assert start.elapsed_time(end) >= 0.0 and end.query() and side.query()
    assert out.is_cuda
    with pytest.raises(RuntimeError, match="enable_timing=True"):
        torch.cuda.Event().elapsed_time(end)
    with torch.cuda.device(0):
        assert torch.cuda.current_device() == 0


def test_recurrent_modules_run_on_the_simulated_gpu_and_cudnn_is_restored_after(simulated):
    """A CUDA build's GRU/LSTM ask cuDNN for a tensor on CUDA, and the simulated device's tensors live on the CPU,
    where cuDNN's ops do not exist: the simulation answers as a build without cuDNN, so the text models of
    tests/scenarios (g05: an embedding, then a GRU) run as users write them."""
    gru = torch.nn.GRU(4, 4, batch_first=True).to("cuda")
    out, _ = gru(torch.randn(2, 3, 4, device="cuda"))
    lstm = torch.nn.LSTM(4, 4).to("cuda")
    lstm(torch.randn(3, 2, 4, device="cuda"))
    assert out.shape == (2, 3, 4) and out.is_cuda
    testing.disable()
    assert torch.backends.cudnn.is_acceptable.__module__ == "torch.backends.cudnn"  # torch's own again


def test_a_second_gpu_is_refused_as_on_a_one_gpu_machine(simulated):
    with pytest.raises(RuntimeError, match="CUDA error: invalid device ordinal"):
        torch.cuda.set_device(1)
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        torch.cuda.mem_get_info("cuda:1")
    with pytest.raises(AssertionError, match="Invalid device id"):
        torch.cuda.get_device_properties(1)


def test_after_a_device_assert_host_side_answers_stay_and_driver_calls_fail(simulated):
    torch.cuda.set_device(0)
    event = torch.cuda.Event(enable_timing=True)
    stream = torch.cuda.Stream()
    with pytest.raises(RuntimeError, match="device-side assert"):
        F.embedding(torch.tensor([10]).to("cuda"), torch.randn(10, 2).to("cuda"))
    assert testing.is_poisoned()
    # host-side on a real GPU: cached properties, the allocator's counters, the seed, the current stream
    assert torch.cuda.is_available() and torch.cuda.device_count() == 1 and torch.cuda.current_device() == 0
    torch.cuda.set_device(0)
    assert torch.cuda.get_device_properties(0).total_memory > 0 and torch.cuda.get_device_capability()[0] > 0
    assert torch.cuda.memory_allocated() >= 0 and torch.cuda.max_memory_allocated() >= 0
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.manual_seed_all(0)
    assert torch.cuda.current_stream() is torch.cuda.default_stream()
    # calls that reach the driver return the sticky error
    for call in (
        torch.cuda.synchronize,
        torch.cuda.mem_get_info,
        torch.cuda.empty_cache,
        torch.cuda.is_current_stream_capturing,
        event.record,
        event.synchronize,
        event.query,
        stream.synchronize,
        stream.query,
        lambda: torch.cuda.current_stream().wait_stream(stream),
    ):
        with pytest.raises(RuntimeError, match="device-side assert triggered"):
            call()


def test_transformers_training_arguments_construct(simulated, tmp_path):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")  # TrainingArguments sets its device up (torch.cuda.set_device) through it
    args = transformers.TrainingArguments(output_dir=str(tmp_path), report_to=[])
    assert args.device.type == "cuda" and args.n_gpu == 1


def test_disable_restores_everything_it_replaced():
    testing.reset()
    before = dict(vars(torch.cuda))
    testing.enable()
    replaced = {name for name, value in vars(torch.cuda).items() if before.get(name) is not value}
    assert {"set_device", "is_initialized", "Stream", "Event", "mem_get_info"} <= replaced
    testing.disable()
    after = dict(vars(torch.cuda))
    assert {name for name in before if after.get(name) is not before[name]} == set()
    assert set(after) == set(before)
    testing.reset()


@pytest.mark.parametrize(("ids", "kernel"), [(4, "indexSelectSmallIndex"), (256, "indexSelectLargeIndex")])
def test_the_kernel_is_the_one_cuda_picks_for_the_input(shell, ids, kernel):
    """Indexing.cu runs indexSelectSmallIndex for at most 16 indices: a batch of 256 token ids asserts in
    indexSelectLargeIndex, and the diagnosis must not read it as a per-sample id table."""
    shell.run_cell("import torch\n%cudaguard simulate on", store_history=True)
    shell.run_cell(
        f"emb = torch.nn.Embedding(100, 8).to('cuda')\nids = torch.randint(0, 100, ({ids},))", store_history=True
    )
    shell.run_cell("ids[3] = 120\nids = ids.to('cuda')", store_history=True)
    shell.run_cell("out = emb(ids)", store_history=True)
    report = nb_cudaguard.get_guard(shell).last_report  # the printed assertion lines, as the extension read them
    assert report.incident.classification == "poisoned"
    assert [record.kernel for record in report.incident.assertions] == [kernel]
    assert report.diagnosis.top.family == "embedding_index_out_of_range"
    if ids > 16:
        assert "per-sample" not in repr(report.diagnosis)


def test_ipython_shows_the_error_without_the_simulations_frames(shell, capsys):
    shell.run_cell("import torch\n%cudaguard simulate on", store_history=True)
    shell.run_cell(
        "emb = torch.nn.Embedding(10, 4).to('cuda')\nids = torch.tensor([1, 12]).to('cuda')", store_history=True
    )
    capsys.readouterr()
    result = shell.run_cell("out = emb(ids)", store_history=True)
    assert "device-side assert triggered" in str(result.error_in_exec)
    shown = _ANSI.sub("", capsys.readouterr().out)  # the compact traceback: the user's frames (incident.compact)
    assert "Traceback" in shown and "out = emb(ids)" in shown
    assert "nb_cudaguard/testing" not in shown and "skipping hidden" not in shown
    shell.run_line_magic("tb", "")  # the whole one ends in torch's frame, as on a GPU
    whole = _ANSI.sub("", capsys.readouterr().out)
    assert "functional.py" in whole and "nb_cudaguard/testing" not in whole and "skipping hidden" not in whole
    # an error CUDA raises on the host (a host op) passes through the simulation too: shown the same way
    shell.run_cell("torch.zeros(2, device='cuda') + torch.zeros(3, device='cuda')", store_history=True)
    assert "nb_cudaguard/testing" not in _ANSI.sub("", capsys.readouterr().out)


def test_stream_and_event_are_classes_as_libraries_use_them(shell):
    """transformers annotates ``-> torch.cuda.Stream | None`` at import time and tests ``isinstance``: a function
    in their place broke ``import transformers``'s generation modules under the simulation."""
    import torch

    shell.run_line_magic("cudaguard", "simulate on")
    assert (torch.cuda.Stream | None) is not None
    assert isinstance(torch.cuda.current_stream(), torch.cuda.Stream)
    assert isinstance(torch.cuda.Stream(), torch.cuda.Stream) and isinstance(torch.cuda.Event(), torch.cuda.Event)
    with torch.cuda.stream(torch.cuda.Stream()) as _:
        assert torch.cuda.current_stream() is not torch.cuda.default_stream()


def test_pinned_host_memory_as_a_dataloader_asks_for_it(shell):
    """A DataLoader with ``pin_memory=True`` (transformers' Trainer sets it when CUDA is there) pins each batch:
    the simulated GPU gives a host copy, as pinning does, where a CPU-only torch refused to pin."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    shell.run_line_magic("cudaguard", "simulate on")
    data = TensorDataset(torch.arange(8.0).reshape(4, 2), torch.arange(4))
    batches = list(DataLoader(data, batch_size=2, pin_memory=True))
    assert [b[1].tolist() for b in batches] == [[0, 1], [2, 3]]
    pinned = torch.ones(3).pin_memory()
    assert pinned.tolist() == [1.0, 1.0, 1.0] and not pinned.is_cuda
    assert torch.empty(2, pin_memory=True).shape == (2,)


def test_an_optimizer_steps_on_the_simulated_gpu(shell):
    """On a CUDA build (the one torchvision pairs with here), ``Adam.step`` asks ``torch.accelerator`` for the current
    stream, to refuse a step during a graph capture: the simulated GPU answers it as one GPU does."""
    import torch

    shell.run_line_magic("cudaguard", "simulate on")
    model = torch.nn.Linear(4, 2).to("cuda")
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(3, 4).to("cuda")).sum().backward()
    opt.step()
    assert opt.state_dict()["state"][0]["step"].item() == 1
