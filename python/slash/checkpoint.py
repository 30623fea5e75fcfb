"""Checkpoint directories: the committed state a recovered run restarts from.

Layout of a checkpoint directory ``DIR``::

    DIR/chk-000000000007/rank-0.meta      executor rank 0's meta (watermarks, clock, ...)
                         part-3.r0.bin    leader store of key partition 3 in rank 0's image
                                          (a cut during a hand-over: also part-3.r1.bin;
                                          joins and Spark streams: part-3.bin)
                         rank-0.json      rank 0's source position, pushes, leader map
                         _MANIFEST.json   written LAST: names every file with size + crc32
    DIR/results/rank-0.chk-000000000007.arrow   windows rank 0 fired before cut 7
    DIR/results/rank-0.chk-000000000007.late.arrow  input rows rank 0 found late before
                                                cut 7 (a run with late_output=)
    DIR/_FINISHED.json, DIR/result.parquet      a run that completed (see :meth:`finish`;
                                                with late_output=, also late.arrow)
    DIR/_SLASH_CHECKPOINT                       marks DIR as a Slash checkpoint directory

Invariants:

* A store deletes and overwrites only in a directory it owns: an empty (or
  new) one, which it marks with ``_SLASH_CHECKPOINT``, or one with that
  marker. A non-empty directory without it is refused untouched, unless it
  is a checkpoint directory written before markers: then it holds nothing
  but the layout above, ``results/`` included (every store made it at
  once), and it is marked and resumed.
* A checkpoint exists only once its ``_MANIFEST.json`` does. The manifest is
  written to a temporary file, fsynced, renamed into place (``os.replace``)
  and the directory fsynced, after every file it names is fsynced. A
  ``chk-*`` directory without a manifest is an interrupted checkpoint:
  :meth:`CheckpointStore.latest` ignores and deletes it.
* The manifest of checkpoint c names the result segments of every
  checkpoint up to c (they live outside ``chk-*`` so pruning old checkpoints
  keeps them): the windows fired before cut c are exactly those segments.
  Segments no manifest names belong to an uncommitted cut and are deleted
  at recovery (the replay fires those windows again). Late segments follow the
  same rule: the late rows before cut c are exactly the late segments up to c,
  and the replay after c finds the later ones late again, so each late row is
  written once.
* Every file named by a manifest is checked (size, then crc32) before it is
  used; a mismatch raises :class:`slash.errors.CheckpointCorrupt` naming the
  file. A corrupt checkpoint is never skipped silently for an older one or
  for a fresh start.
* A manifest records the query's fingerprint: a directory of another query
  (or partition count) is refused with :class:`slash.errors.InvalidArgument`.
  Its executor count may differ from the reader's: a checkpoint restores
  into another executor count (leader stores are by key partition; the
  caller re-splits the sources' positions, see :mod:`slash.run.recovery.checkpointed`).
"""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
import zlib
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from slash.errors import CheckpointCorrupt, InvalidArgument, SystemCallError, write_error

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
MANIFEST = "_MANIFEST.json"
FINISHED = "_FINISHED.json"
RESULT = "result.parquet"
RESULTS_DIR = "results"
#: written into every checkpoint directory this project makes; a non-empty
#: directory without it is not one and is refused (see :func:`_claim`)
MARKER = "_SLASH_CHECKPOINT"
_CHK = re.compile(r"^chk-(\d{12})$")


def chk_name(ckpt_id: int) -> str:
    return f"chk-{ckpt_id:012d}"


LATE_SUFFIX = ".late.arrow"
LATE = "late.arrow"


def segment_name(rank: int, ckpt_id: int, late: bool = False) -> str:
    """Path (relative to DIR) of rank's windows fired before cut ``ckpt_id``
    (``late``: of the input rows it found late before it)."""
    return f"{RESULTS_DIR}/rank-{rank}.{chk_name(ckpt_id)}{LATE_SUFFIX if late else '.arrow'}"


def crc32(data: bytes) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durably(path: str, data: bytes) -> Tuple[int, int]:
    """Writes ``data`` to ``path`` via a temporary name, fsync and rename;
    returns (size, crc32)."""
    tmp = f"{path}.tmp-{os.getpid()}"
    try:  # 0600, as the output: a checkpoint holds the user's data
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise write_error(path, e, "write checkpoint file") from None
    return len(data), crc32(data)


_SEGMENT = re.compile(r"^rank-\d+\.chk-\d{12}\.arrow(\.tmp-\d+)?$")
_TMP = re.compile(r"\.tmp-\d+$")


def _ours_before_marker(directory: str, names: List[str]) -> bool:
    """Whether a directory without :data:`MARKER` is a checkpoint directory
    this project wrote before it wrote markers: nothing in it but the layout
    above (``chk-<12 digits>/``, ``results/`` of result segments,
    ``_FINISHED.json``, ``result.parquet``, their temporaries), with the
    ``results/`` directory every store made at once."""
    for name in names:
        path = os.path.join(directory, name)
        if _CHK.match(name) and os.path.isdir(path):
            continue
        if name == RESULTS_DIR and os.path.isdir(path):
            if not all(_SEGMENT.match(f) for f in os.listdir(path)):
                return False
        elif _TMP.sub("", name) not in (FINISHED, RESULT):
            return False
    return RESULTS_DIR in names


def _claim(directory: str) -> None:
    """Makes ``directory`` a checkpoint directory of this project, or refuses:
    an empty one (or one written before markers, see :func:`_ours_before_marker`)
    gets :data:`MARKER`; a non-empty one without it is the user's, and a
    checkpoint store deletes files in its directory (interrupted checkpoints,
    uncommitted result segments), so it is refused untouched."""
    marker = os.path.join(directory, MARKER)
    if os.path.exists(marker):
        return
    names = os.listdir(directory)
    if names and not _ours_before_marker(directory, names):
        shown = ", ".join(sorted(names)[:3]) + (", ..." if len(names) > 3 else "")
        raise InvalidArgument(f"checkpoint directory {directory!r} is not empty ({shown}) and "
                              f"holds no {MARKER} file, so it is not a Slash checkpoint "
                              "directory; a checkpoint store deletes files it did not commit, so "
                              "it refuses: give a new or empty directory")
    write_durably(marker, b"a Slash checkpoint directory: its files are managed by Slash\n")


@dataclass
class Checkpoint:
    """A committed checkpoint as its manifest describes it."""

    id: int
    path: str
    manifest: Dict[str, Any]
    root: str = field(repr=False, default="")

    @property
    def executors(self) -> int:
        return int(self.manifest["executors"])

    def rank_info(self, rank: int) -> Dict[str, Any]:
        """rank's ``rank-<r>.json`` (position, pushes, records_in, metrics)."""
        name = f"rank-{rank}.json"
        data = self.read(name)
        try:
            return json.loads(data)
        except ValueError as e:
            raise CheckpointCorrupt(f"checkpoint file {os.path.join(self.path, name)!r} does not "
                                    f"parse: {e}") from None

    def files(self) -> Dict[str, Dict[str, int]]:
        return self.manifest["files"]

    def segments(self) -> Dict[str, Dict[str, int]]:
        """Result segments committed up to this checkpoint (relative to DIR)."""
        return {k: v for k, v in self.manifest["segments"].items() if not k.endswith(LATE_SUFFIX)}

    def late_segments(self) -> Dict[str, Dict[str, int]]:
        """Late-row segments committed up to this checkpoint (relative to DIR)."""
        return {k: v for k, v in self.manifest["segments"].items() if k.endswith(LATE_SUFFIX)}

    def read(self, name: str) -> bytes:
        """A file of this checkpoint, checked against the manifest."""
        entry = self.files().get(name)
        if entry is None:
            raise CheckpointCorrupt(f"checkpoint {self.path!r} has no file {name!r} in its manifest")
        return read_checked(os.path.join(self.path, name), entry)

    def read_segment(self, rel: str) -> bytes:
        return read_checked(os.path.join(self.root, rel), self.manifest["segments"][rel])

    def verify(self) -> None:
        """Reads every file the manifest names; raises CheckpointCorrupt naming the first bad one."""
        for name in self.files():
            self.read(name)
        for rel in self.manifest["segments"]:
            self.read_segment(rel)


def read_checked(path: str, entry: Dict[str, int], *, named_by: str = "its manifest") -> bytes:
    """The bytes of ``path``, checked against ``entry`` (``size`` and
    ``crc32``, as :func:`write_durably` returned them and ``named_by``
    recorded them): CheckpointCorrupt naming the path if the file is
    missing, unreadable, truncated or corrupted."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise CheckpointCorrupt(f"checkpoint file {path!r} is missing") from None
    except OSError as e:
        raise CheckpointCorrupt(f"checkpoint file {path!r} cannot be read: {e.strerror}") from None
    if len(data) != entry["size"]:
        raise CheckpointCorrupt(f"checkpoint file {path!r} is {len(data)} bytes, {named_by} "
                                f"says {entry['size']} (truncated or overwritten)")
    if crc32(data) != entry["crc32"]:
        raise CheckpointCorrupt(f"checkpoint file {path!r} fails its crc32 check (corrupted)")
    return data


class CheckpointStore:
    """The checkpoints of one query in directory ``directory``.

    ``fingerprint``: what identifies the query (its repr, the source, the
    executor count); a manifest with another fingerprint is refused.
    ``keep``: complete checkpoints kept; older ones are deleted when a newer
    one commits.

    >>> import tempfile
    >>> s = CheckpointStore(tempfile.mkdtemp(), fingerprint="q", executors=1, partitions=4)
    >>> d = s.begin(1)
    >>> f = s.write(1, "rank-0.json", b'{"position": 0}')
    >>> s.commit(1, {"rank-0.json": f}, {}).id
    1
    >>> s.latest().rank_info(0)
    {'position': 0}
    """

    def __init__(self, directory: str, *, fingerprint: str, executors: int, partitions: int,
                 keep: int = 2, inputs: Optional[Dict[str, List[int]]] = None) -> None:
        if keep < 1:
            raise InvalidArgument(f"checkpoint keep must be >= 1, got {keep}")
        self.dir = os.path.abspath(os.fspath(directory))
        self.fingerprint = fingerprint
        self.executors = executors
        self.partitions = partitions
        self.keep = keep
        #: the input files' [size, mtime_ns] (:func:`slash.sources.input_stamp`): a
        #: finished run's result is returned only for the same input
        self.inputs = inputs
        try:
            os.makedirs(self.dir, exist_ok=True)
            _claim(self.dir)
            os.makedirs(os.path.join(self.dir, RESULTS_DIR), exist_ok=True)
        except OSError as e:
            raise write_error(self.dir, e, "create checkpoint directory") from None

    # -- writing (workers write files, the parent commits) ----------------------
    def begin(self, ckpt_id: int) -> str:
        """The directory of checkpoint ``ckpt_id`` (created)."""
        d = os.path.join(self.dir, chk_name(ckpt_id))
        os.makedirs(d, exist_ok=True)
        return d

    def write(self, ckpt_id: int, name: str, data: bytes) -> Dict[str, int]:
        """Writes file ``name`` of checkpoint ``ckpt_id``; returns its manifest entry."""
        size, crc = write_durably(os.path.join(self.begin(ckpt_id), name), data)
        return {"size": size, "crc32": crc}

    def write_segment(self, rank: int, ckpt_id: int, data: bytes,
                      late: bool = False) -> Tuple[str, Dict[str, int]]:
        rel = segment_name(rank, ckpt_id, late)
        size, crc = write_durably(os.path.join(self.dir, rel), data)
        return rel, {"size": size, "crc32": crc}

    def commit(self, ckpt_id: int, files: Dict[str, Dict[str, int]],
               segments: Dict[str, Dict[str, int]], info: Optional[Dict[str, Any]] = None
               ) -> Checkpoint:
        """Makes checkpoint ``ckpt_id`` complete: its manifest, written last and
        atomically, names ``files`` (in the chk dir) and ``segments`` (the result
        segments of this cut; those of earlier committed cuts are carried over).
        Then deletes all but the newest ``keep`` checkpoints."""
        prev = self._newest_manifest()
        all_segments = dict(prev.manifest["segments"]) if prev is not None else {}
        all_segments.update(segments)
        d = self.begin(ckpt_id)
        manifest = {"format": FORMAT_VERSION, "id": ckpt_id, "query": self.fingerprint,
                    "executors": self.executors, "partitions": self.partitions,
                    "files": files, "segments": all_segments, "info": info or {}}
        data = json.dumps(manifest, sort_keys=True).encode()
        _fsync_dir(d)
        _fsync_dir(os.path.join(self.dir, RESULTS_DIR))
        write_durably(os.path.join(d, MANIFEST), data)
        _fsync_dir(d)
        self._prune()
        return Checkpoint(ckpt_id, d, manifest, self.dir)

    def _prune(self) -> None:
        complete = self.committed_ids()
        for i in complete[:-self.keep]:
            shutil.rmtree(os.path.join(self.dir, chk_name(i)), ignore_errors=True)

    # -- reading ------------------------------------------------------------------
    def _ids(self) -> List[int]:
        try:
            names = os.listdir(self.dir)
        except OSError as e:
            raise SystemCallError(f"cannot list checkpoint directory {self.dir!r}: "
                                  f"{e.strerror}") from None
        return sorted(int(m.group(1)) for m in map(_CHK.match, names) if m)

    def _has_manifest(self, ckpt_id: int) -> bool:
        return os.path.exists(os.path.join(self.dir, chk_name(ckpt_id), MANIFEST))

    def committed_ids(self) -> List[int]:
        """The ids of the checkpoints in the directory whose manifest is
        written (committed ones, not yet pruned), ascending."""
        return [i for i in self._ids() if self._has_manifest(i)]

    def load(self, ckpt_id: int) -> Checkpoint:
        """Checkpoint ``ckpt_id`` by its manifest (files are checked as they are read)."""
        d = os.path.join(self.dir, chk_name(ckpt_id))
        path = os.path.join(d, MANIFEST)
        try:
            with open(path, "rb") as f:
                m = json.loads(f.read())
            if not isinstance(m, dict) or not isinstance(m.get("files"), dict):
                raise ValueError("not a manifest object")
        except (ValueError, UnicodeDecodeError) as e:
            raise CheckpointCorrupt(f"checkpoint manifest {path!r} does not parse: {e}") from None
        except OSError as e:
            raise CheckpointCorrupt(f"checkpoint manifest {path!r} cannot be read: "
                                    f"{e.strerror}") from None
        if m.get("format") != FORMAT_VERSION:
            raise CheckpointCorrupt(f"checkpoint manifest {path!r} has format {m.get('format')!r}; "
                                    f"this version reads format {FORMAT_VERSION}")
        if m.get("query") != self.fingerprint:
            raise InvalidArgument(f"checkpoint directory {self.dir!r} holds checkpoints of another "
                                  f"query ({m.get('query')!r}, not {self.fingerprint!r}); give "
                                  "an empty directory or the same query")
        if m.get("partitions") != self.partitions:
            raise InvalidArgument(f"checkpoint {path!r} was taken with {m.get('partitions')} key "
                                  f"partitions; this run has {self.partitions}. The partition "
                                  f"count stays fixed for the life of a query's checkpoints "
                                  f"(a resumed run takes the checkpoint's; leave partitions "
                                  f"unset or give a new directory)")
        return Checkpoint(ckpt_id, d, m, self.dir)

    def newest_shape(self) -> Optional[Tuple[int, int]]:
        """(executors, partitions) of the newest manifest of THIS query, or
        None (no checkpoint, or one of another query or unreadable: load()
        then raises the precise error). A resumed run takes its partition
        count from here."""
        for i in reversed(self._ids()):
            path = os.path.join(self.dir, chk_name(i), MANIFEST)
            if not os.path.exists(path):
                continue
            try:
                with open(path, "rb") as f:
                    m = json.loads(f.read())
                if m.get("query") != self.fingerprint:
                    return None
                return int(m["executors"]), int(m["partitions"])
            except (ValueError, OSError, KeyError, TypeError, AttributeError):
                return None
        return None

    def _newest_manifest(self) -> Optional[Checkpoint]:
        for i in reversed(self._ids()):
            if self._has_manifest(i):
                return self.load(i)
        return None

    def latest(self, verify: bool = True) -> Optional[Checkpoint]:
        """The newest complete checkpoint (every file checked when ``verify``),
        or None. Interrupted checkpoints (no manifest) and result segments of
        uncommitted cuts are deleted."""
        best = self._newest_manifest()
        for i in self._ids():
            if not self._has_manifest(i):
                log.info("deleting interrupted checkpoint %s (no manifest)",
                         os.path.join(self.dir, chk_name(i)))
                shutil.rmtree(os.path.join(self.dir, chk_name(i)), ignore_errors=True)
        keep = set(best.manifest["segments"]) if best is not None else set()
        seg_dir = os.path.join(self.dir, RESULTS_DIR)
        for name in os.listdir(seg_dir):
            if f"{RESULTS_DIR}/{name}" not in keep:
                os.unlink(os.path.join(seg_dir, name))
        if best is not None and verify:
            best.verify()
        return best

    # -- a finished run -------------------------------------------------------------
    def finish(self, result_ipc: bytes, info: Dict[str, Any],
               late_ipc: Optional[bytes] = None) -> None:
        """Marks the run finished: its result (Arrow IPC), with ``late_ipc``
        its late rows, and a marker naming them."""
        size, crc = write_durably(os.path.join(self.dir, RESULT), result_ipc)
        marker = {"format": FORMAT_VERSION, "query": self.fingerprint, "executors": self.executors,
                  "partitions": self.partitions, "result": {"size": size, "crc32": crc},
                  "info": info, "inputs": self.inputs}
        if late_ipc is not None:
            size, crc = write_durably(os.path.join(self.dir, LATE), late_ipc)
            marker["late"] = {"size": size, "crc32": crc}
        write_durably(os.path.join(self.dir, FINISHED), json.dumps(marker, sort_keys=True).encode())
        _fsync_dir(self.dir)

    def finished(self) -> Optional[bytes]:
        """The stored result of a finished run of this query, or None."""
        m = self._finish_marker()
        return None if m is None else read_checked(os.path.join(self.dir, RESULT), m["result"])

    def finished_late(self) -> Optional[bytes]:
        """The late rows a finished run stored (it ran with late_output=), or None."""
        m = self._finish_marker()
        if m is None or "late" not in m:
            return None
        return read_checked(os.path.join(self.dir, LATE), m["late"])

    def _finish_marker(self) -> Optional[Dict[str, Any]]:
        path = os.path.join(self.dir, FINISHED)
        if not os.path.exists(path):
            return None
        try:
            with open(path, "rb") as f:
                m = json.loads(f.read())
        except (ValueError, OSError) as e:
            raise CheckpointCorrupt(f"finish marker {path!r} does not parse: {e}") from None
        if m.get("query") != self.fingerprint:
            raise InvalidArgument(f"checkpoint directory {self.dir!r} holds the finished run of "
                                  f"another query ({m.get('query')!r}); give an empty directory")
        if self.inputs is not None and m.get("inputs") != self.inputs:
            why = _changed(m.get("inputs"), self.inputs)
            raise InvalidArgument(f"checkpoint directory {self.dir!r} holds the finished run of "
                                  f"this query over other input: {why}; "
                                  "its stored result would not be this input's, so it is not "
                                  "returned: give a new or empty directory")
        return m


def _changed(then: Any, now: Dict[str, List[int]]) -> str:
    """What differs between a finish marker's input stamp and this run's."""
    if not isinstance(then, dict):
        return "the directory was finished without a record of its input files"
    for path in sorted(set(then) | set(now)):
        if path not in now:
            return f"input file {path!r} is no longer an input"
        if path not in then:
            return f"input file {path!r} was not an input then"
        if list(then[path]) != list(now[path]):
            return (f"input file {path!r} changed (size {then[path][0]} -> {now[path][0]} bytes, "
                    f"modified {then[path][1]} -> {now[path][1]} ns)")
    return "the input differs"
