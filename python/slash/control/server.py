"""The control socket of a running stream: its server and its client.

A ``slash run`` (or :func:`slash.runner.run` with ``control=``) listens on a
Unix domain socket (mode 0600, in a 0700 directory; a peer of another user is
refused by its credentials too). The protocol is JSON lines: each request is
one line ``{"op": NAME, "args": {...}}``, each answer one line
``{"ok": true, "result": {...}}`` or ``{"ok": false, "error": {"type":
"SchemaError", "message": "..."}}``; one connection may carry many requests.
The server hands each request to the run's control facade
(``ctl.perform(name, args)``, :class:`slash.control.RunControl`), which
knows the operations.
"""
from __future__ import annotations

import atexit
import json
import logging
import os
import socket
import stat
import struct
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional

from slash import errors
from slash.control.moves import REQUEST_TIMEOUT
from slash.errors import InvalidArgument, InvalidState, SlashError, SystemFailure, Timeout

log = logging.getLogger(__name__)

_MAX_LINE = 1 << 20


def default_dir() -> str:
    """Where control sockets live by default: ``$XDG_RUNTIME_DIR/slash`` or
    ``<tmp>/slash-<uid>``, a directory only its owner may enter."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    if base and os.path.isdir(base):
        return os.path.join(base, "slash")
    return os.path.join(tempfile.gettempdir(), f"slash-{os.getuid()}")


def _private_dir(d: str) -> None:
    os.makedirs(d, mode=0o700, exist_ok=True)
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise InvalidArgument(f"control directory {d!r} is not a directory of this user")
    if st.st_mode & 0o077:
        os.chmod(d, 0o700)


def default_socket() -> str:
    return os.path.join(default_dir(), f"run-{os.getpid()}.sock")


def _peer_uid(conn: socket.socket) -> Optional[int]:
    try:
        raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except (OSError, AttributeError):
        return None
    return struct.unpack("3i", raw)[1]


class ControlServer:
    """Serves the operations of ``ctl`` (its ``perform(name, args)``) on a Unix
    socket at ``path`` (default :func:`default_socket`): mode 0600, stale
    sockets of ended runs replaced, a live one refused. A daemon thread
    accepts; each connection gets a thread. ``close()`` removes the socket."""

    def __init__(self, ctl: Any, path: Optional[str] = None) -> None:
        self.ctl = ctl
        self.path = os.path.abspath(path) if path else default_socket()
        d = os.path.dirname(self.path)
        if path is None:
            _private_dir(d)
        elif not os.path.isdir(d):
            raise InvalidArgument(f"control socket {path!r}: directory {d!r} does not exist")
        if len(self.path.encode()) > 107:
            raise InvalidArgument(f"control socket path {self.path!r} is longer than a Unix socket "
                                  "allows (107 bytes)")
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            st = None
        if st is not None:  # only a socket nobody answers on is stale: anything else is the user's
            if not stat.S_ISSOCK(st.st_mode):
                raise InvalidArgument(f"control socket path {self.path!r} exists and is not a "
                                      "socket; it is left alone: give another --control path")
            if _alive(self.path):
                raise InvalidState(f"control socket {self.path!r} belongs to a running stream")
            os.unlink(self.path)
        self._closed = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._ino: Optional[int] = None
        self._pid = os.getpid()  # a forked child's exit leaves its parent's socket alone
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # removed at the interpreter's exit too: a SIGTERM (raised in the main
        # thread) between here and the caller's try/finally would leave it
        atexit.register(self.close)
        old = os.umask(0o177)  # no moment with the socket open to others
        try:
            self._sock.bind(self.path)
            self._ino = os.lstat(self.path).st_ino  # close() removes this socket, not a successor
        except OSError as e:
            self._sock.close()
            atexit.unregister(self.close)
            raise errors.SystemCallError(f"control socket {self.path!r}: {e.strerror}") from None
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        self._sock.listen(8)
        self._sock.settimeout(0.2)
        self._thread = threading.Thread(target=self._accept, name="slash-control", daemon=True)
        self._thread.start()
        log.info("control socket %s (slash ctl --socket %s status)", self.path, self.path)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            if self._closed.is_set():  # close()'s wake-up call
                conn.close()
                return
            uid = _peer_uid(conn)
            if uid is not None and uid != os.getuid():
                log.warning("control: refused a connection of uid %d", uid)
                conn.close()
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True,
                             name="slash-control-conn").start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rwb") as f:
            for line in f:
                reply = self.handle_line(line)
                try:
                    f.write(json.dumps(reply, default=str).encode() + b"\n")
                    f.flush()
                except OSError:
                    return

    def handle_line(self, line: bytes) -> Dict[str, Any]:
        """One request line to its answer (never raises)."""
        try:
            if len(line) > _MAX_LINE:
                raise InvalidArgument(f"request longer than {_MAX_LINE} bytes")
            try:
                req = json.loads(line)
            except ValueError as e:
                raise InvalidArgument(f"request is not JSON: {e}") from None
            if not isinstance(req, dict) or not isinstance(req.get("op"), str):
                raise InvalidArgument('a request is {"op": NAME, "args": {...}}')
            args = req.get("args") or {}
            if not isinstance(args, dict):
                raise InvalidArgument("args must be a JSON object")
            return {"ok": True, "result": self.ctl.perform(req["op"], args)}
        except SlashError as e:
            return {"ok": False, "error": {"type": type(e).__name__, "message": str(e)}}
        except Exception as e:  # a bug in a handler must not kill the server
            log.exception("control request failed")
            return {"ok": False, "error": {"type": "SystemFailure",
                                           "message": f"{type(e).__name__}: {e}"}}

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        atexit.unregister(self.close)
        if os.getpid() != self._pid:
            return
        if self._thread is not None:
            try:  # wakes the accept at once (else its 0.2 s timeout: every run's end waited)
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as wake:
                    wake.connect(self.path)
            except OSError:
                pass
            self._thread.join(2.0)
        self._sock.close()
        try:
            if os.lstat(self.path).st_ino == self._ino:
                os.unlink(self.path)
        except FileNotFoundError:
            pass

    def __enter__(self) -> "ControlServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# ---- the client --------------------------------------------------------------------------------
def _alive(path: str) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def running_sockets(directory: Optional[str] = None) -> List[str]:
    """The control sockets in ``directory`` (default :func:`default_dir`) a stream answers on."""
    d = directory or default_dir()
    try:
        names = sorted(os.listdir(d))
    except FileNotFoundError:
        return []
    return [p for p in (os.path.join(d, n) for n in names if n.endswith(".sock")) if _alive(p)]


def find_socket(path: Optional[str] = None) -> str:
    """``path``, or the one running stream's socket in :func:`default_dir`;
    :class:`InvalidState` naming the path when no stream answers there."""
    if path is not None:
        if not os.path.exists(path):
            raise InvalidState(f"no stream is running at {path!r} (no such socket)")
        return path
    found = running_sockets()
    if not found:
        raise InvalidState(f"no stream is running: no live control socket in {default_dir()!r} "
                           "(start one with `slash run`, or give --socket PATH)")
    if len(found) > 1:
        raise InvalidState(f"{len(found)} streams are running ({', '.join(found)}): choose one "
                           "with --socket PATH")
    return found[0]


def request(path: Optional[str], op: str, args: Optional[Dict[str, Any]] = None,
            timeout: float = REQUEST_TIMEOUT + 10) -> Dict[str, Any]:
    """Sends one request to the stream at ``path`` (see :func:`find_socket`)
    and returns its result; an error of the stream is raised as the
    :mod:`slash.errors` class it names."""
    p = find_socket(path)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        try:
            s.connect(p)
        except (ConnectionRefusedError, FileNotFoundError):
            raise InvalidState(f"no stream is running at {p!r} (the socket is left from a run "
                               "that ended)") from None
        except PermissionError:
            raise InvalidState(f"control socket {p!r}: permission denied (another user's "
                               "stream?)") from None
        s.sendall(json.dumps({"op": op, "args": args or {}}).encode() + b"\n")
        with s.makefile("rb") as f:
            line = f.readline()
    except socket.timeout:
        raise Timeout(f"no answer from the stream at {p!r} within {timeout} s") from None
    finally:
        s.close()
    if not line:
        raise SystemFailure(f"the stream at {p!r} closed the connection without an answer")
    reply = json.loads(line)
    if reply.get("ok"):
        return reply["result"]
    err = reply.get("error") or {}
    cls = getattr(errors, str(err.get("type")), None)
    if not (isinstance(cls, type) and issubclass(cls, SlashError)):
        cls = SystemFailure
    raise cls(err.get("message", "the stream refused the request"))



def wait_for_socket(path: str, timeout: float = 60.0) -> None:
    """Waits until a stream answers at ``path`` (tests, scripts)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path) and _alive(path):
            return
        time.sleep(0.05)
    raise Timeout(f"no stream answered at {path!r} within {timeout} s")
