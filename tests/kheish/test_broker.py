"""The embedded broker (``database://``, kheish.broker): nothing lost or half-read under concurrent producers and
consumers, nothing handed to two consumers, and a message whose consumer dies comes back once its lease lapses
(issue 22.1). Real PostgreSQL (the test database), real processes for the consumer that is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections import Counter

import pytest
from django.db import connection
from kombu import Connection, Consumer, Exchange, Producer, Queue

from kheish import broker
from tests.kheish.test_operability import _database_url

pytestmark = pytest.mark.django_db(transaction=True)


def _queue(name: str) -> Queue:
    return Queue(name, Exchange(name, type="direct"), routing_key=name)


def _conn(lease_s: float = 30.0) -> Connection:
    return Connection("database://", transport_options={"lease_seconds": lease_s, "polling_interval": 0.2})


def _publish(queue: Queue, bodies: list[dict]) -> None:
    with _conn() as conn:
        producer = Producer(conn.channel(), exchange=queue.exchange, routing_key=queue.routing_key)
        for body in bodies:
            producer.publish(body, serializer="json", declare=[queue])


def _rows(queue: str) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id, lease_until IS NOT NULL, deliveries FROM {broker.TABLE} WHERE queue = %s",
            [queue],
        )
        return cursor.fetchall()


def _lease_left(queue: str) -> float:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT EXTRACT(EPOCH FROM lease_until - clock_timestamp()) FROM {broker.TABLE} WHERE queue = %s",
            [queue],
        )
        return float(cursor.fetchone()[0])


def test_default_broker_is_the_database():
    from kheish import settings as defaults  # the module, not the test overrides (memory://)

    if os.environ.get("CELERY_BROKER_URL"):
        pytest.skip("CELERY_BROKER_URL is set in this environment")
    assert defaults.CELERY_BROKER_URL == "database://"
    assert Connection(defaults.CELERY_BROKER_URL).transport_cls == "database"


@pytest.mark.slow  # threads on real commits, then 3 s of quiet to see no duplicate arrive
def test_concurrent_producers_and_consumers_lose_nothing_and_duplicate_nothing():
    name = f"t-{uuid.uuid4().hex[:8]}"
    queue = _queue(name)
    producers, per_producer, consumers = 8, 40, 4
    expected = {f"{p}-{i}" for p in range(producers) for i in range(per_producer)}
    received: Counter[str] = Counter()
    lock = threading.Lock()
    errors: list[BaseException] = []
    done_producing = threading.Event()

    def produce(p: int) -> None:
        try:
            _publish(queue, [{"id": f"{p}-{i}", "pad": "x" * 2000} for i in range(per_producer)])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def consume() -> None:
        try:
            with _conn() as conn:

                def on_message(body, message):
                    with lock:
                        received[body["id"]] += 1
                    message.ack()

                with Consumer(conn.channel(), queues=[queue], callbacks=[on_message], prefetch_count=2):
                    idle_since = time.monotonic()
                    while time.monotonic() - idle_since < 3 or not done_producing.is_set():
                        try:
                            conn.drain_events(timeout=0.5)
                            idle_since = time.monotonic()
                        except TimeoutError:
                            pass
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    consumer_threads = [threading.Thread(target=consume) for _ in range(consumers)]
    producer_threads = [threading.Thread(target=produce, args=(p,)) for p in range(producers)]
    for thread in consumer_threads + producer_threads:
        thread.start()
    for thread in producer_threads:
        thread.join(60)
    done_producing.set()
    for thread in consumer_threads:
        thread.join(60)
    assert not errors, errors
    assert set(received) == expected
    assert max(received.values()) == 1  # nobody acked a message another consumer also got
    assert _rows(name) == []  # every acknowledged message is gone from the table


CONSUMER = textwrap.dedent("""
    import sys, time
    import django
    django.setup()
    from kombu import Connection, Consumer, Exchange, Queue
    name, lease, mode = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    queue = Queue(name, Exchange(name, type="direct"), routing_key=name)
    with Connection("database://", transport_options={"lease_seconds": lease, "polling_interval": 0.1}) as conn:
        def on_message(body, message):
            if mode == "ack":  # acknowledged before it says so: the test may kill it once it has read the line
                message.ack()
            print("got", body["id"], message.delivery_info.get("redelivered", False), flush=True)
        with Consumer(conn.channel(), queues=[queue], callbacks=[on_message], prefetch_count=1):
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    conn.drain_events(timeout=0.2)
                except TimeoutError:
                    pass
""")


def _consumer(name: str, lease_s: float, mode: str) -> subprocess.Popen:
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="kheish.settings",
        DATABASE_URL=_database_url(),
        SECRET_KEY="broker-test",
        LOG_LEVEL="WARNING",
    )
    return subprocess.Popen(
        [sys.executable, "-c", CONSUMER, name, str(lease_s), mode],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _first_line(proc: subprocess.Popen, timeout: float) -> str:
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return lines[0].strip() if lines else ""


@pytest.mark.slow  # starts a process
def test_a_message_whose_consumer_is_killed_comes_back_when_its_lease_lapses():
    name = f"t-{uuid.uuid4().hex[:8]}"
    lease = 3.0
    _publish(_queue(name), [{"id": "only"}])
    holder = _consumer(name, lease, "hold")
    try:
        assert _first_line(holder, 30).startswith("got only")
        os.killpg(holder.pid, signal.SIGKILL)  # like kill -9 of the worker: no restore, no ack
        holder.wait(10)
    finally:
        if holder.poll() is None:
            os.killpg(holder.pid, signal.SIGKILL)
    assert _rows(name) == [(_rows(name)[0][0], True, 1)]  # still stored, leased
    # What is left of the lease, on the database's clock (the lease began when the holder claimed the row,
    # which was before this process read its line: timing from here would blame a loaded machine on the broker).
    left = _lease_left(name)
    assert left <= lease
    measured_from = time.monotonic()
    second = _consumer(name, lease, "ack")
    try:
        line = _first_line(second, 30)
        back_after = time.monotonic() - measured_from
    finally:
        os.killpg(second.pid, signal.SIGKILL)
        second.wait(10)
    assert line == "got only True"  # delivered again, marked as a redelivery
    assert max(left, 0) - 0.25 <= back_after <= max(left, 0) + 5  # not before the lease lapsed, and soon after
    deadline = time.monotonic() + 5
    while _rows(name) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _rows(name) == []


@pytest.mark.slow  # starts a process
def test_a_live_consumer_keeps_its_message_past_the_lease():
    name = f"t-{uuid.uuid4().hex[:8]}"
    lease = 1.5
    _publish(_queue(name), [{"id": "long-task"}])
    holder = _consumer(name, lease, "hold")  # holds the message, unacknowledged, and keeps draining (renewing)
    try:
        assert _first_line(holder, 30).startswith("got long-task")
        time.sleep(lease * 3)
        with _conn(lease) as conn:
            assert conn.default_channel._size(name) == 0  # the renewed lease still holds
            assert conn.default_channel.basic_get(name) is None
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait(10)


def test_reject_with_requeue_and_a_warm_close_put_the_message_back_at_once():
    name = f"t-{uuid.uuid4().hex[:8]}"
    queue = _queue(name)
    _publish(queue, [{"id": "a"}])
    with _conn() as conn:
        message = conn.default_channel.basic_get(name)
        assert message is not None and conn.default_channel._size(name) == 0
        message.reject(requeue=True)
        assert conn.default_channel._size(name) == 1
    with _conn() as conn:
        channel = conn.channel()
        assert channel.basic_get(name) is not None
        assert channel._size(name) == 0
        channel.close()  # unacknowledged at close: restored
    with _conn() as conn:
        message = conn.default_channel.basic_get(name)
        assert message is not None and message.payload == {"id": "a"}
        message.ack()
    assert _rows(name) == []


def test_readyz_and_the_queue_depth_gauge_read_the_database_broker(settings):
    from kheish import ops

    settings.CELERY_BROKER_URL = "database://"
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"lease_seconds": 30.0}
    settings.CELERY_TASK_DEFAULT_QUEUE = f"t-{uuid.uuid4().hex[:8]}"
    assert ops.check_broker() is None
    assert ops.queue_depth() == 0
    _publish(_queue(settings.CELERY_TASK_DEFAULT_QUEUE), [{"id": n} for n in range(3)])
    assert ops.queue_depth() == 3
    with _conn() as conn:
        conn.default_channel.basic_get(settings.CELERY_TASK_DEFAULT_QUEUE)  # claimed: no longer waiting
        assert ops.queue_depth() == 2
