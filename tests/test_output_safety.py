"""Outputs, checkpoint directories and control sockets never remove or
overwrite what Slash did not create; data files are private (0600); a full
disk is named as such; a finished checkpoint directory answers only for the
same input."""
import errno
import json
import os
import socket
import stat
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from slash import checkpoint as ckpt
from slash.control import ControlServer, RunControl
from slash.errors import InvalidArgument, NoSpaceLeft, SystemCallError, write_error
from slash.query import Query
from slash.runner import run, write_parquet_atomically

Q = Query(time="ts", window="tumbling:10ms", key=["k"], aggregates=["count"])


def _table(n=50, shift=0):
    return pa.table({"ts": pa.array([i * 3 + shift for i in range(n)], pa.int64()),
                     "k": pa.array([i % 4 for i in range(n)], pa.int64())})


def _write(path, table=None):
    pq.write_table(table if table is not None else _table(), path)
    return path


def _bytes(path):
    with open(path, "rb") as f:
        return f.read()


# -- the output may not be an input -----------------------------------------------
def test_output_naming_an_input_file_is_refused_and_the_input_kept(tmp_path):
    src = _write(str(tmp_path / "same.parquet"))
    before = _bytes(src)
    with pytest.raises(InvalidArgument) as e:
        run(Q, src, executors=1, output=src)
    assert "same.parquet" in str(e.value) and "input" in str(e.value)
    assert _bytes(src) == before


def test_output_inside_an_input_directory_is_refused(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    _write(str(d / "part-0.parquet"))
    with pytest.raises(InvalidArgument) as e:
        run(Q, str(d), executors=1, output=str(d / "out.parquet"))
    assert str(d) in str(e.value) and "out.parquet" in str(e.value)
    assert os.listdir(d) == ["part-0.parquet"]


def test_output_matched_by_an_input_glob_is_refused(tmp_path):
    _write(str(tmp_path / "a.parquet"))
    pattern = str(tmp_path / "*.parquet")
    with pytest.raises(InvalidArgument) as e:
        run(Q, pattern, executors=1, output=str(tmp_path / "new.parquet"))
    assert pattern in str(e.value)
    assert not (tmp_path / "new.parquet").exists()


def test_output_beside_an_input_glob_it_does_not_match_is_written(tmp_path):
    _write(str(tmp_path / "in-a.parquet"))
    out = tmp_path / "result.parquet"
    r = run(Q, str(tmp_path / "in-*.parquet"), executors=1, output=str(out))
    assert pq.read_table(out).num_rows == r.num_rows > 0


def test_output_through_a_symlink_to_an_input_is_refused(tmp_path):
    src = _write(str(tmp_path / "in.parquet"))
    os.symlink(src, tmp_path / "link.parquet")
    with pytest.raises(InvalidArgument):
        run(Q, src, executors=1, output=str(tmp_path / "link.parquet"))


def test_join_output_naming_the_right_input_is_refused(tmp_path):
    from slash.query import JoinQuery

    left = _write(str(tmp_path / "l.parquet"))
    right = _write(str(tmp_path / "r.parquet"))
    with pytest.raises(InvalidArgument) as e:
        run(JoinQuery(time="ts", window="tumbling:10ms", on=["k"]), (left, right),
            executors=1, output=right)
    assert "r.parquet" in str(e.value)


def test_output_and_late_output_being_one_file_is_refused(tmp_path):
    src = _write(str(tmp_path / "in.parquet"))
    out = str(tmp_path / "out.parquet")
    with pytest.raises(InvalidArgument):
        run(Q, src, executors=1, output=out, late_output=out)


# -- checkpoint directories ----------------------------------------------------------
def _store(d, **kw):
    return ckpt.CheckpointStore(str(d), fingerprint="q", executors=1, partitions=4, **kw)


def test_checkpoint_in_a_non_empty_user_directory_is_refused_untouched(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "figure.png").write_bytes(b"png")
    (tmp_path / "chk-000000000001").mkdir()  # looks like an interrupted checkpoint
    (tmp_path / "chk-000000000001" / "data.csv").write_text("1,2")
    with pytest.raises(InvalidArgument) as e:
        _store(tmp_path).latest()
    assert ckpt.MARKER in str(e.value)
    assert (tmp_path / "results" / "figure.png").exists()
    assert (tmp_path / "chk-000000000001" / "data.csv").exists()
    assert not (tmp_path / ckpt.MARKER).exists()


def test_checkpoint_run_refuses_a_project_directory(tmp_path):
    src = _write(str(tmp_path / "in.parquet"))
    with pytest.raises(InvalidArgument):
        run(Q, src, executors=1, checkpoint=str(tmp_path))
    assert os.listdir(tmp_path) == ["in.parquet"]


def test_a_new_or_empty_checkpoint_directory_is_marked(tmp_path):
    _store(tmp_path / "new")
    assert (tmp_path / "new" / ckpt.MARKER).exists()
    (tmp_path / "empty").mkdir()
    _store(tmp_path / "empty")
    assert (tmp_path / "empty" / ckpt.MARKER).exists()


def test_a_checkpoint_directory_from_before_markers_still_resumes(tmp_path):
    s = _store(tmp_path)
    f = s.write(1, "rank-0.json", b'{"position": 3}')
    s.commit(1, {"rank-0.json": f}, {})
    os.unlink(tmp_path / ckpt.MARKER)  # as a store of an earlier version left it
    again = _store(tmp_path)
    assert again.latest().rank_info(0) == {"position": 3}
    assert (tmp_path / ckpt.MARKER).exists()


def test_a_pre_marker_layout_with_a_foreign_file_is_refused(tmp_path):
    s = _store(tmp_path)
    f = s.write(1, "rank-0.json", b"{}")
    s.commit(1, {"rank-0.json": f}, {})
    os.unlink(tmp_path / ckpt.MARKER)
    (tmp_path / "results" / "thesis.tex").write_text("mine")
    with pytest.raises(InvalidArgument):
        _store(tmp_path)
    assert (tmp_path / "results" / "thesis.tex").exists()


def test_checkpoint_files_and_stored_result_are_private(tmp_path):
    old = os.umask(0o022)
    try:
        s = _store(tmp_path)
        f = s.write(1, "rank-0.json", b"{}")
        rel, entry = s.write_segment(0, 1, b"seg")
        s.commit(1, {"rank-0.json": f}, {rel: entry})
        s.finish(b"result", {})
    finally:
        os.umask(old)
    for p in [tmp_path / "chk-000000000001" / "rank-0.json", tmp_path / rel,
              tmp_path / "chk-000000000001" / ckpt.MANIFEST, tmp_path / ckpt.RESULT,
              tmp_path / ckpt.FINISHED]:
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o600, p


def test_output_and_late_output_files_are_private(tmp_path):
    old = os.umask(0o022)
    try:
        out = tmp_path / "out.parquet"
        write_parquet_atomically(_table(), str(out))
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600


# -- a finished checkpoint directory answers only for the same input ---------------
def test_finished_checkpoint_is_refused_after_the_input_changed(tmp_path):
    src = _write(str(tmp_path / "in.parquet"))
    d = str(tmp_path / "ck")
    first = run(Q, src, executors=1, checkpoint=d)
    assert run(Q, src, executors=1, checkpoint=d).equals(first)  # same input: stored result
    st = os.stat(src)
    _write(src, _table(shift=1))  # same name, same row count, new contents
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    with pytest.raises(InvalidArgument) as e:
        run(Q, src, executors=1, checkpoint=d)
    assert "in.parquet" in str(e.value) and "changed" in str(e.value)


def test_finish_marker_without_input_record_is_not_trusted(tmp_path):
    s = _store(tmp_path, inputs={"/x.parquet": [10, 1]})
    s.finish(b"result", {})
    m = json.loads(_bytes(tmp_path / ckpt.FINISHED))
    del m["inputs"]
    ckpt.write_durably(str(tmp_path / ckpt.FINISHED), json.dumps(m).encode())
    with pytest.raises(InvalidArgument) as e:
        _store(tmp_path, inputs={"/x.parquet": [10, 1]}).finished()
    assert "without a record of its input" in str(e.value)


# -- control sockets -------------------------------------------------------------------
def test_control_path_naming_a_regular_file_is_refused_and_the_file_kept(tmp_path):
    p = tmp_path / "important.txt"
    p.write_text("keep me")
    with pytest.raises(InvalidArgument) as e:
        ControlServer(RunControl(Q, _table().schema, 1),
                      str(p))
    assert "not a socket" in str(e.value)
    assert p.read_text() == "keep me"


def test_a_stale_control_socket_is_replaced(tmp_path):
    p = str(tmp_path / "c.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(p)
    s.close()  # nobody listens: stale
    srv = ControlServer(RunControl(Q, _table().schema, 1), p)
    try:
        assert stat.S_ISSOCK(os.lstat(p).st_mode)
    finally:
        srv.close()
    assert not os.path.exists(p)


def test_a_control_socket_its_owner_never_closed_is_removed_when_the_process_exits(tmp_path):
    """A SIGTERM can land after the server binds and before its owner's
    try/finally holds it: the socket goes at the interpreter's exit."""
    p = str(tmp_path / "c.sock")
    code = ("import sys; from slash.control import ControlServer, RunControl; "
            "from slash.query import Query; import pyarrow as pa; "
            "q = Query(time='t', window='tumbling:1s', key=['k'], aggregates=['count']); "
            "s = pa.schema([('t', pa.int64()), ('k', pa.int64())]); "
            f"ControlServer(RunControl(q, s, 1), {p!r}); sys.exit(3)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 3, r.stderr
    assert not os.path.exists(p)


def test_a_forked_childs_exit_leaves_its_parents_control_socket(tmp_path):
    p = str(tmp_path / "c.sock")
    srv = ControlServer(RunControl(Q, _table().schema, 1), p)
    try:
        pid = os.fork()
        if pid == 0:
            srv.close()  # what the child's atexit would run
            os._exit(0)
        os.waitpid(pid, 0)
        assert stat.S_ISSOCK(os.lstat(p).st_mode)
    finally:
        srv.close()
    assert not os.path.exists(p)


# -- a full disk ---------------------------------------------------------------------
def test_full_disk_is_named_with_its_directory():
    e = write_error("/data/out.parquet", OSError(errno.ENOSPC, "No space left on device"))
    assert isinstance(e, NoSpaceLeft) and "no space left on '/data'" in str(e)
    arrow_style = OSError("Error writing bytes to file. Detail: [errno 28] No space left on device")
    assert isinstance(write_error("/d/x", arrow_style), NoSpaceLeft)
    assert type(write_error("/d/x", OSError(errno.EACCES, "Permission denied"))) is SystemCallError


def test_output_on_a_full_disk_says_no_space_left(tmp_path, monkeypatch):
    def full(table, where, **kw):
        raise OSError("Error writing bytes to file. Detail: [errno 28] No space left on device")

    monkeypatch.setattr(pq, "write_table", full)
    with pytest.raises(NoSpaceLeft) as e:
        write_parquet_atomically(_table(), str(tmp_path / "out.parquet"))
    assert f"no space left on {str(tmp_path)!r}" in str(e.value)
    assert os.listdir(tmp_path) == []  # no temporary left behind


def test_checkpoint_write_on_a_full_disk_says_no_space_left(tmp_path, monkeypatch):
    s = _store(tmp_path)

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(NoSpaceLeft) as e:
        s.write(1, "rank-0.meta", b"x" * 100)
    assert "no space left on" in str(e.value)
    assert os.listdir(tmp_path / "chk-000000000001") == []


def test_a_full_disk_stops_a_checkpointed_run_instead_of_restarting(tmp_path):
    from slash.run.failure import Failed, RestartPolicy

    f = Failed(0, "checkpoint write", NoSpaceLeft("cannot write 'x': no space left on '/d'"))
    with pytest.raises(NoSpaceLeft):
        RestartPolicy(max_restarts=3).check(f, restarts=0)
