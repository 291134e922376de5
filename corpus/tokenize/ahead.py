"""``run_ahead``: one stage of the in-process pipeline, in a thread, a bounded number of items ahead.

With ``--workers 0`` the tokenizer library's batch call (HF tokenizers, gigatoken, tiktoken,
sentencepiece) releases the GIL and uses every core, but JSON decoding and writing would wait for it.
Chaining two stages — read + decode, then encode — in threads ahead of the writer keeps the cores busy
while Python work goes on beside the library. Order is kept, memory is bounded by ``depth`` items per
stage, and an error in a stage re-raises in the consumer at its place in the sequence.
"""

from __future__ import annotations

import threading
from queue import Empty, Full, Queue
from typing import Callable, Iterator, TypeVar

In = TypeVar("In")
Out = TypeVar("Out")

_END = object()
_POLL_SECONDS = 0.1


def run_ahead(upstream: Iterator[In], transform: Callable[[In], Out], depth: int = 2,
              name: str = "stage") -> Iterator[Out]:
    """``transform(item)`` for each item of ``upstream``, computed in a thread up to ``depth`` items ahead.

    Closing the returned generator (or an exception in the consumer) stops the thread after its current
    item and closes ``upstream``.
    """
    results: Queue = Queue(maxsize=depth)
    stop = threading.Event()

    def put(entry: tuple) -> bool:
        while not stop.is_set():
            try:
                results.put(entry, timeout=_POLL_SECONDS)
                return True
            except Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in upstream:
                if not put((transform(item), None)):
                    return
            put((_END, None))
        except BaseException as error:  # noqa: BLE001 - handed to the consumer, raised there
            put((None, error))
        finally:
            close = getattr(upstream, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=produce, name=f"blendforge-{name}", daemon=True)
    thread.start()
    try:
        while True:
            try:
                value, error = results.get(timeout=_POLL_SECONDS)
            except Empty:
                if not thread.is_alive() and results.empty():
                    raise RuntimeError(f"the {name} thread ended without a result") from None
                continue
            if error is not None:
                raise error
            if value is _END:
                return
            yield value
    finally:
        stop.set()
        thread.join()
