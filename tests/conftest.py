"""Shared fixtures: the transports every channel test runs on, like uvloop runs
its tests on each loop. ofi:tcp joins when this build has libfabric; verbs
joins when an RDMA device (e.g. soft-RoCE, scripts/rxe-setup.sh) exists."""
import secrets
import sys

import pytest

import _spark
import slash
from _rdma import needs_verbs

#: the modules with a test that uses the ``spark`` fixture (the shared session or a module's own)
SPARK_MODULES = pytest.StashKey[set]()


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
    """Modules with a slow test first, each in its own order, then the rest;
    in each part the modules using the ``spark`` fixture first.
    ./test.sh runs the suite on every core with pytest-xdist, a module whole on
    one worker (--dist loadfile --no-loadscope-reorder): the long modules
    handed out first keep both workers busy to the end, instead of one
    running a long module alone after the other ran out of work; and the
    Spark modules handed out one after the other keep one shared SparkSession
    per worker (tests/_spark.py), which a module without it stops."""
    first_index = {}
    slow_modules = set()
    spark_modules = set()
    for i, item in enumerate(items):
        module = item.nodeid.split("::")[0]
        first_index.setdefault(module, i)
        if item.get_closest_marker("slow") is not None:
            slow_modules.add(module)
        if "spark" in item.fixturenames:
            spark_modules.add(module)
    config.stash[SPARK_MODULES] = spark_modules

    def order(item):
        module = item.nodeid.split("::")[0]
        return module not in slow_modules, module not in spark_modules, first_index[module]

    items.sort(key=order)


@pytest.fixture(scope="module")
def spark():
    """The worker's shared local[2] SparkSession (tests/_spark.py), handed to
    the next module as this one found it. A module that needs a conf sets it
    in a fixture of the same name over this one; one that needs another master
    defines its own ``spark`` from _spark.own_session."""
    pytest.importorskip("pyspark")
    pytest.importorskip("pandas")
    s = _spark.shared()
    confs = _spark.runtime_confs(s)
    yield s
    _spark.leave_as_found(s, confs)


def pytest_sessionfinish(session, exitstatus):
    """The shared SparkSession ends with the test process."""
    _spark.stop_shared()


@pytest.fixture(scope="module", autouse=True)
def no_spark_session_outlives_its_module(request):
    """A module without the ``spark`` fixture runs with no shared SparkSession
    (getOrCreate would hand it the shared local[2]), and a SparkSession other
    than the shared one that a module left active is stopped: under
    pytest-xdist the next module on the worker would otherwise get it from
    getOrCreate, with its master (a local[2] left by one module made a
    local[3] module's barrier stage of 3 refuse with NotEnoughSlots)."""
    if request.node.nodeid not in request.config.stash.get(SPARK_MODULES, set()):
        _spark.stop_shared()
    yield
    sql = sys.modules.get("pyspark.sql")
    if sql is not None:
        left = sql.SparkSession.getActiveSession()
        if left is not None and not _spark.is_shared(left):
            left.stop()
