"""A checkpoint's way through a rank and the driver: the rank's link shared
by its push loop and its writer thread, the writer that makes images durable
in the background, and the driver's commit once every rank reported."""
from __future__ import annotations

import logging
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Optional, Tuple

from slash.checkpoint import Checkpoint, CheckpointStore

log = logging.getLogger(__name__)


class SharedLink:
    """A worker's link, usable from the push loop and the writer thread."""

    def __init__(self, link: Any) -> None:
        self._link, self._lock = link, threading.Lock()

    def put(self, msg: Any) -> None:
        with self._lock:
            self._link.put(msg)

    def poll(self, timeout: float = 0.0) -> bool:
        return self._link.poll(timeout)

    def get(self, timeout: Optional[float] = None) -> Any:
        return self._link.get(timeout)


class Writer:
    """Writes a rank's checkpoint images on a background thread, so its push
    loop does not wait for the files (and their fsyncs).

    The core hands over an immutable image (bytes); the thread writes its
    files durably, then reports ("ckpt", ...) to the parent, which writes the
    manifest only once every rank's report is in: a crash before that leaves
    the previous checkpoint the newest complete one. At most one write is in
    flight per rank: a second image waits in :meth:`submit` (the push loop
    blocks) until the first is written, so memory holds at most two images
    (the one being written and the one waiting) and checkpoints that fall
    behind slow the input down instead of piling up. A write's error is
    raised in the push loop at the next submit or drain."""

    def __init__(self, rank: int) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"slash-ckpt-{rank}")
        self._fut: Any = None

    def submit(self, fn: Callable[..., None], *args: Any) -> None:
        self.drain()
        self._fut = self._pool.submit(fn, *args)

    def drain(self) -> None:
        if self._fut is not None:
            fut, self._fut = self._fut, None
            fut.result()

    def close(self) -> None:
        self._pool.shutdown(wait=True)


def commit(store: CheckpointStore, cid: int, reports: Dict[int, Tuple[Any, ...]],
           checkpoints: List[Dict[str, Any]], carried: Optional[Dict[str, Dict[str, int]]] = None,
           gen: Optional[int] = None, info: Optional[Dict[str, Any]] = None) -> Checkpoint:
    """Checkpoint ``cid`` committed (its manifest written, last) from every
    rank's ("ckpt", ...) report of it; its sizes and times appended to
    ``checkpoints``. ``carried``: result segments of earlier cuts that did not
    commit, kept by this one; ``gen``: the live group's scale generation the
    cut was taken in (recorded in the manifest, :mod:`slash.run.recovery.live`);
    ``info``: more for the manifest's info (the logic versions agreed so far).
    Returns the committed checkpoint."""
    files: Dict[str, Dict[str, int]] = {}
    segs: Dict[str, Dict[str, int]] = dict(carried or {})
    size, secs, cut = 0, 0.0, 0.0
    for rank in sorted(reports):
        f, s, stats = reports[rank]
        files.update(f)
        segs.update(s)
        size += stats["bytes"]
        secs = max(secs, stats["seconds"])
        cut = max(cut, stats.get("cut_seconds", 0.0))
    t = time.monotonic()
    meta: Dict[str, Any] = {"bytes": size} if gen is None else {"bytes": size, "live_gen": gen}
    meta.update(info or {})
    ck = store.commit(cid, files, segs, meta)
    # seconds: the slowest rank's file writes (background) + the commit;
    # cut_seconds: the longest executor call holding the cut (in the push loop)
    checkpoints.append({"id": cid, "bytes": size,
                        "seconds": round(secs + time.monotonic() - t, 4),
                        "cut_seconds": round(cut, 4)})
    if gen is None:
        log.info("checkpoint %d committed: %d bytes", cid, size)
    else:
        log.info("checkpoint %d committed: %d bytes (scale generation %d)", cid, size, gen)
    return ck


def live_gen(ck: Checkpoint) -> int:
    """The live group's scale generation checkpoint ``ck`` was committed in
    (0: the attempt's first, or not a live group's)."""
    return int(ck.manifest.get("info", {}).get("live_gen", 0))


_PART_FILE = re.compile(r"part-(\d+)(?:\.r(\d+))?\.bin")


def part_name(partition: int, rank: int) -> str:
    """The file of partition ``partition`` in rank ``rank``'s image:
    ``part-<p>.r<rank>.bin``. A partition is in two images when the cut was
    taken during its hand-over (the old leader still owes it, the new one
    holds the deltas merged since the move); each image's copy is kept and a
    restore merges them. (Older checkpoints, and older joins' images, have one
    ``part-<p>.bin``; :func:`read_partitions` reads both.)"""
    return f"part-{partition}.r{rank}.bin"


def read_partitions(ck: Checkpoint, wanted: Callable[[int], bool]) -> Dict[int, List[bytes]]:
    """Every stored image of each partition ``wanted(p)`` accepts, as listed
    in the checkpoint's manifest: partition -> blobs (one per image holding it)."""
    out: Dict[int, List[bytes]] = {}
    for name in sorted(ck.files()):
        m = _PART_FILE.fullmatch(name)
        if m is None:
            continue
        p = int(m.group(1))
        if wanted(p):
            out.setdefault(p, []).append(ck.read(name))
    return out


def checkpoint_leaders(ck: Checkpoint, n: int, partitions: int) -> Optional[List[int]]:
    """The leader map to restore checkpoint ``ck`` with in a group of ``n``:
    the newest map (highest version) a rank recorded at the cut when ``n`` is
    the checkpoint's executor count, else None (the default map of the new
    group, partition mod n). Any map agreed by every executor is correct,
    since every image of a partition is merged into its leader; the newest
    one keeps the moves already made."""
    if ck.executors != n:
        return None
    best: Optional[Dict[str, Any]] = None
    for r in range(n):
        got = ck.rank_info(r).get("leader_map")
        if got is not None and (best is None or got["version"] > best["version"]):
            best = got
    if best is None or len(best["leaders"]) != partitions or \
            not all(0 <= int(x) < n for x in best["leaders"]):
        return None
    return [int(x) for x in best["leaders"]]
