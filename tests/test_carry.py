"""Which values ``carry.measure`` lets across the restart, read back as ``carry_handoff`` reads them."""

from __future__ import annotations

import pickle

import numpy as np

from nb_cudaguard import carry


def carried_copy(value, path):
    measure = carry.measure("value", value, 10**9, 60.0, path)
    assert measure.carriable, measure.reason
    return pickle.loads(carry.read_verified(path, measure.sha256))


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
