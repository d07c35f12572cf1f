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

import threading
import time

from nova_numa_overhead.compute import publisher as publisher_mod
from nova_numa_overhead import report as report_mod
from tests import base

WAIT = 10


def report(seq):
    return report_mod.from_dict(base.make_report(seq=seq))


class Broker:
    """A publisher whose broker a test takes down, or blocks."""

    def __init__(self):
        self.sent = []
        self.down = False
        self.gate = threading.Event()
        self.gate.set()
        self.attempts = 0
        self.changed = threading.Condition()

    def send(self, item):
        self.gate.wait(WAIT)
        with self.changed:
            self.attempts += 1
            self.changed.notify_all()
            if self.down:
                raise ConnectionRefusedError(111, 'Connection refused')
            self.sent.append(item)
            self.changed.notify_all()

    def wait_until(self, predicate):
        with self.changed:
            if not self.changed.wait_for(predicate, timeout=WAIT):
                raise AssertionError('timed out')


class TestAsyncPublisher(base.TestCase):

    def setUp(self):
        super().setUp()
        self.broker = Broker()
        self.publisher = publisher_mod.AsyncPublisher(
            self.broker, max_queued=4, backoff=(0.01,))
        self.addCleanup(self.publisher.stop)

    def test_reports_go_out_in_order(self):
        for seq in (1, 2, 3):
            self.assertTrue(self.publisher.publish(report(seq)))
        self.broker.wait_until(lambda: len(self.broker.sent) == 3)
        self.assertEqual([1, 2, 3], [r.seq for r in self.broker.sent])
        self.assertIn('Reports are going out to the schedulers',
                      self.logger.output)

    def test_publish_never_waits_on_the_broker(self):
        self.broker.gate.clear()        # the broker hangs
        self.addCleanup(self.broker.gate.set)
        done = threading.Event()

        def publish_many():
            for seq in range(1, 11):
                self.publisher.publish(report(seq))
            done.set()
        threading.Thread(target=publish_many, daemon=True).start()
        self.assertTrue(done.wait(WAIT))
        # Bounded: the oldest were dropped, the newest kept.
        self.assertGreaterEqual(self.publisher.dropped, 5)
        self.broker.gate.set()
        self.broker.wait_until(lambda: self.broker.sent and
                               self.broker.sent[-1].seq == 10)
        seqs = [r.seq for r in self.broker.sent]
        self.assertEqual(sorted(seqs), seqs)
        self.assertLessEqual(len(seqs), 5)

    def test_an_outage_is_logged_once_and_only_the_newest_retried(self):
        self.broker.down = True
        self.publisher.publish(report(1))
        self.broker.wait_until(lambda: self.broker.attempts >= 3)
        for seq in (2, 3, 4):
            self.publisher.publish(report(seq))
        attempts = self.broker.attempts
        self.broker.wait_until(lambda: self.broker.attempts >= attempts + 3)
        self.assertFalse(self.publisher.healthy)
        self.broker.down = False
        self.broker.wait_until(lambda: self.broker.sent)
        self.broker.wait_until(lambda: self.publisher.healthy)
        self.assertEqual([4], [r.seq for r in self.broker.sent])
        output = self.logger.output
        self.assertEqual(1, output.count(
            'NUMA overhead reports are not going out: [Errno 111] '
            'Connection refused'))
        self.assertIn('NUMA overhead reports are going out again after',
                      output)
        self.assertIn('(3 older reports dropped)', output)

    def test_a_late_report_declares_its_age(self):
        now = [100.0]
        publisher = publisher_mod.AsyncPublisher(
            self.broker, backoff=(0.01,), clock=lambda: now[0])
        self.addCleanup(publisher.stop)
        self.broker.gate.clear()
        self.addCleanup(self.broker.gate.set)
        publisher.publish(report(1))
        now[0] += 42
        self.broker.gate.set()
        self.broker.wait_until(lambda: self.broker.sent)
        self.assertGreaterEqual(self.broker.sent[0].age, 42)

    def test_a_publisher_returning_false(self):
        class Refusing:
            def __init__(self):
                self.calls = 0

            def publish(self, item):
                self.calls += 1
                return self.calls > 2
        refusing = Refusing()
        publisher = publisher_mod.AsyncPublisher(refusing, backoff=(0.01,))
        self.addCleanup(publisher.stop)
        publisher.publish(report(1))
        deadline = time.monotonic() + WAIT
        while publisher.sent < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertEqual(1, publisher.sent)
        self.assertIn('not going out: the publisher refused it',
                      self.logger.output)

    def test_stop(self):
        self.broker.down = True
        self.publisher.publish(report(1))
        self.broker.wait_until(lambda: self.broker.attempts >= 1)
        self.publisher.stop()
        self.assertFalse(self.publisher.publish(report(2)))
