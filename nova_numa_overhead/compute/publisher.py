# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.
"""Reports go out from a thread of their own: the agent never waits on the
broker.

:meth:`AsyncPublisher.publish` only queues the report and returns. A
sender thread hands reports to the real publisher
(:class:`nova_numa_overhead.rpc.ReportPublisher`) in order. The queue is
bounded and drops its oldest report when full: a report is a snapshot of
the host, only the newest matters. When a report cannot go out, the
sender keeps only the newest one, waits (1, 2, 4 ... 30 s, without holding
any lock) and tries again; a report sent late declares its age, so the
schedulers age it from when it was measured.

Logging, once per state change (operators read these):

* INFO ``Reports are going out to the schedulers`` at the first success;
* WARNING ``NUMA overhead reports are not going out: <why>`` once when an
  outage starts (nothing more while it lasts);
* INFO ``NUMA overhead reports are going out again after N s (M older
  reports dropped)`` when it ends;
* INFO ``Reports stopped`` when the agent stops.
"""

import collections
import dataclasses
import threading
import time

from oslo_log import log as logging

LOG = logging.getLogger(__name__)

#: Reports queued at most; the oldest goes first when full.
MAX_QUEUED = 8
BACKOFF = (1, 2, 4, 8, 16, 30)


class AsyncPublisher:
    """Publishes reports from a sender thread; ``publish`` never blocks.

    ``publisher`` has ``send(report)`` raising on failure, or
    ``publish(report) -> bool``.
    """

    def __init__(self, publisher, max_queued: int = MAX_QUEUED,
                 backoff=BACKOFF, clock=time.monotonic):
        self.publisher = publisher
        self.backoff = tuple(backoff)
        self.clock = clock
        self._queue = collections.deque(maxlen=max_queued)
        self._cond = threading.Condition()
        self._thread = None
        self._stopping = False
        # Counters (for status, logs and tests).
        self.sent = 0
        self.dropped = 0
        self.failures = 0
        self.outage_since = None
        self._dropped_in_outage = 0

    # -- the agent's side ------------------------------------------------

    def publish(self, report) -> bool:
        """Queue ``report``; True unless the publisher is stopped."""
        with self._cond:
            if self._stopping:
                return False
            if len(self._queue) == self._queue.maxlen:
                self._drop(1)
            self._queue.append((report, self.clock()))
            self._cond.notify()
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name='numa-overhead-reports',
                    daemon=True)
                self._thread.start()
        return True

    @property
    def queued(self) -> int:
        with self._cond:
            return len(self._queue)

    @property
    def healthy(self) -> bool:
        """False while reports are not going out."""
        return self.outage_since is None

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the sender (a report being sent may still go out)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)
        if self.sent:
            LOG.info('Reports stopped (%d sent)', self.sent)

    # -- the sender thread ---------------------------------------------------

    def _drop(self, count: int) -> None:
        self.dropped += count
        if self.outage_since is not None:
            self._dropped_in_outage += count

    def _next(self):
        """The next report to send, or None when stopping."""
        with self._cond:
            while not self._queue and not self._stopping:
                self._cond.wait()
            if self._stopping:
                return None
            return self._queue[0]

    def _run(self) -> None:
        attempt = 0
        while True:
            item = self._next()
            if item is None:
                return
            report, queued_at = item
            error = self._send(report, queued_at)
            if error is None:
                attempt = 0
                with self._cond:
                    if self._queue and self._queue[0] is item:
                        self._queue.popleft()
                self._sent()
                continue
            self._failed(error)
            with self._cond:
                # Only the newest report is worth retrying.
                while len(self._queue) > 1:
                    self._queue.popleft()
                    self._drop(1)
                delay = self.backoff[min(attempt, len(self.backoff) - 1)]
                attempt += 1
                # Waits without holding the lock; stop() ends it early.
                self._cond.wait_for(lambda: self._stopping, timeout=delay)

    def _send(self, report, queued_at):
        """Send one report; the exception (or a reason) if it failed."""
        late = self.clock() - queued_at
        if late > 0 and hasattr(report, 'age'):
            report = dataclasses.replace(report, age=report.age + late)
        try:
            send = getattr(self.publisher, 'send', None)
            if send is not None:
                send(report)
            elif not self.publisher.publish(report):
                return 'the publisher refused it'
        except Exception as exc:
            return exc or type(exc).__name__
        return None

    def _sent(self) -> None:
        self.sent += 1
        if self.outage_since is not None:
            LOG.info('NUMA overhead reports are going out again after '
                     '%(seconds).0f s (%(dropped)d older reports dropped)',
                     {'seconds': self.clock() - self.outage_since,
                      'dropped': self._dropped_in_outage})
            self.outage_since = None
            self._dropped_in_outage = 0
        elif self.sent == 1:
            LOG.info('Reports are going out to the schedulers')

    def _failed(self, error) -> None:
        self.failures += 1
        if self.outage_since is None:
            self.outage_since = self.clock()
            self._dropped_in_outage = 0
            LOG.warning('NUMA overhead reports are not going out: %s; the '
                        'newest is retried in the background and the '
                        'schedulers treat this host as unknown after '
                        '[numa_overhead] report_ttl', error)
        else:
            LOG.debug('Report still not sent: %s', error)
