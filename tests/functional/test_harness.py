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

"""Self-tests of the functional harness in :mod:`tests.functional.base`.

The filter and weigher below exist only for these tests. The scheduler loads
them by import path, the same way it would load the plugin's real ones.
"""

import nova.tests.functional  # noqa: F401 - must be first, see base.py

import time
from typing import Any

import oslo_messaging

from nova import context as nova_context
from nova import exception
from nova import objects
from nova import rpc
from nova.scheduler import filters
from nova.scheduler import weights
from nova.tests.functional.api import client as api_client
from nova import utils

from tests.functional import base

#: Flavor extra spec read by HarnessDenyFilter: comma separated hostnames.
DENY_SPEC = 'harness:deny'
#: Scheduler hint making HarnessDenyFilter raise ('novalidhost'/'runtime').
RAISE_HINT = 'harness_raise'
#: Aggregate metadata key read by HarnessPreferHostWeigher.
WEIGHT_KEY = 'harness_weight'


class HarnessDenyFilter(filters.BaseHostFilter):
    """Test filter: fail the hosts named in the ``harness:deny`` extra spec.

    Every call is recorded in ``SEEN`` so tests can check what a filter gets
    to see (scheduler hints, aggregates, NUMA topology). With the scheduler
    hint ``harness_raise`` it raises instead, to show how the scheduler deals
    with exceptions from filters.
    """

    SEEN: list[dict[str, Any]] = []

    def host_passes(self, host_state, spec_obj) -> bool:
        self.SEEN.append({
            'host': host_state.host,
            'hints': dict(spec_obj.scheduler_hints or {}),
            'aggregate_metadata': [
                dict(agg.metadata) for agg in host_state.aggregates],
            'numa_cells': len(host_state.numa_topology.cells)
            if host_state.numa_topology else 0,
        })
        action = spec_obj.get_scheduler_hint(RAISE_HINT)
        if action == 'novalidhost':
            raise exception.NoValidHost(reason='harness filter refused')
        if action == 'runtime':
            raise RuntimeError('harness filter crashed')
        denied = spec_obj.flavor.extra_specs.get(DENY_SPEC, '')
        return host_state.host not in {
            h.strip() for h in denied.split(',') if h.strip()}


class HarnessPreferHostWeigher(weights.BaseHostWeigher):
    """Test weigher: strongly prefer ``host2``.

    A host in an aggregate with ``harness_weight`` metadata gets that value
    as its raw weight instead, so aggregate metadata can override the
    preference.
    """

    PREFERRED_HOST = 'host2'

    def weight_multiplier(self, host_state) -> float:
        return 1000.0

    def _weigh_object(self, host_state, weight_properties) -> float:
        for agg in host_state.aggregates:
            if WEIGHT_KEY in agg.metadata:
                return float(agg.metadata[WEIGHT_KEY])
        return 1.0 if host_state.host == self.PREFERRED_HOST else 0.0


class OverheadEndpoint:
    """RPC endpoint recording the fanout casts it receives."""

    target = oslo_messaging.Target(version='1.0')

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []

    def overhead_changed(self, ctxt: Any, host: str, value: int) -> None:
        self.received.append({'host': host, 'value': value})


class HarnessTestCase(base.NUMAOverheadFunctionalBase):
    """Boots servers through the full stack with a test filter and weigher."""

    EXTRA_FILTERS = ['HarnessDenyFilter']
    EXTRA_FILTER_PATHS = [f'{__name__}.HarnessDenyFilter']
    WEIGHT_CLASSES = [
        base.NOVA_ALL_WEIGHERS, f'{__name__}.HarnessPreferHostWeigher']

    def setUp(self) -> None:
        HarnessDenyFilter.SEEN = []
        self.addCleanup(setattr, HarnessDenyFilter, 'SEEN', [])
        super().setUp()
        self.flavor_id = self.create_flavor_with_specs({})

    def _seen_for(self, host: str) -> list[dict[str, Any]]:
        return [s for s in HarnessDenyFilter.SEEN if s['host'] == host]

    def test_scheduler_config_and_numa_hosts(self) -> None:
        hm = self.host_manager
        self.assertEqual(
            base.NOVA_DEFAULT_FILTERS + ['HarnessDenyFilter'],
            [type(f).__name__ for f in hm.enabled_filters])
        self.assertIn('HarnessPreferHostWeigher',
                      [type(w).__name__ for w in hm.weighers])
        self.assertIn('RAMWeigher', [type(w).__name__ for w in hm.weighers])
        self.assertEqual(
            ['host1', 'host2', 'host3'], sorted(self.compute_rp_uuids))
        self.boot(self.flavor_id)
        for host in ('host1', 'host2', 'host3'):
            cells = {s['numa_cells'] for s in self._seen_for(host)}
            self.assertEqual({2}, cells, host)

    def test_server_lands_on_preferred_host(self) -> None:
        server = self.boot(self.flavor_id)
        self.assertEqual('host2', self.host_of(server))
        self.assertEqual('host2', server['OS-EXT-SRV-ATTR:host'])

    def test_filter_denies_preferred_host(self) -> None:
        flavor = self.create_flavor_with_specs({DENY_SPEC: 'host2'})
        server = self.boot(flavor)
        self.assertIn(self.host_of(server), ('host1', 'host3'))

    def test_filter_failing_all_hosts_gives_no_valid_host(self) -> None:
        flavor = self.create_flavor_with_specs(
            {DENY_SPEC: 'host1,host2,host3'})
        server = self.boot(flavor, expected_state='ERROR')
        self.assertIsNone(server['OS-EXT-SRV-ATTR:host'])
        self.assertIn('No valid host was found', server['fault']['message'])

    def test_filter_raising_no_valid_host_fails_the_request(self) -> None:
        server = self.boot(
            self.flavor_id, hints={RAISE_HINT: 'novalidhost'},
            expected_state='ERROR')
        self.assertEqual('No valid host was found. harness filter refused',
                         server['fault']['message'])
        # Raised on the first host: no other host was even looked at.
        self.assertEqual(1, len(HarnessDenyFilter.SEEN))
        # NoValidHost is an expected exception of select_destinations, so
        # oslo.messaging does not log a traceback for it on the scheduler.
        self.assertNotIn('Exception during message handling',
                         self.stdlog.logger.output)

    def test_filter_raising_other_exception_fails_the_request(self) -> None:
        server = self.boot(
            self.flavor_id, hints={RAISE_HINT: 'runtime'},
            expected_state='ERROR')
        # The conductor catches anything select_destinations raises and
        # buries the instance in cell0. For a non-nova exception the fault
        # message is just the class name; the text is in the admin-only
        # details (with the traceback) and the code is 500.
        fault = server['fault']
        self.assertEqual('RuntimeError', fault['message'])
        self.assertEqual(500, fault['code'])
        self.assertIn('harness filter crashed', fault['details'])
        self.assertEqual(1, len(HarnessDenyFilter.SEEN))
        # Unlike NoValidHost it is logged as an unexpected RPC failure.
        self.assertIn('Exception during message handling',
                      self.stdlog.logger.output)

    def test_aggregate_metadata_reaches_filter_and_weigher(self) -> None:
        agg = self.create_aggregate(
            'harness-agg', hosts=['host3'], metadata={WEIGHT_KEY: '10'})
        self.assertEqual(['host3'], agg['hosts'])
        server = self.boot(self.flavor_id)
        # The weigher read the metadata: host3 now beats host2.
        self.assertEqual('host3', self.host_of(server))
        self.assertEqual([[{WEIGHT_KEY: '10'}]],
                         [s['aggregate_metadata']
                          for s in self._seen_for('host3')])
        self.assertEqual([[]], [s['aggregate_metadata']
                                for s in self._seen_for('host2')])

    def test_scheduler_hint_reaches_filter(self) -> None:
        self.boot(self.flavor_id, hints={'harness_tag': 'abc'})
        self.assertEqual(3, len(HarnessDenyFilter.SEEN))
        for seen in HarnessDenyFilter.SEEN:
            # The API stores every hint value as a list of strings.
            self.assertEqual({'harness_tag': ['abc']}, seen['hints'])

    def test_extra_spec_namespace_validation(self) -> None:
        # An unknown namespace is accepted, at the latest microversion too.
        flavor = self.create_flavor_with_specs({DENY_SPEC: 'hostX'})
        self.assertEqual(
            {DENY_SPEC: 'hostX'}, self.admin_api.get_extra_specs(flavor))
        # An unknown key in a namespace nova knows is rejected from 2.86 on.
        ex = self.assertRaises(
            api_client.OpenStackApiException,
            self.create_flavor_with_specs, {'hw:harness_bogus': '1'})
        self.assertEqual(400, ex.response.status_code)
        # ...but accepted before 2.86, where nothing is validated.
        with utils.temporary_mutation(self.admin_api, microversion='2.85'):
            flavor = self.create_flavor_with_specs({'hw:harness_bogus': '1'})
        self.assertEqual({'hw:harness_bogus': '1'},
                         self.admin_api.get_extra_specs(flavor))


class FanoutRPCTestCase(base.NUMAOverheadFunctionalBase):
    """An extra fanout RPC topic works next to nova's services."""

    COMPUTE_HOSTNAMES = ('host1',)
    TOPIC = 'numa-overhead-test'

    def _wait_for(self, predicate, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                self.fail('timed out waiting for RPC delivery')
            time.sleep(0.05)

    def _start_server(self, server: oslo_messaging.MessageHandlingServer):
        server.start()
        self.addCleanup(server.wait)
        self.addCleanup(server.stop)

    def test_scheduler_rpc_executor(self) -> None:
        expected = ('threading' if utils.concurrency_mode_threading()
                    else 'eventlet')
        self.assertEqual(expected, self.scheduler.rpcserver.executor_type)

    def test_fanout_cast_reaches_every_listener(self) -> None:
        # The plugin's own transport, from the global config: 'fake://'.
        self.assertTrue(base.CONF.transport_url.startswith('fake:'))
        transport = oslo_messaging.get_rpc_transport(base.CONF)
        self.assertEqual('FakeDriver', type(transport._driver).__name__)

        # Listener A: plain oslo.messaging on the plugin's own transport.
        # Without an 'executor' argument (passing one is deprecated)
        # oslo.messaging picks 'eventlet' if threading is monkey patched.
        endpoint_a = OverheadEndpoint()
        server_a = oslo_messaging.get_rpc_server(
            transport,
            oslo_messaging.Target(topic=self.TOPIC, server='sched-a'),
            [endpoint_a])
        self.assertEqual(self.scheduler.rpcserver.executor_type,
                         server_a.executor_type)
        self._start_server(server_a)
        # Listener B: nova's helper on nova's own (shared) transport.
        endpoint_b = OverheadEndpoint()
        self._start_server(rpc.get_server(
            oslo_messaging.Target(topic=self.TOPIC, server='sched-b'),
            [endpoint_b]))

        client = oslo_messaging.get_rpc_client(
            transport, oslo_messaging.Target(topic=self.TOPIC, version='1.0'))
        client.prepare(fanout=True).cast(
            {}, 'overhead_changed', host='host1', value=42)
        # And once more through nova's client with a real RequestContext.
        rpc.get_client(
            oslo_messaging.Target(topic=self.TOPIC, version='1.0'),
        ).prepare(fanout=True).cast(
            nova_context.get_admin_context(), 'overhead_changed',
            host='host1', value=43)

        def both_got_both() -> bool:
            return all(len(e.received) == 2 for e in (endpoint_a, endpoint_b))

        self._wait_for(both_got_both)
        for endpoint in (endpoint_a, endpoint_b):
            # No ordering guarantee: the threading executor dispatches
            # incoming messages concurrently from a thread pool.
            self.assertEqual(
                [{'host': 'host1', 'value': 42},
                 {'host': 'host1', 'value': 43}],
                sorted(endpoint.received, key=lambda r: r['value']))


class NUMAFlavorTestCase(base.NUMAOverheadFunctionalBase):
    """The fake hosts really expose two NUMA cells to NUMATopologyFilter."""

    EXTRA_FILTERS = ['NUMATopologyFilter']

    def test_two_node_guest_fits(self) -> None:
        flavor = self.create_flavor_with_specs({'hw:numa_nodes': '2'})
        server = self.boot(flavor)
        inst = objects.Instance.get_by_uuid(
            nova_context.get_admin_context(), server['id'])
        self.assertEqual(2, len(inst.numa_topology.cells))

    def test_three_node_guest_does_not_fit(self) -> None:
        flavor = self.create_flavor_with_specs(
            {'hw:numa_nodes': '3'}, vcpus=3, ram_mb=3072)
        server = self.boot(flavor, expected_state='ERROR')
        self.assertIn('No valid host was found', server['fault']['message'])
