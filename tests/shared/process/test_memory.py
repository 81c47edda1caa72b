"""Freed heap goes back to the system (`shared.process.memory`), on the period both servers run.

The soak found resident memory ratcheting up after each re-list while the heap in use stayed
flat (docs/testing.md, "What the soak found"): glibc keeps freed pages that sit below live data.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from gpuclass.shared.process import memory

HAS_TRIM = memory.return_free_memory() is not None

# A re-list's shape in small: many mid-sized blocks from malloc (over pymalloc's 512 bytes),
# one in fifty kept alive, so the freed ones sit between live ones and below the heap's top.
FRAGMENT = textwrap.dedent(
    """
    import json, sys
    from gpuclass.shared.process.memory import return_free_memory

    def anon_kib():
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("RssAnon"))

    blocks = [bytearray(2000) for _ in range(40_000)]
    kept = blocks[::50]
    del blocks
    before = anon_kib()
    again = anon_kib()
    returned = return_free_memory() if sys.argv[1] == "trim" else None
    print(json.dumps({"before": before, "again": again, "after": anon_kib(),
                      "returned": returned, "kept": len(kept)}))
    """
)


def _fragment(mode: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", FRAGMENT, mode], capture_output=True, text=True, check=True
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


@pytest.mark.skipif(not HAS_TRIM, reason="this C library has no malloc_trim (not glibc)")
def test_freed_pages_between_live_blocks_go_back_to_the_system() -> None:
    untrimmed = _fragment("keep")
    # without the call the freed pages stay resident: what the soak saw
    assert untrimmed["after"] >= untrimmed["again"] - 64
    trimmed = _fragment("trim")
    assert trimmed["returned"] is True
    # about 78 MB were freed between 1.6 MB of live blocks; most of it must leave RSS
    assert trimmed["after"] < trimmed["before"] - (trimmed["before"] - untrimmed["after"]) // 2
    assert trimmed["after"] < untrimmed["after"]


class _Trims:
    def __init__(self) -> None:
        self.calls: list[int] = []

    def __call__(self, pad: int) -> int:
        self.calls.append(pad)
        return 1


def test_the_keeper_returns_memory_on_its_period(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    trims = _Trims()
    monkeypatch.setattr(memory, "_malloc_trim", lambda: trims)
    caplog.set_level("DEBUG", logger="gpuclass.memory")

    async def scenario() -> None:
        task = asyncio.create_task(memory.keep_returning_memory(0.01))
        while len(trims.calls) < 3:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(asyncio.wait_for(scenario(), 10))
    assert set(trims.calls) == {0}  # pad 0: keep nothing spare at the heap's top
    assert "free heap pages returned" in caplog.text


@pytest.mark.parametrize(
    ("period", "trim"),
    [pytest.param(0.0, _Trims(), id="period-0-is-never"), pytest.param(0.01, None, id="no-glibc")],
)
def test_without_a_period_or_malloc_trim_the_keeper_only_waits(
    monkeypatch: pytest.MonkeyPatch, period: float, trim: _Trims | None
) -> None:
    monkeypatch.setattr(memory, "_malloc_trim", lambda: trim)

    async def scenario() -> None:
        task = asyncio.create_task(memory.keep_returning_memory(period))
        await asyncio.sleep(0.1)
        assert not task.done()  # a finished task would end the reconciler's run
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert trim is None or trim.calls == []
    if trim is None:
        assert memory.return_free_memory() is None
