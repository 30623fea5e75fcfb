"""A guard against the cyclic garbage collector, for the loops that make and
drop many acyclic objects: the rank loops (:mod:`slash.run.rank`) and the
Kafka readers' polls (:mod:`slash.kafka.reader`). A low module of its own
so that both can import it.

Ranks may run on threads of one process (:func:`slash.runner.runs_in_process`)
and the collector's switch is the process's: the guard counts the loops
inside it, the first one in turns the collector off and the last one out
restores what it found."""
from __future__ import annotations

import gc
import threading
from contextlib import contextmanager
from typing import Iterator

_lock = threading.Lock()
_inside = 0
_was_enabled = False


@contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """The push loop allocates a few wrapper objects per batch and frees them
    at once; the cyclic collector still ran every few hundred of them (3% of
    a 100-key YSB task, 3% of a 2-thread count) scanning the heap for
    nothing. The Kafka readers hold it over each poll too (outside a rank
    loop: slash.spark.stream's task, a reader of its own): ``consume()`` makes
    one collectable Message object per record, and a poll of 65,536 set off
    dozens of collections walking them and the heap (a quarter of a read in
    py-spy); messages hold no cycles, and the poll's are dropped before the
    guard ends. A unit read ahead on a thread keeps the collector off for the
    fold's thread too for that read (the switch is the process's)."""
    global _inside, _was_enabled
    with _lock:
        if _inside == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _inside += 1
    try:
        yield
    finally:
        with _lock:
            _inside -= 1
            if _inside == 0 and _was_enabled:
                gc.enable()
