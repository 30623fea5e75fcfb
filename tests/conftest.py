"""Shared fixtures: the transports every channel test runs on, like uvloop runs
its tests on each loop. ofi:tcp joins when this build has libfabric; verbs
joins when an RDMA device (e.g. soft-RoCE, scripts/rxe-setup.sh) exists."""
import secrets
import sys

import pytest

import slash
from _rdma import needs_verbs


def transports():
    params = [pytest.param("shm", id="shm")]
    if slash.have_ofi():
        params.append(pytest.param("ofi:tcp", id="ofi-tcp"))
    else:
        params.append(pytest.param("ofi:tcp", id="ofi-tcp", marks=pytest.mark.skip(
            reason="this build has no libfabric (apt-get install libfabric-dev, reinstall)")))
    params.append(pytest.param("ofi:verbs", id="ofi-verbs", marks=needs_verbs))
    return params


@pytest.fixture(params=transports())
def transport(request):
    return request.param


@pytest.fixture
def token():
    return secrets.token_hex(16)


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory):
    """A real single-node Kafka broker (KRaft) on 127.0.0.1, shared by the
    session's Kafka tests and stopped at its end (slash.bench._kafka_broker)."""
    pytest.importorskip("confluent_kafka", reason="pip install confluent-kafka (./test.sh does)")
    from slash.bench._kafka_broker import KafkaBroker

    broker = KafkaBroker.start(tmp_path_factory.mktemp("kafka"))
    try:
        yield broker
    finally:
        broker.stop()


def pytest_collection_modifyitems(session, config, items):
    """Modules with a slow test first, each in its own order, then the rest.
    ./test.sh runs the suite on every core with pytest-xdist, a module whole on
    one worker (--dist loadfile --no-loadscope-reorder): the long modules
    handed out first keep both workers busy to the end, instead of one
    running a long module alone after the other ran out of work."""
    first_index = {}
    slow_modules = set()
    for i, item in enumerate(items):
        module = item.nodeid.split("::")[0]
        first_index.setdefault(module, i)
        if item.get_closest_marker("slow") is not None:
            slow_modules.add(module)

    def order(item):
        module = item.nodeid.split("::")[0]
        return module not in slow_modules, first_index[module]

    items.sort(key=order)


@pytest.fixture(scope="module", autouse=True)
def no_spark_session_outlives_its_module():
    """Stops a SparkSession a module left active: under pytest-xdist the next
    module on the worker would otherwise get it from getOrCreate, with its
    master (a local[2] left by one module made a local[3] module's barrier
    stage of 3 refuse with NotEnoughSlots)."""
    yield
    sql = sys.modules.get("pyspark.sql")
    if sql is not None:
        left = sql.SparkSession.getActiveSession()
        if left is not None:
            left.stop()
