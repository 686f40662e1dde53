"""The garbage collector pause around generation (sharing.iceberg.collector)."""

from __future__ import annotations

import gc
import threading

from sharing.iceberg.collector import collector_paused


def test_paused_while_any_holder_is_inside_and_restored_after() -> None:
    assert gc.isenabled()
    entered, release = threading.Event(), threading.Event()

    def hold() -> None:
        with collector_paused():
            entered.set()
            release.wait(10)

    other = threading.Thread(target=hold)
    other.start()
    entered.wait(10)
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()  # the other thread still generates
    release.set()
    other.join(10)
    assert gc.isenabled()


def test_a_collector_turned_off_before_stays_off() -> None:
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
