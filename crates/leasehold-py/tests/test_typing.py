"""The stubs catch misuse: mypy --strict refuses what the runtime would refuse."""

from __future__ import annotations

import pytest

SNIPPET = """
import leasehold
locks = leasehold.Locker("memory://")
with locks.lock("k", ttl="5") as lease:
    n: str = lease.fence
"""


def test_mypy_refuses_a_string_ttl_and_a_wrongly_typed_fence() -> None:
    api = pytest.importorskip("mypy.api")
    out, _, status = api.run(["--strict", "--no-incremental", "-c", SNIPPET])
    assert status == 1, out
    assert 'Argument "ttl" to "lock" of "Locker" has incompatible type "str"' in out, out
    assert 'Incompatible types in assignment (expression has type "int | None"' in out, out
