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
"""NUMAOverheadFilter and NUMAOverheadWeigher inside real Nova 34.

Nova's API, conductor, placement and scheduler run in-process with three
fake libvirt computes of two NUMA cells each. Host reports travel as
oslo.messaging fanout casts on Nova's own (in-memory) transport, into the
store the filter and weigher started in the scheduler.
"""

import nova.tests.functional  # noqa: F401 - must be first, see base.py

import time

from nova.tests.functional.api import client as api_client

from nova_numa_overhead import conf as plugin_conf
from nova_numa_overhead.overhead import estimator
from nova_numa_overhead import report as report_mod
from nova_numa_overhead import rpc
from nova_numa_overhead.scheduler import store as store_mod
from tests.functional import base

FILTER_PATH = 'nova_numa_overhead.scheduler.filters.NUMAOverheadFilter'
WEIGHER_PATH = 'nova_numa_overhead.scheduler.weighers.NUMAOverheadWeigher'
CELL_MB = 8192


class NUMAOverheadTestBase(base.NUMAOverheadFunctionalBase):

    EXTRA_FILTERS = ['NUMAOverheadFilter']
    EXTRA_FILTER_PATHS = [FILTER_PATH]
    WEIGHT_CLASSES = [base.NOVA_ALL_WEIGHERS, WEIGHER_PATH]

    def setUp(self):
        super().setUp()
        plugin_conf.register_opts(base.CONF)
        # Overhead dominates Nova's other weighers in these tests.
        self.flags(weight_multiplier=10.0, group='numa_overhead')
        self.addCleanup(store_mod.reset_store)
        # The scheduler service built the filter: its listener starts in
        # the background; the reports below need it listening.
        self.store = store_mod.get_store(base.CONF)
        self.assertTrue(store_mod.listener().wait(30))
        self.publisher = rpc.ReportPublisher(base.CONF)
        self.seq = 0

    def publish(self, levels: dict, age: float = 0.0):
        """Cast one report per host: ``{host: level}``.

        Each host has two nodes with one guest each; the level is the LLC
        contention of both nodes, and the interconnect is so congested that
        the planner keeps a guest on its local node: the planned overhead of
        a guest is that level.
        """
        self.seq += 1
        topo = estimator.Topology.uniform(2)
        static = estimator.static_levels(topo)
        rejected = self.store.rejected
        for host, level in levels.items():
            report = report_mod.build(
                host, 'agent-' + host, '0.1.0', self.seq,
                estimator.Levels(llc=[level, level], mc=[0, 0],
                                 inter=[[0, 10], [10, 0]], rml=static.rml),
                total_mb=[CELL_MB] * 2, free_mb=[CELL_MB - 1024] * 2,
                guests=[1, 1], cpus=[4, 4], distances=topo.distances,
                age=age)
            self.assertTrue(self.publisher.publish(report))
        # A report already older than the TTL is refused on arrival.
        refused = age > base.CONF.numa_overhead.report_ttl
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if refused:
                if self.store.rejected - rejected == len(levels):
                    return
            elif all(e is not None and e.seq == self.seq
                     for e in map(self.store._entries.get, levels)):
                return
            time.sleep(0.02)
        self.fail('reports did not reach the scheduler store')


class TestNUMAOverheadScheduling(NUMAOverheadTestBase):

    def test_server_lands_on_the_low_overhead_host(self):
        flavor = self.create_flavor_with_specs({}, ram_mb=1024)
        self.publish({'host1': 6, 'host2': 1, 'host3': 4})
        self.assertEqual('host2', self.host_of(self.boot(flavor)))
        # The next report makes host3 the best: the next server goes there.
        self.publish({'host1': 6, 'host2': 5, 'host3': 0})
        self.assertEqual('host3', self.host_of(self.boot(flavor)))

    def test_flavor_max_level_novalidhost_then_a_host(self):
        flavor = self.create_flavor_with_specs(
            {'numa_overhead:max_level': '2'}, ram_mb=1024)
        self.publish({'host1': 3, 'host2': 5, 'host3': 4})
        server = self.boot(flavor, expected_state='ERROR')
        self.assertIn('No valid host', server['fault']['message'])
        self.publish({'host1': 3, 'host2': 2, 'host3': 4})
        self.assertEqual('host2', self.host_of(self.boot(flavor)))

    def test_hint_tightens_but_never_loosens_the_flavor(self):
        flavor = self.create_flavor_with_specs(
            {'numa_overhead:max_level': '5'}, ram_mb=1024)
        self.publish({'host1': 3, 'host2': 4, 'host3': 5})
        self.boot(flavor)
        self.boot(flavor, hints={'numa_overhead_max_level': '2'},
                  expected_state='ERROR')
        strict = self.create_flavor_with_specs(
            {'numa_overhead:max_level': '1'}, ram_mb=1024)
        self.boot(strict, hints={'numa_overhead_max_level': '9'},
                  expected_state='ERROR')

    def test_invalid_hint_is_ignored_with_a_reason(self):
        # nova-api checks no hint, and the request spec keeps it for every
        # later move of the server: ignored, not a NoValidHost.
        flavor = self.create_flavor_with_specs({}, ram_mb=1024)
        self.publish({'host1': 1, 'host2': 1, 'host3': 1})
        self.boot(flavor, hints={'numa_overhead_max_level': 'low'})
        self.assertIn("hint numa_overhead_max_level: 'low' is not an "
                      "integer", self.stdlog.logger.output)

    def test_bad_extra_spec_is_a_400_naming_the_key(self):
        flavor = self.create_flavor_with_specs({}, ram_mb=1024)
        for key, value in (('numa_overhead:max_level', '-1'),
                           ('numa_overhead:policy', 'fastest'),
                           ('numa_overhead:max_nodes', '0'),
                           ('numa_overhead:rebalance', 'sometimes'),
                           ('numa_overhead:maxlevel', '3')):
            exc = self.assertRaises(
                api_client.OpenStackApiException,
                self.admin_api.post_extra_spec, flavor,
                {'extra_specs': {key: value}})
            self.assertEqual(400, exc.response.status_code)
            self.assertIn(key, exc.response.text)
        self.admin_api.post_extra_spec(
            flavor, {'extra_specs': {'numa_overhead:policy': 'spread'}})

    def test_stale_reports_follow_the_configured_policy(self):
        flavor = self.create_flavor_with_specs(
            {'numa_overhead:max_level': '4'}, ram_mb=1024)
        self.flags(report_ttl=60, group='numa_overhead')
        # Measured 120 s ago: older than the TTL, so refused; every host
        # is unknown.
        self.publish({'host1': 1, 'host2': 1, 'host3': 1}, age=120.0)
        self.flags(unknown_host='fail', group='numa_overhead')
        self.boot(flavor, expected_state='ERROR')
        self.flags(unknown_host='pass', group='numa_overhead')
        self.boot(flavor)

    def test_aggregate_multiplier_changes_the_choice(self):
        flavor = self.create_flavor_with_specs({}, ram_mb=1024)
        self.publish({'host1': 0, 'host2': 2, 'host3': 6})
        self.assertEqual('host1', self.host_of(self.boot(flavor)))
        self.create_aggregate(
            'avoid-overhead-weigher', hosts=['host1'],
            metadata={'numa_overhead_weight_multiplier': '-10.0'})
        self.assertEqual('host2', self.host_of(self.boot(flavor)))


class TestBurstBetweenReports(NUMAOverheadTestBase):
    """Requests between two reports must not all pile onto one host."""

    # Only our weigher, so the effect is not Nova's RAMWeigher's spreading.
    WEIGHT_CLASSES = [WEIGHER_PATH]

    def _boot_three(self):
        flavor = self.create_flavor_with_specs({}, ram_mb=2048)
        self.publish({'host1': 1, 'host2': 2, 'host3': 3})
        return [self.host_of(self.boot(flavor)) for _ in range(3)]

    def test_without_correction_all_land_on_the_best_host(self):
        self.flags(claim_penalty=0.0, group='numa_overhead')
        self.assertEqual(['host1'] * 3, self._boot_three())

    def test_placements_since_the_report_count(self):
        self.flags(claim_penalty=1.5, group='numa_overhead')
        # host1's first node takes one guest, its second node the next
        # one; then both carry a claim and host2 is better.
        self.assertEqual(['host1', 'host1', 'host2'], self._boot_three())
