"""Which values ``carry.measure`` lets across the restart, read back as ``carry_handoff`` reads them."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import numpy as np
import pytest

from nb_cudaguard.carry import value as carry
from nb_cudaguard.carry.verified import map_verified, read_verified


def carried_copy(value, path):
    measure = carry.measure("value", value, 10**9, 60.0, path)
    assert measure.carriable, measure.reason
    return read_back(measure, path.parent)


def read_back(measure, directory):
    stream = read_verified(directory / measure.file, measure.sha256)
    mapped = map_verified(directory / measure.buffers, measure.buffers_sha256) if measure.buffers else None
    return carry.loads(stream, mapped, measure.spans)


def test_numpy_generators_are_carried_and_go_on_with_the_same_numbers(tmp_path):
    rng, legacy = np.random.default_rng(0), np.random.RandomState(1)
    rng.random(5), legacy.rand(5)  # somewhere in their streams
    copy_rng, copy_legacy = carried_copy(rng, tmp_path / "rng.pkl"), carried_copy(legacy, tmp_path / "legacy.pkl")
    assert copy_rng.random(4).tolist() == rng.random(4).tolist()
    assert copy_legacy.randint(0, 1000, 4).tolist() == legacy.randint(0, 1000, 4).tolist()


class Callable:
    """Callable, with its own pickling code, and code behind every attribute it does not have."""

    looked_up: list[str] = []  # noqa: RUF012

    def __call__(self):
        return None

    def __getattr__(self, name):
        Callable.looked_up.append(name)
        raise AttributeError(name)

    def __reduce__(self):
        Callable.looked_up.append("__reduce__")
        return (print, ("loaded",))


def test_a_callable_with_its_own_pickling_code_is_still_refused_and_none_of_its_code_runs():
    measure = carry.measure("hook", {"hook": Callable()}, 10**9, 60.0)
    assert (
        measure.reason
        == f"its class has its own pickling code ({__name__}.Callable.__reduce__), which may have side effects"
    )
    assert Callable.looked_up == []


class Registered:
    """A plain class whose pickling is a function registered with copyreg, outside the trusted libraries."""

    def __init__(self, value: int) -> None:
        self.value = value


def test_a_copyreg_reducer_outside_the_trusted_libraries_is_refused_before_it_runs():
    import copyreg

    ran: list[int] = []

    def reduce_registered(obj):
        ran.append(obj.value)
        return Registered, (obj.value,)

    copyreg.pickle(Registered, reduce_registered)
    try:
        measure = carry.measure("registered", [Registered(1)], 10**9, 60.0)
    finally:
        del copyreg.dispatch_table[Registered]
    assert measure.reason == (
        "its class has a pickling function registered with copyreg "
        f"({__name__}.test_a_copyreg_reducer_outside_the_trusted_libraries_is_refused_before_it_runs.<locals>."
        "reduce_registered), which may have side effects"
    )
    assert ran == []
    assert carry.measure("complex", [1 + 2j], 10**9, 60.0).carriable  # copyreg's own reducer stays trusted


def test_arrays_come_back_equal_on_the_mapped_file_aligned_writable_as_before_and_copy_on_write(tmp_path):
    import mmap

    import pandas as pd
    import torch

    frozen = np.arange(7, dtype=np.int16)
    frozen.flags.writeable = False
    value = {
        "frame": pd.DataFrame({"price": np.linspace(0, 1, 1001), "city": ["a", "b"] * 500 + ["c"]}),
        "odd": np.arange(13, dtype=np.uint8),  # 13 bytes: the next buffer is padded to alignment
        "fortran": np.asfortranarray(np.arange(12.0).reshape(3, 4)),
        "strided": np.arange(20)[::2],  # not contiguous: numpy writes it into the stream
        "empty": np.zeros(0),
        "frozen": frozen,
        "tensor": torch.arange(6.0),  # torch pickles its storage as bytes, in the stream
    }
    measure = carry.measure("value", value, 10**9, 60.0, tmp_path / "value.pkl")
    assert measure.carriable, measure.reason
    assert all(offset % 64 == 0 for offset, _ in measure.spans) and len(measure.spans) >= 5
    kept = tmp_path / "kept.buf"
    os.link(tmp_path / measure.buffers, kept)  # a second name: reading back consumes the first
    copy = read_back(measure, tmp_path)
    pd.testing.assert_frame_equal(copy["frame"], value["frame"])
    for key in ("odd", "fortran", "strided", "empty", "frozen"):
        np.testing.assert_array_equal(copy[key], value[key])
        assert copy[key].flags.writeable == value[key].flags.writeable
    assert copy["fortran"].flags.f_contiguous and not copy["fortran"].flags.c_contiguous
    assert torch.equal(copy["tensor"], value["tensor"])

    def backing(array):
        while isinstance(array, np.ndarray):
            array = array.base
        return array.obj if isinstance(array, memoryview) else array

    assert isinstance(backing(copy["odd"]), mmap.mmap)  # on the mapped pages: not read, not copied
    assert isinstance(backing(copy["frame"]["price"].to_numpy()), mmap.mmap)
    copy["odd"][:] = 99  # private to this process: the file keeps what was written
    assert hashlib.sha256(kept.read_bytes()).hexdigest() == measure.buffers_sha256


def test_a_changed_buffer_file_is_refused_before_anything_is_unpickled(tmp_path):
    measure = carry.measure("value", np.arange(1000), 10**9, 60.0, tmp_path / "value.pkl")
    path = tmp_path / measure.buffers
    data = bytearray(path.read_bytes())
    data[100] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(carry.NotCarriable, match=r"value\.buf was changed after it was written"):
        map_verified(path, measure.buffers_sha256)


def test_a_buffer_file_another_process_holds_open_is_refused(tmp_path):
    """A value must not change after its check: a file someone else can still write to is never mapped."""
    measure = carry.measure("value", np.arange(1000), 10**9, 60.0, tmp_path / "value.pkl")
    path = tmp_path / measure.buffers
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import sys, time; f = open({str(path)!r}, 'r+b'); print('open', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "open"
        with pytest.raises(carry.NotCarriable, match="held open by another process"):
            map_verified(path, measure.buffers_sha256)
    finally:
        holder.kill()
        holder.wait()
    assert not os.path.exists(path)  # consumed either way: no one can open it any more
