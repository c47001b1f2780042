"""The change feed: Nova's versioned notifications over RabbitMQ, kept in a bounded log.

The listener binds its own exclusive queue to Nova's exchange (`nova`) for the
`versioned_notifications.*` topics, so several Berth replicas each hear everything and nothing
piles up when Berth is gone (Nova's own `versioned_notifications.info` queue has no reader;
scripts/ensure-openstack.sh caps it). oslo.messaging wraps each notification in an envelope
(`oslo.message`, a JSON string); the listener unwraps it with kombu, maps it
(`servers.change_of_notification`) and appends it. A lost connection appends `Resync`: the
caller then reconciles from the listings, since messages may have gone by meanwhile.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

import kombu
from kombu.exceptions import KombuError

from berth.cloud.driver import Change, ChangeBatch, Resync
from berth.cloud.openstack.servers import change_of_notification

LOG_SIZE = 100_000


class ChangeLog:
    """Changes numbered from 0 within one epoch; cursors are `n:<epoch>:<next number>`."""

    def __init__(self, size: int = LOG_SIZE) -> None:
        self.epoch = uuid.uuid4().hex[:12]
        self._items: deque[Change] = deque(maxlen=size)
        self._start = 0
        self._cond = threading.Condition()

    def append(self, change: Change) -> None:
        with self._cond:
            if len(self._items) == self._items.maxlen:
                self._start += 1
            self._items.append(change)
            self._cond.notify_all()

    @property
    def end(self) -> int:
        with self._cond:
            return self._start + len(self._items)

    def read(self, cursor: str | None, timeout: float) -> ChangeBatch:
        with self._cond:
            position = self._start
            if cursor:
                _, epoch, number = [*cursor.split(":"), "", ""][:3]
                if epoch != self.epoch or not number.isdigit():
                    end = self._start + len(self._items)
                    return ChangeBatch([Resync("the driver restarted")], self._cursor(end))
                position = int(number)
            if position < self._start:
                end = self._start + len(self._items)
                return ChangeBatch(
                    [Resync("changes before the cursor were dropped")], self._cursor(end)
                )
            deadline = time.monotonic() + timeout
            while position >= self._start + len(self._items):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            items = list(self._items)[position - self._start :]
            return ChangeBatch(items, self._cursor(position + len(items)))

    def _cursor(self, position: int) -> str:
        return f"n:{self.epoch}:{position}"


def kombu_urls(transport_url: str) -> str:
    """oslo.messaging's `rabbit://u:p@h1:5672,u:p@h2:5672/vhost` as kombu's failover list."""
    scheme, _, rest = transport_url.partition("://")
    hosts, _, vhost = rest.partition("/")
    scheme = "amqp" if scheme in ("rabbit", "amqp", "") else scheme
    return ";".join(f"{scheme}://{h}/{vhost}" for h in hosts.split(","))


class NotificationListener(threading.Thread):
    """A daemon thread feeding `log` from one cluster's notifications until `stop()`."""

    def __init__(
        self,
        transport_url: str,
        exchange: str,
        topic: str,
        prefix: str,
        log: ChangeLog,
        on_message: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        super().__init__(name=f"berth-notifications-{prefix}", daemon=True)
        self._url = kombu_urls(transport_url)
        self._exchange = kombu.Exchange(exchange, type="topic", durable=False)
        self._topic = topic
        self._prefix = prefix
        self._log = log
        self._on_message = on_message
        self._halt = threading.Event()
        self.ready = threading.Event()
        self.received = 0

    def stop(self) -> None:
        self._halt.set()

    def _handle(self, body: Any, message: Any) -> None:
        envelope = json.loads(body) if isinstance(body, (str, bytes)) else body
        inner = envelope.get("oslo.message")
        note = json.loads(inner) if isinstance(inner, str) else envelope
        self.received += 1
        if self._on_message is not None:
            self._on_message(note)
        try:
            change = change_of_notification(note, self._prefix)
        except (KeyError, TypeError, ValueError):
            change = None  # a payload of a version this mapping does not know: skip it
        if change is not None:
            self._log.append(change)
        message.ack()

    def _queue(self) -> Any:
        name = f"berth-{self._prefix.rstrip('.')}-{self._log.epoch}"
        bindings = [
            kombu.binding(self._exchange, routing_key=f"{self._topic}.{level}")
            for level in ("info", "error", "warn")
        ]
        return kombu.Queue(name, bindings=bindings, exclusive=True, auto_delete=True)

    def run(self) -> None:
        first = True
        while not self._halt.is_set():
            try:
                with kombu.Connection(self._url, connect_timeout=5) as conn:
                    conn.ensure_connection(max_retries=1)
                    with conn.Consumer(self._queue(), callbacks=[self._handle], accept=["json"]):
                        if not first:
                            self._log.append(Resync("the notification connection was lost"))
                        first = False
                        self.ready.set()
                        while not self._halt.is_set():
                            try:
                                conn.drain_events(timeout=0.5)
                            except TimeoutError:
                                continue
            except (OSError, KombuError, Exception):  # amqp's connection errors vary by version
                self.ready.clear()
                if self._halt.wait(1.0):
                    return
