"""A real single-node Apache Kafka broker, for the Kafka tests and ``slash
bench kafka``: KRaft mode (one JVM is both broker and controller), on
127.0.0.1 with free ports, its data in a given directory, started from the
jars Maven resolves from ``jvm/kafka-broker.pom.xml`` (:func:`broker_jars`)
and stopped at the end.

    with KafkaBroker.start(tmp_path) as broker:
        broker.bootstrap        # "127.0.0.1:PORT"
        broker.create_topic("t", partitions=4)

:func:`maven_jars` is the one way this package resolves JVM jars (the broker's,
and Spark's Kafka connector for the benchmark): ``mvn dependency:copy-dependencies``
of a pom under ``jvm/`` into a cache directory, once per pom and properties.

    python -m slash.bench._kafka_broker     # resolves the broker's jars, prints their directory
"""
from __future__ import annotations

import base64
import glob
import hashlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from typing import List, Mapping, Optional, Sequence

from slash.errors import NotSupported

log = logging.getLogger(__name__)

#: the poms and the broker's log configuration (package data)
JVM_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jvm")
BROKER_POM = os.path.join(JVM_DIR, "kafka-broker.pom.xml")
_LOG4J = os.path.join(JVM_DIR, "kafka-broker-log4j2.properties")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cache_root() -> str:
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "slash")


def maven_jars(pom: str, name: str, properties: Optional[Mapping[str, str]] = None,
               timeout: float = 900.0) -> str:
    """The runtime jars of ``pom`` (with ``-Dkey=value`` for each of
    ``properties``) copied by Maven into ``~/.cache/slash/NAME-DIGEST``, once:
    DIGEST is the pom's and the properties', so a changed pom resolves into a
    new directory and a directory in use (a running broker's) is never
    replaced. Returns the directory; raises NotSupported when Maven is
    missing or cannot resolve them (its last lines in the message)."""
    props = dict(properties or {})
    with open(pom, "rb") as f:
        digest = hashlib.sha256(f.read())
    for k in sorted(props):
        digest.update(f"\0{k}={props[k]}".encode())
    directory = os.path.join(cache_root(), f"{name}-{digest.hexdigest()[:16]}")
    if os.path.isdir(directory):
        return directory
    if shutil.which("mvn") is None:
        raise NotSupported("resolving JVM jars needs Maven (apt-get install maven)")
    tmp = f"{directory}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    cmd = ["mvn", "-q", "-B", "-f", pom, "dependency:copy-dependencies", "-DincludeScope=runtime",
           f"-DoutputDirectory={tmp}", *(f"-D{k}={v}" for k, v in sorted(props.items()))]
    log.info("resolving the jars of %s%s with Maven", os.path.basename(pom),
             "".join(f" {k}={v}" for k, v in sorted(props.items())))
    got = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if got.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        lines = (got.stdout + got.stderr).strip().splitlines()
        tail = next((x for x in lines if x.startswith("[ERROR]")), "\n".join(lines[-6:]))
        raise NotSupported(f"Maven could not resolve the jars of {os.path.basename(pom)} "
                           f"{props}: {tail}")
    try:
        os.replace(tmp, directory)
    except OSError:  # another process resolved the same jars first: keep its directory
        shutil.rmtree(tmp, ignore_errors=True)
    return directory


def broker_jars() -> str:
    """The broker's classpath directory (``SLASH_KAFKA_JARS`` if set, else
    ``~/.cache/slash/kafka-<version>-DIGEST``), resolved once."""
    if os.environ.get("SLASH_KAFKA_JARS"):
        return os.environ["SLASH_KAFKA_JARS"]
    with open(BROKER_POM) as f:
        version = f.read().split("<kafka.version>", 1)[1].split("<", 1)[0]
    return maven_jars(BROKER_POM, f"kafka-{version}")


def _die_with_parent() -> None:
    """In the broker's process before exec: SIGKILL it when the process that
    started it dies (a killed test run or benchmark leaves no broker behind)."""
    import ctypes  # start-up: only a started broker needs it

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


#: a JVM that starts fast and stays small: the broker serves a few MB in a test
TEST_JVM = ("-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-Xshare:auto", "-Djava.awt.headless=true")
#: a broker serving a benchmark: the full JIT, and room for a topic's page cache
BENCH_JVM = ("-Xms1g", "-Xmx1g", "-XX:+UseG1GC", "-Djava.awt.headless=true")


class KafkaBroker:
    """One broker process (see the module doc)."""

    def __init__(self, directory: str, jars: str, jvm: Sequence[str] = TEST_JVM) -> None:
        self.dir = directory
        self.jars = jars
        self.jvm = list(jvm)
        self.port = free_port()
        self.controller_port = free_port()
        self.proc: Optional[subprocess.Popen] = None
        self.config = os.path.join(directory, "server.properties")
        self.log_path = os.path.join(directory, "broker.log")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> Optional[int]:
        """The broker JVM's process id while it runs."""
        return self.proc.pid if self.proc is not None else None

    def _java(self, main: str, *args: str) -> List[str]:
        cp = os.pathsep.join(sorted(glob.glob(os.path.join(self.jars, "*.jar"))))
        return ["java", *self.jvm, f"-Dlog4j2.configurationFile={_LOG4J}",
                f"-Dslash.kafka.log={self.log_path}", "-cp", cp, main, *args]

    @classmethod
    def start(cls, directory: str, timeout: float = 60.0,
              jvm: Sequence[str] = TEST_JVM) -> "KafkaBroker":
        b = cls(str(directory), broker_jars(), jvm)
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
        from confluent_kafka.admin import AdminClient  # optional dependency (confluent-kafka)

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
        from confluent_kafka.admin import AdminClient, NewTopic  # optional dependency (confluent-kafka)

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


if __name__ == "__main__":
    print(broker_jars())
    sys.exit(0)
