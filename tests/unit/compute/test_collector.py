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
"""The collector's memory-bandwidth rates (resctrl monitoring)."""

import fixtures

from nova_numa_overhead.compute import collector as collector_mod
from nova_numa_overhead.compute import hypervisor as hv_mod
from tests import base
from tests.unit.compute import fakes

GB = 10 ** 9


class MonitoredHypervisor(fakes.FakeHypervisor):
    """A fake host whose guests' memory traffic the test sets."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.bytes = {}      # name -> {node: (local, total)}, cumulative
        self.error = None

    def traffic(self, name, per_node):
        """Add (local, total) bytes per node to a guest's counters."""
        counts = self.bytes.setdefault(name, {})
        for node, (local, total) in per_node.items():
            old = counts.get(node, (0, 0))
            counts[node] = (old[0] + local, old[1] + total)

    def memory_bandwidth(self, domains):
        if self.error is not None:
            raise self.error
        return {d.name: dict(self.bytes[d.name]) for d in domains
                if d.name in self.bytes}


class TestRates(base.TestCase):

    def setUp(self):
        super().setUp()
        self.collector = collector_mod.Collector()

    def test_rates_between_two_reads(self):
        self.collector.update_bandwidth({'a': {0: (1 * GB, 2 * GB)}}, 10.0)
        # One read: nothing to take a rate from yet.
        self.assertIsNone(self.collector.guests['a'].bandwidth)
        self.collector.update_bandwidth(
            {'a': {0: (5 * GB, 8 * GB), 1: (0, 2 * GB)}}, 12.0)
        # 4 GB local of 6 GB in 2 s; node 1 appeared in this read only.
        self.assertEqual({0: (2 * GB, 3 * GB)},
                         self.collector.guests['a'].bandwidth)
        self.collector.update_bandwidth(
            {'a': {0: (6 * GB, 9 * GB), 1: (0, 3 * GB)}}, 13.0)
        self.assertEqual({0: (GB, GB), 1: (0, GB)},
                         self.collector.guests['a'].bandwidth)

    def test_guest_without_a_monitor_has_none(self):
        self.collector.update('b', None, 1.0)
        for now in (1.0, 2.0):
            self.collector.update_bandwidth({'a': {0: (0, int(now))}}, now)
        self.assertIsNone(self.collector.guests['b'].bandwidth)
        self.assertIsNotNone(self.collector.guests['a'].bandwidth)
        # The monitor went away (Nova rewrote the XML): no rates, and a
        # new monitor starts from its first read again.
        self.collector.update_bandwidth({}, 3.0)
        self.assertIsNone(self.collector.guests['a'].bandwidth)
        self.collector.update_bandwidth({'a': {0: (0, 100)}}, 4.0)
        self.assertIsNone(self.collector.guests['a'].bandwidth)

    def test_counters_that_went_back_start_over(self):
        self.collector.update_bandwidth({'a': {0: (50, 100)}}, 1.0)
        self.collector.update_bandwidth({'a': {0: (10, 20)}}, 2.0)
        self.assertIsNone(self.collector.guests['a'].bandwidth)
        self.collector.update_bandwidth({'a': {0: (20, 40)}}, 3.0)
        self.assertEqual({0: (10, 20)}, self.collector.guests['a'].bandwidth)

    def test_a_read_at_the_same_instant_keeps_the_last_rates(self):
        self.collector.update_bandwidth({'a': {0: (0, 0)}}, 1.0)
        self.collector.update_bandwidth({'a': {0: (10, 10)}}, 2.0)
        self.collector.update_bandwidth({'a': {0: (99, 99)}}, 2.0)
        self.assertEqual({0: (10, 10)}, self.collector.guests['a'].bandwidth)
        # The baseline stayed at the earlier read.
        self.collector.update_bandwidth({'a': {0: (30, 30)}}, 3.0)
        self.assertEqual({0: (20, 20)}, self.collector.guests['a'].bandwidth)

    def test_local_is_capped_at_total(self):
        self.collector.update_bandwidth({'a': {0: (0, 0)}}, 1.0)
        self.collector.update_bandwidth({'a': {0: (105, 100)}}, 2.0)
        self.assertEqual({0: (100, 100)},
                         self.collector.guests['a'].bandwidth)

    def test_unusable_entries_are_no_measurement(self):
        for answer in ({'a': {0: 'lots'}}, {'a': {0: (-1, 5)}},
                       {'a': ['not', 'a', 'dict']}, {'a': None}):
            self.collector.update_bandwidth({'a': {0: (0, 0)}}, 1.0)
            self.collector.update_bandwidth(answer, 2.0)
            self.assertIsNone(self.collector.guests['a'].bandwidth, answer)

    def test_no_counter_read_no_rates(self):
        counters = hv_mod.DomainCounters(0, 0, 0, 0, 0)
        self.collector.update('a', counters, 1.0)
        self.assertTrue(self.collector.update(
            'a', hv_mod.DomainCounters(10, 20, 4, 2, 0), 2.0))
        self.assertEqual((10, 20, 4, 2), self.collector.guests['a'].delta)
        # A read that failed, or counters that went back: no rates, not
        # the last ones again.
        self.assertFalse(self.collector.update('a', None, 3.0))
        self.assertIsNone(self.collector.guests['a'].delta)
        self.collector.update('a', hv_mod.DomainCounters(50, 90, 9, 4, 0),
                              4.0)
        self.assertFalse(self.collector.update('a', counters, 5.0))
        self.assertIsNone(self.collector.guests['a'].delta)

    def test_a_second_read_at_the_same_time_keeps_the_baseline(self):
        # An event's cycle right after the sampling one: no sample, and
        # the next read's sample covers all the time since (not the
        # counts of no time, which read as a guest that did not run).
        self.collector.update('a', hv_mod.DomainCounters(0, 0, 0, 0, 0), 1.0)
        self.assertFalse(self.collector.update(
            'a', hv_mod.DomainCounters(10, 20, 4, 2, 0), 1.0))
        self.assertIsNone(self.collector.guests['a'].delta)
        self.assertTrue(self.collector.update(
            'a', hv_mod.DomainCounters(30, 60, 8, 4, 0), 2.0))
        self.assertEqual((30, 60, 8, 4), self.collector.guests['a'].delta)
        self.assertEqual(1.0, self.collector.guests['a'].seconds)

    def test_retain_forgets_them(self):
        self.collector.update_bandwidth({'a': {0: (0, 0)}}, 1.0)
        self.collector.retain([])
        self.assertEqual({}, self.collector.guests)

    def test_window_goes_with_its_guest(self):
        self.collector.update('a', hv_mod.DomainCounters(0, 0, 0, 0, 0), 1.0)
        self.assertTrue(self.collector.update(
            'a', hv_mod.DomainCounters(10, 20, 4, 2, 0), 3.0))
        self.assertEqual(2.0, self.collector.guests['a'].seconds)
        self.assertIsNotNone(self.collector.windows.mean('a'))
        self.collector.retain([])
        self.assertIsNone(self.collector.windows.mean('a'))


class TestMeasure(base.TestCase):

    def setUp(self):
        super().setUp()
        self.collector = collector_mod.Collector()
        self.hv = MonitoredHypervisor(nodes=2)
        self.hv.add('a', {0: 1024})
        self.hv.add('b', {1: 1024})

    def measure(self, now):
        self.collector.measure_bandwidth(self.hv, self.hv.domains(), now)

    def test_through_the_hypervisor(self):
        self.hv.traffic('a', {0: (0, 0), 1: (0, 0)})
        self.measure(1.0)
        self.hv.traffic('a', {0: (3 * GB, 4 * GB), 1: (0, GB)})
        self.measure(2.0)
        self.assertEqual({0: (3 * GB, 4 * GB), 1: (0, GB)},
                         self.collector.guests['a'].bandwidth)
        self.assertNotIn('b', self.collector.guests)

    def test_hypervisors_without_the_source(self):
        # The base class's answer, and a hypervisor without the method.
        hv = fakes.FakeHypervisor(nodes=2)
        hv.add('a', {0: 1024})
        self.collector.update('a', None, 0.0)
        self.collector.measure_bandwidth(hv, hv.domains(), 1.0)

        class Bare:
            pass
        self.collector.measure_bandwidth(Bare(), hv.domains(), 2.0)
        self.assertIsNone(self.collector.guests['a'].bandwidth)
        self.assertEqual('', self.logger.output)

    def test_errors_are_no_source_logged_once(self):
        warned = self.useFixture(fixtures.FakeLogger(level='WARNING'))
        self.hv.traffic('a', {0: (0, 0)})
        self.measure(1.0)
        self.hv.traffic('a', {0: (GB, GB)})
        self.measure(2.0)
        for error in (hv_mod.HypervisorError('stats refused'),
                      RuntimeError('a bug')):
            self.hv.error = error
            self.measure(3.0)
            # The same kind of error, in other words: not logged again.
            self.hv.error = type(error)('%s, again' % error)
            self.measure(4.0)
            self.assertIsNone(self.collector.guests['a'].bandwidth)
        lines = warned.output.splitlines()
        self.assertEqual(
            ['No memory bandwidth measurement (HypervisorError: stats '
             'refused)',
             'No memory bandwidth measurement (RuntimeError: a bug)'],
            lines)
        # Back: measured again from the next pair of reads.
        self.hv.error = None
        self.measure(5.0)
        self.hv.traffic('a', {0: (GB, 2 * GB)})
        self.measure(6.0)
        self.assertEqual({0: (GB, 2 * GB)},
                         self.collector.guests['a'].bandwidth)

    def test_a_lost_connection_is_not_a_missing_source(self):
        self.hv.error = hv_mod.HypervisorUnavailable('connection closed')
        self.assertRaises(hv_mod.HypervisorUnavailable, self.measure, 1.0)

    def test_an_answer_that_is_not_a_mapping(self):
        self.hv.memory_bandwidth = lambda domains: ['a']
        self.measure(1.0)
        self.assertIn('No memory bandwidth measurement (not a mapping',
                      self.logger.output)
        self.assertEqual({}, self.collector.guests)


class TestCountersMissingVcpus(base.TestCase):
    """Libvirt's perf events opened on QEMU's main thread only (turned on
    while the guest ran, or again after a libvirtd restart).
    """

    @staticmethod
    def read(cycles, vcpu_ns):
        return hv_mod.DomainCounters(cycles // 2, cycles, 1000, 100, 0,
                                     vcpu_ns=vcpu_ns)

    def test_samples_that_miss_the_vcpus_are_left_out(self):
        collector = collector_mod.Collector()
        self.assertFalse(collector.update('g', self.read(0, 1), 0.0))
        # The vCPUs ran 2 s, 0.3 ms worth of cycles were counted.
        for second in (1, 2):
            self.assertFalse(collector.update(
                'g', self.read(second * 600000, 1 + second * 2 * 10 ** 9),
                float(second)))
            self.assertIsNone(collector.guests['g'].delta)
        self.assertEqual(1, self.logger.output.count(
            'The perf counters of g miss its vCPUs'))
        self.assertIn('enabled_perf_events = cpu_cycles, instructions, '
                      'cache_references, cache_misses in',
                      self.logger.output)
        # Counting all threads again (a new QEMU with the events on).
        self.assertTrue(collector.update(
            'g', self.read(1200000 + 4 * 10 ** 9, 1 + 6 * 10 ** 9), 3.0))

    def test_idle_or_unknown_vcpu_time_is_no_evidence(self):
        collector = collector_mod.Collector()
        collector.update('idle', self.read(0, 1), 0.0)
        # 10 ms of vCPU time: too little to judge.
        self.assertTrue(collector.update('idle', self.read(100, 10 ** 7 + 1),
                                         1.0))
        collector.update('unknown', self.read(0, 0), 0.0)
        self.assertTrue(collector.update('unknown', self.read(100, 0), 1.0))
        self.assertNotIn('miss its vCPUs', self.logger.output)


class TestRestarted(base.TestCase):

    def test_a_new_qemus_first_read_is_no_sample(self):
        # Its counters already past the old QEMU's last read: no decrease
        # tells the restart.
        collector = collector_mod.Collector()
        read = TestCountersMissingVcpus.read
        collector.update('g', read(1000, 0), 0.0)
        collector.restarted('g')
        self.assertFalse(collector.update('g', read(5000, 0), 1.0))
        self.assertIsNone(collector.guests['g'].delta)
        self.assertTrue(collector.update('g', read(9000, 0), 2.0))
        self.assertEqual(4000, collector.guests['g'].delta[1])
        collector.restarted('unknown')
