"""The suite's one poll loop (tests/fixtures/wait.py, ``wait_until``): it returns the predicate's first
true value, and past its timeout raises TimeoutError saying what it waited for."""

from __future__ import annotations

import itertools
import time

import pytest
from fixtures.wait import wait_until


def test_the_first_true_value_is_returned():
    counter = itertools.count()
    assert wait_until(lambda: next(counter) >= 3 and "ready", 5, "the counter", interval=0) == "ready"
    assert next(counter) == 4  # asked until it held, not once more


def test_a_timeout_says_what_was_waited_for():
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"^the door to open \(not within 0.05 s\)$"):
        wait_until(lambda: False, 0.05, "the door to open", interval=0.01)
    assert time.monotonic() - start < 5


def test_a_callable_what_says_how_things_stood_at_the_end():
    seen: list[int] = []
    with pytest.raises(TimeoutError, match=r"^asked 1 time\(s\) "):
        wait_until(lambda: seen.append(1), 0, lambda: f"asked {len(seen)} time(s)", interval=0)  # 0 s: asks once
