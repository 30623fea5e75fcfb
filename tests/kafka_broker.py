"""A real single-node Apache Kafka broker for the tests: KRaft mode (one JVM
is both broker and controller), on 127.0.0.1 with free ports, its data in a
temporary directory, started from the jars scripts/kafka-jars.sh resolves
with Maven (tests/kafka/pom.xml) and stopped at the end.

    with KafkaBroker.start(tmp_path) as broker:
        broker.bootstrap        # "127.0.0.1:PORT"
        broker.create_topic("t", partitions=4)
"""
from __future__ import annotations

import base64
import glob
import logging
import os
import signal
import socket
import subprocess
import time
import uuid
from typing import List, Optional

log = logging.getLogger(__name__)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.join(ROOT, "tests", "kafka")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kafka_jars() -> str:
    """The broker's classpath directory (resolved once, cached)."""
    got = subprocess.run([os.path.join(ROOT, "scripts", "kafka-jars.sh")], check=True,
                         capture_output=True, text=True, timeout=600)
    return got.stdout.strip().splitlines()[-1]


def _die_with_parent() -> None:
    """In the broker's process before exec: SIGKILL it when the test process
    dies (a killed pytest leaves no broker behind)."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


# a JVM that starts fast and stays small: the broker serves a few MB in a test
_JVM = ["-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
        "-Xshare:auto", "-Djava.awt.headless=true"]


class KafkaBroker:
    """One broker process (see the module doc)."""

    def __init__(self, directory: str, jars: str) -> None:
        self.dir = directory
        self.jars = jars
        self.port = free_port()
        self.controller_port = free_port()
        self.proc: Optional[subprocess.Popen] = None
        self.config = os.path.join(directory, "server.properties")
        self.log_path = os.path.join(directory, "broker.log")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _java(self, main: str, *args: str) -> List[str]:
        cp = os.pathsep.join(sorted(glob.glob(os.path.join(self.jars, "*.jar"))))
        return ["java", *_JVM, f"-Dlog4j2.configurationFile={os.path.join(HERE, 'log4j2.properties')}",
                f"-Dslash.kafka.log={self.log_path}", "-cp", cp, main, *args]

    @classmethod
    def start(cls, directory: str, timeout: float = 60.0) -> "KafkaBroker":
        b = cls(str(directory), kafka_jars())
        b._write_config()
        cluster = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        # (an id may start with '-': given as --cluster-id=ID, it is no option)
        got = subprocess.run(b._java("kafka.tools.StorageTool", "format", f"--cluster-id={cluster}",
                                     "-c", b.config), capture_output=True, text=True, timeout=120)
        if got.returncode != 0:
            raise RuntimeError(f"formatting the Kafka broker's storage failed: "
                               f"{got.stdout[-2000:]}{got.stderr[-2000:]}")
        b._launch(timeout)
        return b

    def _write_config(self) -> None:
        data = os.path.join(self.dir, "data")
        os.makedirs(data, exist_ok=True)
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": data,
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "log.flush.interval.messages": "1000000",
            "num.network.threads": "2",
            "num.io.threads": "2",
            "background.threads": "2",
        }
        with open(self.config, "w") as f:
            f.writelines(f"{k}={v}\n" for k, v in props.items())

    def _launch(self, timeout: float) -> None:
        out = open(os.path.join(self.dir, "stdout.log"), "ab")
        self.proc = subprocess.Popen(self._java("kafka.Kafka", self.config), stdout=out,
                                     stderr=subprocess.STDOUT, start_new_session=True,
                                     preexec_fn=_die_with_parent)
        out.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the Kafka broker exited with {self.proc.returncode}: "
                                   f"{self._tail()}")
            if self._ready():
                log.info("Kafka broker up on %s", self.bootstrap)
                return
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the Kafka broker did not start within {timeout} s: {self._tail()}")

    def _ready(self) -> bool:
        from confluent_kafka.admin import AdminClient

        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                pass
        except OSError:
            return False
        try:
            md = AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(timeout=2)
            return bool(md.brokers)
        except Exception:  # not yet serving metadata
            return False

    def _tail(self) -> str:
        text = ""
        for name in ("stdout.log", "broker.log"):
            try:
                with open(os.path.join(self.dir, name), errors="replace") as f:
                    text += f.read()[-3000:]
            except OSError:
                pass
        return text

    def restart(self, timeout: float = 60.0) -> None:
        """Stops the broker and starts it again on the same ports and data."""
        self.stop()
        self._launch(timeout)

    def create_topic(self, name: str, partitions: int = 1, **config: str) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        futs = admin.create_topics([NewTopic(name, num_partitions=partitions,
                                             replication_factor=1, config=config)],
                                   operation_timeout=30)
        futs[name].result(30)
        # wait until every partition has a leader the clients see
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            t = admin.list_topics(name, timeout=5).topics.get(name)
            if t is not None and t.error is None and len(t.partitions) == partitions and \
                    all(p.leader >= 0 for p in t.partitions.values()):
                return
            time.sleep(0.05)
        raise RuntimeError(f"topic {name!r} has no leaders after 30 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None

    def __enter__(self) -> "KafkaBroker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
