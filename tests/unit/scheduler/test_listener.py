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
"""The report listener belongs to the scheduler process, not to a request."""

import threading
import time
from unittest import mock

import fixtures
import nova.conf
from nova.scheduler import weights as nova_weights
from oslo_config import fixture as config_fixture

from nova_numa_overhead import conf as plugin_conf
from nova_numa_overhead import rpc
from nova_numa_overhead.scheduler import filters
from nova_numa_overhead.scheduler import store as store_mod
from nova_numa_overhead.scheduler import weighers
from tests import base
from tests.unit.scheduler import fakes


class BrokerAway(fixtures.Fixture):
    """rpc's broker calls, blocking as a broker that is down does.

    Records the thread of every call; ``release`` lets them return.
    """

    def _setUp(self):
        self.threads = []
        self.release = threading.Event()
        self.addCleanup(self.release.set)

        def blocked(*args, **kwargs):
            self.threads.append(threading.current_thread().name)
            self.release.wait(30)
        for name in ('start_scheduler_listener', 'request_sync',
                     'get_transport'):
            self.useFixture(fixtures.MonkeyPatch(
                'nova_numa_overhead.rpc.' + name, blocked))


class TestRequestsNeverWait(base.TestCase):

    def setUp(self):
        super().setUp()
        self.conf = nova.conf.CONF
        plugin_conf.register_opts(self.conf)
        self.useFixture(config_fixture.Config(self.conf))
        store_mod.reset_store()
        self.addCleanup(store_mod.reset_store)
        self.broker = self.useFixture(BrokerAway())

    def test_filter_and_weigher_with_the_broker_down(self):
        # The weigher on, so that it reaches the store (off, its default,
        # it looks nothing up).
        self.conf.set_override('weight_multiplier', 1.0,
                               group='numa_overhead')
        start = time.monotonic()
        filt = filters.NUMAOverheadFilter()
        weigher = weighers.NUMAOverheadWeigher()
        hosts = [fakes.host_state('a'), fakes.host_state('b')]
        spec = fakes.spec(hints={'numa_overhead_max_level': '2'})
        weighed = [nova_weights.WeighedHost(h, 0.0) for h in hosts]
        self.assertLess(time.monotonic() - start, 5.0)
        for _ in range(3):
            # No report yet: every host is unknown (unknown_host = pass).
            call = time.monotonic()
            self.assertEqual(hosts, filt.filter_all(hosts, spec))
            self.assertEqual([0.0, 0.0],
                             weigher.weigh_objects(weighed, fakes.spec()))
            # Issue 12's bound: a filter + weigher call within 100 ms.
            self.assertLess(time.monotonic() - call, 0.1)
        # Only the listener's own thread ever reached for the broker, once.
        for _ in range(100):
            if self.broker.threads:
                break
            time.sleep(0.01)
        self.assertEqual(['numa-overhead-report-listener'],
                         self.broker.threads)

    def test_a_request_would_show_it(self):
        # What this guards against: the listener started from a request
        # (a request that calls rpc on its own thread is recorded).
        filters.NUMAOverheadFilter()
        self.broker.release.set()
        rpc.start_scheduler_listener(self.conf, None)
        self.assertIn(threading.current_thread().name, self.broker.threads)


class TestListener(base.TestCase):

    def run_listener(self, outcomes):
        """A Listener whose start fails as ``outcomes`` say; the delays."""
        calls = []

        def start(conf, store):
            calls.append(store)
            outcome = outcomes.pop(0)
            if outcome is not None:
                raise outcome
        listener = store_mod.Listener(self.conf, 'the store', start=start)
        delays = []
        self.useFixture(fixtures.MockPatchObject(
            listener._stopped, 'wait', side_effect=delays.append))
        listener._run()
        return listener, calls, delays

    def test_retries_with_backoff_and_logs_once(self):
        warnings = self.useFixture(fixtures.FakeLogger(
            name='nova_numa_overhead.scheduler.store', level='WARNING'))
        down = ConnectionRefusedError('broker down')
        listener, calls, delays = self.run_listener(
            [down, down, down, None])
        self.assertEqual(['the store'] * 4, calls)
        self.assertEqual([1.0, 2.0, 4.0], delays)
        self.assertTrue(listener.wait(0))
        self.assertEqual(1, warnings.output.count(
            'Could not start the NUMA overhead report listener'))
        self.assertEqual(3, listener.failures)

    def test_backoff_is_capped(self):
        down = OSError('down')
        _listener, _calls, delays = self.run_listener([down] * 9 + [None])
        self.assertEqual([1, 2, 4, 8, 16, 32, 60, 60, 60], delays)

    def test_stop_ends_the_retries(self):
        calls = []

        def start(conf, store):
            calls.append(1)
            raise OSError('down')
        listener = store_mod.Listener(self.conf, None, start=start)
        listener.start()
        for _ in range(200):
            if calls:
                break
            time.sleep(0.01)
        listener.stop()
        listener._thread.join(5)
        self.assertFalse(listener._thread.is_alive())
        self.assertFalse(listener.wait(0))
        self.assertEqual([1], calls)

    def test_a_start_that_returns_after_stop_is_stopped(self):
        # The broker came back while stop() ran: the server the start
        # returns is stopped, the others (a new worker's) are not.
        release, server = threading.Event(), mock.Mock()

        def start(conf, store):
            release.wait(30)
            return server
        listener = store_mod.Listener(self.conf, None, start=start)
        stop = self.useFixture(fixtures.MockPatch(
            'nova_numa_overhead.rpc.stop_listener', autospec=True))
        self.useFixture(fixtures.MockPatch(
            'nova_numa_overhead.rpc.stop_listeners', autospec=True))
        listener.start()
        listener.stop()
        release.set()
        listener._thread.join(5)
        stop.mock.assert_called_once_with(server)


class TestStopListener(base.TestCase):

    def test_stops_one_server_and_forgets_it(self):
        one, other = mock.Mock(), mock.Mock()
        self.useFixture(fixtures.MockPatchObject(rpc, '_SERVERS',
                                                 [one, other]))
        rpc.stop_listener(one)
        one.stop.assert_called_once_with()
        one.wait.assert_called_once_with()
        other.stop.assert_not_called()
        self.assertEqual([other], rpc._SERVERS)

    def test_a_failed_start_cleans_its_transport_up(self):
        transport = mock.Mock()
        self.useFixture(fixtures.MockPatchObject(
            rpc, 'get_transport', return_value=transport))
        self.useFixture(fixtures.MockPatchObject(
            rpc.messaging, 'get_rpc_server',
            side_effect=ConnectionRefusedError('down')))
        conf = mock.Mock()
        self.assertRaises(ConnectionRefusedError,
                          rpc.start_scheduler_listener, conf, None)
        transport.cleanup.assert_called_once_with()
        # A transport given by the caller is the caller's.
        given = mock.Mock()
        self.assertRaises(ConnectionRefusedError,
                          rpc.start_scheduler_listener, conf, None, given)
        given.cleanup.assert_not_called()


class TestPerProcess(base.TestCase):

    def setUp(self):
        super().setUp()
        store_mod.reset_store()
        self.addCleanup(store_mod.reset_store)
        self.started = []
        self.useFixture(fixtures.MockPatchObject(
            store_mod.Listener, 'start',
            side_effect=lambda: self.started.append(1), autospec=False))

    def test_one_listener_per_process(self):
        first = store_mod.get_store(self.conf)
        self.assertIs(first, store_mod.get_store(self.conf))
        self.assertEqual(1, len(self.started))
        # A forked worker (another pid) gets a store and listener of its own.
        self.useFixture(fixtures.MockPatch('os.getpid', return_value=-1))
        second = store_mod.get_store(self.conf)
        self.assertIsNot(first, second)
        self.assertEqual(2, len(self.started))
        self.assertIsNotNone(store_mod.listener())

    def test_a_forked_worker_starts_its_own_at_once(self):
        parent = store_mod.get_store(self.conf)
        store_mod._after_fork_in_child()
        child = store_mod.get_store(self.conf)
        self.assertIsNot(parent, child)
        self.assertIs(self.conf, child.conf)
        self.assertEqual(2, len(self.started))

    def test_a_green_forked_worker_starts_its_own_at_its_first_request(
            self):
        parent = store_mod.get_store(self.conf)
        self.useFixture(fixtures.MockPatchObject(
            store_mod, '_green', return_value=True))
        store_mod._after_fork_in_child()
        self.assertEqual(1, len(self.started))
        self.assertIsNone(store_mod.listener())
        child = store_mod.get_store(self.conf)
        self.assertIsNot(parent, child)
        self.assertEqual(2, len(self.started))

    def test_a_forked_worker_leaves_the_parents_servers_alone(self):
        store_mod.get_store(self.conf)
        parents = mock.Mock(spec=['stop', 'wait'])
        # Held by another thread of the parent at the fork.
        held = threading.Lock()
        held.acquire()
        self.useFixture(fixtures.MockPatchObject(rpc, '_SERVERS', [parents]))
        self.useFixture(fixtures.MockPatchObject(rpc, '_SERVERS_LOCK', held))
        store_mod._after_fork_in_child()
        self.assertEqual([], rpc._SERVERS)
        self.assertTrue(rpc._SERVERS_LOCK.acquire(timeout=5))
        rpc._SERVERS_LOCK.release()
        # Stopping the child's listener, at exit, does not touch them:
        # stopping them waited forever for the parent's threads.
        store_mod.reset_store()
        parents.stop.assert_not_called()

    def test_fork_without_a_store_starts_nothing(self):
        store_mod._after_fork_in_child()
        self.assertEqual([], self.started)
        self.assertIsNone(store_mod.listener())


class TestEndpoints(base.TestCase):

    def test_a_report_cast_with_arguments_missing_or_added(self):
        store = store_mod.ReportStore(self.conf)
        endpoint = rpc.SchedulerEndpoint(store)
        # Rejected by the store in its one throttled line, not raised.
        endpoint.report({})
        endpoint.report({}, report={}, extra=1)
        self.assertEqual(0, len(store))

    def test_a_sync_request_with_an_argument_added(self):
        calls = []
        endpoint = rpc.AgentEndpoint(lambda: calls.append(1))
        endpoint.sync({}, requester='sched-1', deadline=5)
        self.assertEqual([1], calls)
