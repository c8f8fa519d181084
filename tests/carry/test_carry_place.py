"""Where carried values go: memory only when the whole budget fits with room to spare, else the disk."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from nb_cudaguard.carry import place as carry_place
from nb_cudaguard.replay import handoff

pytestmark = pytest.mark.skipif(not Path("/proc/self/mountinfo").exists(), reason="reads Linux's /proc")


def meminfo(field: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(field)


def test_the_memory_available_is_no_more_than_the_machine_has_free():
    available = carry_place.memory_available()
    assert isinstance(available, int) and 0 < available <= meminfo("MemTotal")
    assert available <= meminfo("MemAvailable") * 1.05  # read moments apart


def test_file_system_types_come_from_the_mount_that_holds_the_path(tmp_path):
    assert carry_place.file_system_type(Path("/proc/self")) == "proc"
    assert carry_place.file_system_type(Path("/proc")) == "proc"
    assert carry_place.file_system_type(tmp_path / "not-yet-there") == carry_place.file_system_type(tmp_path)


def test_a_budget_larger_than_memory_goes_to_the_private_directory_on_disk():
    assert carry_place.choose_root(carry_place.memory_available() * 2) == handoff.private_dir()
    assert not carry_place.fits_in_memory(carry_place.SHM, carry_place.memory_available())  # no reserve left


@pytest.fixture
def shm_dir(monkeypatch):
    """A fresh directory on /dev/shm stands for it, so that the user's own nb_cudaguard directory is left alone."""
    if not carry_place.fits_in_memory(carry_place.SHM, 10**6) or carry_place.in_memory(handoff.private_dir()):
        pytest.skip("/dev/shm is not a memory file system with room here, or the handoff is in memory already")
    shm = Path(tempfile.mkdtemp(dir=carry_place.SHM, prefix="nb_cudaguard-test-"))
    monkeypatch.setattr(carry_place, "SHM", shm)
    yield shm / f"nb_cudaguard-{os.getuid()}"
    shutil.rmtree(shm)


def test_a_small_budget_goes_to_dev_shm_in_a_private_directory(shm_dir):
    chosen = carry_place.choose_root(10**6)
    assert chosen == shm_dir and carry_place.in_memory(chosen)
    assert chosen.stat().st_mode & 0o777 == 0o700 and chosen.stat().st_uid == os.getuid()
    assert chosen in carry_place.roots()


def test_a_dev_shm_directory_others_can_enter_is_not_used(shm_dir):
    shm_dir.mkdir(mode=0o700)
    shm_dir.chmod(0o777)  # as if planted to read what a restart writes
    assert carry_place.choose_root(10**6) == handoff.private_dir()
    assert shm_dir.stat().st_mode & 0o777 == 0o777  # left alone, not taken over


def test_a_handoff_directory_in_memory_is_used_when_the_budget_fits_there_and_the_cache_directory_when_not(
    shm_dir, monkeypatch, tmp_path
):
    runtime = shm_dir.parent / "runtime"  # a runtime directory on a memory file system, as systemd makes one
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert carry_place.choose_root(10**6) == runtime / "nb_cudaguard"
    too_big = carry_place.memory_available()  # fits nowhere in memory with the reserve left
    chosen = carry_place.choose_root(too_big)
    assert chosen == tmp_path / "cache" / f"nb_cudaguard-{os.getuid()}" and not carry_place.in_memory(chosen)
    assert chosen.stat().st_mode & 0o777 == 0o700
    assert set(carry_place.roots()) == {runtime / "nb_cudaguard", chosen}
