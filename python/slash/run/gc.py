"""The rank loops' guard against the cyclic garbage collector."""
from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """The push loop allocates a few wrapper objects per batch and frees them
    at once; the cyclic collector still ran every few hundred of them (3% of
    a 100-key YSB task) scanning the task's whole heap for nothing."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
