"""CPU-bound work off the event loop, on a bounded number of threads (`OffLoop`).

The rule: a caller that is cancelled does not free its worker, which runs to its end, so no
number of abandoned requests can start more than `workers` threads at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class OffLoop:
    """CPU-bound work off the event loop, on at most `workers` threads at a time.

    The rule: a caller that is cancelled (its client left, the server stops) does not free
    the worker, which runs to its end; its slot is released only then, so no number of
    abandoned requests can start more than `workers` threads. The threads are daemons: the
    work is pure computation, with nothing to flush, and must not keep a stopping server alive.
    """

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError("OffLoop needs at least one worker")
        self.workers = workers
        self._slots: asyncio.Semaphore | None = None

    async def run(self, work: Callable[[], T]) -> T:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.workers)
        slots = self._slots
        await slots.acquire()
        loop = asyncio.get_running_loop()
        done: asyncio.Future[T] = loop.create_future()

        def settle(result: T | None, error: BaseException | None) -> None:
            slots.release()
            if done.done():
                return
            if error is not None:
                done.set_exception(error)
            else:
                done.set_result(result)  # type: ignore[arg-type]

        def thread() -> None:
            error: BaseException | None = None
            result: T | None = None
            try:
                result = work()
            except BaseException as exc:
                error = exc
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
                loop.call_soon_threadsafe(settle, result, error)

        try:
            threading.Thread(target=thread, name="holdback-offloop", daemon=True).start()
        except BaseException:
            slots.release()
            raise
        return await done
