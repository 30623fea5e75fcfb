"""A stream task's checkpoint handshake (slash.run.stream_ckpt.TaskCheckpoints):
what the driver may send before it answers where to resume."""
import queue

from slash.run.plan import CheckpointEvery, CheckpointPlan
from slash.run.protocol import Resume, ResumeAsk, StopAfter
from slash.run.stream_ckpt import TaskCheckpoints


class _Link:
    """The task's link to the driver: what the driver sent, in order."""

    def __init__(self, *from_driver):
        self.inbox, self.sent = queue.Queue(), []
        for m in from_driver:
            self.inbox.put(m)

    def put(self, msg):
        self.sent.append(msg)

    def poll(self, timeout):
        return not self.inbox.empty()

    def get(self):
        return self.inbox.get_nowait()


class _Executor:
    metrics = {"epochs": 0}

    def result_schema(self):
        return None

    def request_checkpoint(self, cid):
        pass


def _task(tmp_path, link):
    plan = CheckpointPlan(str(tmp_path), "f", executors=2, partitions=8, keep=2,
                          every=CheckpointEvery(batches=4))
    return TaskCheckpoints(plan, 1, 2, link, _Executor(), lambda parts: None, None, False)


def test_a_stop_sent_before_the_resume_answer_is_kept_for_the_loop(tmp_path):
    """Rank 0 resumed and a rescale asked the group to stop after checkpoint
    1 before this rank's answer came: the stop is the task's, not an
    unexpected message."""
    others = []
    link = _Link(StopAfter(1), Resume(None, 0, 1, []))
    ck = _task(tmp_path, link)
    assert ck.handshake(0, 5.0, others.append) == (0, 0)
    assert ck.stop_after == 1 and others == []
    assert isinstance(link.sent[0], ResumeAsk)


def test_another_message_before_the_resume_answer_goes_to_the_loop(tmp_path):
    others = []
    link = _Link(("ctl", "x"), Resume(None, 0, 1, []))
    ck = _task(tmp_path, link)
    ck.handshake(0, 5.0, others.append)
    assert others == [("ctl", "x")] and ck.stop_after is None
