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

import gc
import tracemalloc
from unittest import mock

import fixtures

from nova_numa_overhead.overhead import planner
from nova_numa_overhead import report as report_mod
from nova_numa_overhead.scheduler import store as store_mod
from tests import base
from tests.unit import test_report

MiB_PER_GIB = 1024


class FakeClock:

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def four_node(**kwargs) -> dict:
    """A loaded 4-node host, planned by its agent unless policy=None."""
    args = dict(host='host1', nodes=4, llc=[0, 2, 1, 3], mc=[1, 0, 2, 0],
                guests=[2, 0, 1, 3], total_mb=65536,
                free_mb=[30000, 60000, 1000, 8000], policy='proportional')
    args.update(kwargs)
    return base.make_report(**args)


class StoreTestCase(base.TestCase):

    def setUp(self):
        super().setUp()
        self.clock = FakeClock()
        self.store = store_mod.ReportStore(self.conf, clock=self.clock)

    def lookup(self, host='host1', memory_mb=2048, policy='proportional',
               max_nodes=4, free_ram_mb=None, num_instances=None):
        return self.store.planned_overhead(host, free_ram_mb, num_instances,
                                           memory_mb, policy, max_nodes)

    def every_bucket(self, host='host1', policy='proportional',
                     max_nodes=4) -> list:
        return [self.lookup(host, mb, policy, max_nodes)
                for mb in planner.BUCKETS]


class TestBuckets(base.TestCase):

    def test_bucket_for(self):
        self.assertEqual(256, store_mod.bucket_for(1))
        self.assertEqual(2048, store_mod.bucket_for(2048))
        self.assertEqual(3072, store_mod.bucket_for(2049))
        self.assertEqual(4096, store_mod.bucket_for(3073))
        self.assertEqual(store_mod.BUCKETS[-1],
                         store_mod.bucket_for(10 ** 12))


class TestReportStore(StoreTestCase):

    def test_unknown_host(self):
        self.assertIs(store_mod.UNKNOWN, self.lookup())

    def test_accepts_and_looks_up(self):
        self.assertTrue(self.store.ingest(base.make_report(llc=[2, 1])))
        # Both nodes have guests: seen from node 1 (the better local node)
        # overheads are 3 and 1; the first step holds the request on node 1.
        self.assertEqual(1.0, self.lookup(memory_mb=2048))
        # One node cannot hold 24 GiB: the step rises, the nodes share it.
        self.assertEqual(2.0, self.lookup(memory_mb=24 * 1024))
        self.assertEqual(1, self.store.accepted)

    def test_rejected_report_is_logged_with_host(self):
        data = base.make_report(host='cmp-7')
        data['version'] = '9.0'
        self.assertFalse(self.store.ingest(data))
        self.assertIn('Rejected NUMA overhead report from host cmp-7: '
                      'unsupported report version 9.0', self.logger.output)
        self.assertFalse(self.store.ingest('garbage'))
        self.assertIn('from host <unknown>', self.logger.output)
        self.assertEqual(2, self.store.rejected)
        self.assertIs(store_mod.UNKNOWN, self.lookup(host='cmp-7'))

    def test_hostile_host_names_are_escaped_in_logs(self):
        for host in ('cmp-7\nRejected NUMA overhead report from host cmp-8',
                     'cmp\x00', 'cmp-\u202e7', 'x' * 10000):
            self.assertFalse(self.store.ingest(dict(base.make_report(),
                                                    host=host)))
        output = self.logger.output
        lines = output.splitlines()
        self.assertEqual(4, len(lines))
        self.assertTrue(all(line.startswith('Rejected NUMA overhead report '
                                            "from host '") for line in lines))
        self.assertNotIn('\x00', output)
        self.assertNotIn('\u202e', output)
        self.assertIn(r"from host 'cmp-7\nRejected", output)
        self.assertIn(r"from host 'cmp-\u202e7'", output)
        self.assertIn("from host '%s'..." % ('x' * 64), output)

    def test_older_sequence_is_ignored_newer_agent_is_not(self):
        self.store.ingest(base.make_report(seq=5, llc=0))
        self.assertFalse(self.store.ingest(base.make_report(seq=4, llc=4)))
        self.assertFalse(self.store.ingest(base.make_report(seq=5, llc=4)))
        self.assertEqual(0, self.store.get('host1').report.nodes[0].llc)
        # A restarted agent starts again at 1 with a new id.
        self.assertTrue(self.store.ingest(
            base.make_report(seq=1, llc=4, agent_id='agent-2')))
        self.assertEqual(4, self.store.get('host1').report.nodes[0].llc)

    def test_stale_reports_count_as_missing(self):
        self.flags(report_ttl=60)
        self.store.ingest(base.make_report(age=10.0))
        self.clock.now += 49
        self.assertIsNotNone(self.lookup())
        self.clock.now += 2
        self.assertIs(store_mod.UNKNOWN, self.lookup())
        self.assertIsNone(self.store.get('host1'))

    def test_does_not_fit(self):
        self.store.ingest(base.make_report(free_mb=1024, total_mb=2048))
        self.assertEqual(store_mod.DOES_NOT_FIT, self.lookup(memory_mb=4096))
        self.assertEqual(store_mod.DOES_NOT_FIT,
                         self.lookup(memory_mb=10 ** 7))

    def test_a_request_is_not_refused_for_its_buckets_size(self):
        # 3000 MiB free: 2100 MiB fit, though its bucket (3072) does not;
        # from the agent's plans and planned here alike.
        for policy in ('proportional', None):
            self.store.ingest(base.make_report(
                free_mb=1500, total_mb=4096, policy=policy,
                seq=1 if policy else 2))
            state = mock.Mock(host='host1', free_ram_mb=None,
                              num_instances=None)
            for lookup in (self.lookup, lambda memory_mb: self.store.query(
                    memory_mb, 'proportional', 4).overheads([state])[0]):
                self.assertNotEqual(store_mod.DOES_NOT_FIT,
                                    lookup(memory_mb=2100), policy)
                self.assertEqual(store_mod.DOES_NOT_FIT,
                                 lookup(memory_mb=3100))
        # Nova placed 500 MiB since: 2100 MiB still fit, 2600 no longer.
        self.lookup(memory_mb=2100, free_ram_mb=8000, num_instances=0)
        self.assertNotEqual(store_mod.DOES_NOT_FIT, self.lookup(
            memory_mb=2100, free_ram_mb=7500, num_instances=1))
        self.assertEqual(store_mod.DOES_NOT_FIT, self.lookup(
            memory_mb=2600, free_ram_mb=7500, num_instances=1))

    def test_other_policies_are_planned_on_first_use(self):
        self.store.ingest(base.make_report(guests=[0, 2], mc=[0, 3],
                                           policy='proportional'))
        self.assertEqual(0.0, self.lookup(policy='proportional'))
        entry = self.store.get('host1')
        self.assertIsNone(entry.lazy)
        self.assertGreater(self.lookup(policy='spread'), 0.0)
        self.assertEqual(1, len(entry.lazy))
        self.assertEqual(self.lookup(policy='local'),
                         self.lookup(policy='none'))
        # A few such plans are kept per host, no more.
        for max_nodes in range(1, 65):
            self.lookup(policy='spread', max_nodes=max_nodes)
        self.assertLessEqual(len(entry.lazy), store_mod.MAX_LAZY)

    def test_placements_since_the_report_raise_the_overhead(self):
        # One empty node: the first guest goes there at overhead 0.
        self.store.ingest(base.make_report(guests=[0, 3], mc=[0, 2],
                                           policy='proportional'))
        first = self.lookup(free_ram_mb=60000, num_instances=3)
        self.assertEqual(0.0, first)
        # Nova placed a 4 GiB guest here since: the node is no longer
        # empty, and carries the claim penalty.
        second = self.lookup(free_ram_mb=60000 - 4096, num_instances=4)
        self.assertGreater(second, first)
        # Without the penalty only free memory is corrected.
        self.flags(claim_penalty=0.0)
        self.assertEqual(first, self.lookup(free_ram_mb=60000 - 4096,
                                            num_instances=4))

    def test_correction_uses_free_memory(self):
        self.store.ingest(base.make_report(free_mb=4096, total_mb=32768))
        self.assertNotEqual(store_mod.DOES_NOT_FIT,
                            self.lookup(memory_mb=4096, free_ram_mb=8192,
                                        num_instances=1))
        self.assertEqual(store_mod.DOES_NOT_FIT,
                         self.lookup(memory_mb=4096, free_ram_mb=2048,
                                     num_instances=2))

    def test_forget(self):
        self.store.ingest(base.make_report(host='b'))
        self.store.ingest(base.make_report(host='a'))
        self.assertEqual(['a', 'b'], self.store.hosts())
        self.store.forget('a')
        self.assertEqual(['b'], self.store.hosts())

    def test_ingest_never_raises(self):
        deep = []
        for _ in range(100000):
            deep = [deep]
        good = base.make_report()
        for data in (None, 7, 'x', [], deep, {'host': deep},
                     dict(good, nodes=deep), dict(good, agent=deep),
                     dict(good, host=['unhashable']), {'version': deep},
                     dict(good, inter=[[10 ** 400] * 2] * 2),
                     dict(good, nodes=[{'total_mb': deep}] * 2)):
            self.assertFalse(self.store.ingest(data))
        # Valid, with a plan for buckets this scheduler does not know.
        self.assertTrue(self.store.ingest(dict(good, planned={
            'policy': 'proportional', 'max_nodes': 4, 'mb': deep,
            'overhead': [0]})))
        self.assertIsNone(self.store.get('host1').planned)
        self.assertNotIn('Traceback', self.logger.output)


class TestPlannedAtTheEdge(StoreTestCase):
    """Report format 1.1: the store looks the agent's plan up."""

    def test_the_agents_plan_is_looked_up(self):
        data = four_node()
        # A plan the planner would not make: the store answers it anyway,
        # so it did not plan (checking it would cost what it saves).
        data['planned']['overhead'] = [7.125] * len(data['planned']['mb'])
        self.assertTrue(self.store.ingest(data))
        self.assertEqual(7.125, self.lookup(memory_mb=3000))
        self.assertIsNone(self.store.get('host1').lazy)
        # Beyond the plan the host's free memory cannot hold the request.
        self.assertEqual(store_mod.DOES_NOT_FIT,
                         self.lookup(memory_mb=200 * MiB_PER_GIB))

    def test_agent_and_scheduler_plan_the_same(self):
        # The agent's plan (1.1) and the scheduler's own (the same report
        # without it) agree for every bucket, and with the planner.
        for kwargs in ({}, {'guests': 0}, {'free_mb': 65536},
                       {'llc': [4, 4, 0, 0], 'guests': [0, 5, 5, 0]}):
            planned = four_node(host='edge', **kwargs)
            unplanned = four_node(host='here', policy=None, **kwargs)
            self.assertTrue(self.store.ingest(planned))
            self.assertTrue(self.store.ingest(unplanned))
            self.assertIsNone(self.store.get('here').planned)
            view = report_mod.from_dict(unplanned).view()
            expected = []
            for mb in planner.BUCKETS:
                plan = planner.plan(view, mb, 'proportional', 4)
                expected.append(store_mod.DOES_NOT_FIT if plan is None
                                else plan.overhead)
            self.assertEqual(expected, self.every_bucket('edge'))
            self.assertEqual(expected, self.every_bucket('here'))
            self.store.forget('edge')
            self.store.forget('here')

    def test_stored_1_0_report_is_planned_here(self):
        data = test_report.stored_report()
        self.assertTrue(self.store.ingest(data))
        entry = self.store.get('cmp-legacy-7')
        self.assertIsNone(entry.planned)
        planned = base.make_report(
            host='cmp-new', nodes=4, llc=[2, 0, 1, 3], mc=[1, 0, 2, 4],
            inter=data['inter'], guests=[3, 0, 5, 2], total_mb=65536,
            free_mb=[30210, 61440, 12288, 40960], cpus=[16, 16, 16, 0],
            policy='proportional')
        self.assertTrue(self.store.ingest(planned))
        self.assertEqual(self.every_bucket('cmp-new'),
                         self.every_bucket('cmp-legacy-7'))
        # Node 1 is empty and the cheapest: it takes a guest alone.
        self.assertEqual(0.0, self.lookup('cmp-legacy-7', memory_mb=2048))
        self.assertEqual(1.75, self.lookup('cmp-legacy-7',
                                           memory_mb=64 * MiB_PER_GIB))

    def test_a_plan_of_another_policy_serves_that_policy(self):
        # The agent's default differs from this scheduler's: its plan
        # serves the requests of its policy, the others are planned here.
        self.assertTrue(self.store.ingest(four_node(policy='spread',
                                                    max_nodes=2)))
        entry = self.store.get('host1')
        spread = self.lookup(policy='spread', max_nodes=2)
        self.assertIsNone(entry.lazy)
        self.assertEqual(entry.planned[planner.bucket_index(2048)] / 1000,
                         spread)
        self.assertIsNotNone(self.lookup())
        self.assertEqual(1, len(entry.lazy))


class TestHostage(StoreTestCase):
    """No report can take a host hostage."""

    def setUp(self):
        super().setUp()
        self.warnings = self.useFixture(fixtures.FakeLogger(
            name=store_mod.__name__, level='WARNING',
            format='%(levelname)s %(message)s'))

    def test_implausible_sequence_jump_is_refused(self):
        self.assertTrue(self.store.ingest(base.make_report(seq=5, llc=0)))
        forged = base.make_report(seq=2 ** 50, llc=9)
        self.assertFalse(self.store.ingest(forged))
        self.assertIn('WARNING Refused NUMA overhead report 1125899906842624 '
                      'of host host1: 5 was received 0 s ago, a jump beyond '
                      '1000', self.warnings.output)
        # The genuine agent goes on.
        self.assertTrue(self.store.ingest(base.make_report(seq=6, llc=1)))
        self.assertEqual(1, self.store.get('host1').report.nodes[0].llc)
        # A plausible jump: many reports over a long silence.
        self.clock.now += 100
        self.assertTrue(self.store.ingest(base.make_report(seq=1900)))

    def test_any_jump_after_the_report_went_stale(self):
        self.flags(report_ttl=60)
        self.store.ingest(base.make_report(seq=5))
        self.clock.now += 61
        self.assertTrue(self.store.ingest(base.make_report(seq=10 ** 9)))

    def test_new_agent_run_replaces_whatever_its_sequence(self):
        self.store.ingest(base.make_report(seq=10 ** 6))
        self.assertTrue(self.store.ingest(
            base.make_report(seq=1, agent_id='agent-2', llc=3)))
        self.assertEqual(3, self.store.get('host1').report.nodes[0].llc)

    def test_another_run_s_older_report_does_not_replace_a_fresh_one(self):
        # The run before a restart, late (or two agents given one host
        # name): its figures are older than those held.
        self.assertTrue(self.store.ingest(
            base.make_report(seq=1, agent_id='agent-2', llc=3)))
        self.clock.now += 10
        self.assertFalse(self.store.ingest(
            base.make_report(seq=500, agent_id='agent-1', llc=7, age=120.0)))
        self.assertEqual(3, self.store.get('host1').report.nodes[0].llc)
        self.assertIn('Ignored NUMA overhead report 500 of host host1 from '
                      'agent agent-1: older than the one held from agent '
                      'agent-2', self.warnings.output)
        # Newer figures of the other run do.
        self.assertTrue(self.store.ingest(
            base.make_report(seq=501, agent_id='agent-1', llc=7, age=5.0)))
        self.assertEqual(7, self.store.get('host1').report.nodes[0].llc)

    def test_age_beyond_the_ttl_is_refused(self):
        self.flags(report_ttl=60)
        self.store.ingest(base.make_report(seq=1, llc=1))
        self.assertFalse(self.store.ingest(base.make_report(seq=2, llc=7,
                                                            age=61.0)))
        self.assertIn('WARNING Refused NUMA overhead report 2 of host host1: '
                      'its age of 61 s is beyond report_ttl (60 s)',
                      self.warnings.output)
        self.assertEqual(1, self.store.get('host1').report.nodes[0].llc)

    def test_warnings_are_rate_limited(self):
        for i in range(100):
            self.store.ingest(dict(base.make_report(host='bad-%d' % i),
                                   seq=-1))
        self.assertEqual(store_mod.LOG_BURST, self.logger.output.count(
            'Rejected NUMA overhead report'))
        self.clock.now += store_mod.LOG_INTERVAL
        self.store.ingest(dict(base.make_report(host='bad'), seq=-1))
        self.assertIn('%d more NUMA overhead reports rejected or refused in '
                      'the last 60 s' % (100 - store_mod.LOG_BURST),
                      self.logger.output)


class TestBoundedStore(StoreTestCase):

    def test_first_report_stale_back_and_forgotten_are_logged_once(self):
        self.flags(report_ttl=60)
        self.store.ingest(base.make_report(seq=1))
        self.store.ingest(base.make_report(seq=2))
        self.assertEqual(1, self.logger.output.count(
            'First NUMA overhead report of host host1 (agent 0.1.0)'))
        for _ in range(10):
            self.clock.now += 10
            self.store.sweep()
        self.assertEqual(1, self.logger.output.count(
            'Host host1 has sent no NUMA overhead report for 70 s '
            '(report_ttl 60 s): unknown to the filter and weigher until it '
            'reports again'))
        self.store.ingest(base.make_report(seq=3))
        self.store.ingest(base.make_report(seq=4))
        self.assertEqual(1, self.logger.output.count(
            'Host host1 reports NUMA overhead again after 100 s'))
        self.clock.now += 3 * 60 + 1
        self.store.sweep()
        self.assertIn('Forgot 1 hosts silent for more than 180 s: host1',
                      self.logger.output)
        self.assertEqual([], self.store.hosts())
        self.assertEqual(1, self.store.evicted)

    def test_sweep_runs_from_ingest(self):
        self.flags(report_ttl=10)
        self.store.ingest(base.make_report(host='gone'))
        self.clock.now += 31 + store_mod.SWEEP_INTERVAL
        self.store.ingest(base.make_report(host='here'))
        self.assertEqual(['here'], self.store.hosts())

    def test_sweep_runs_from_requests_when_no_report_arrives(self):
        # The broker away: no report comes, the requests still sweep.
        self.flags(report_ttl=10)
        self.store.ingest(base.make_report(host='gone'))
        self.clock.now += 11 + store_mod.SWEEP_INTERVAL
        self.store.query(1024, 'proportional', 4)
        self.assertIn('Host gone has sent no NUMA overhead report',
                      self.logger.output)
        self.clock.now += 30 + store_mod.SWEEP_INTERVAL
        self.store.query(1024, 'proportional', 4)
        self.assertEqual([], self.store.hosts())

    def test_a_request_never_waits_for_the_sweep(self):
        self.flags(report_ttl=10)
        self.store.ingest(base.make_report(host='gone'))
        self.clock.now += 11 + store_mod.SWEEP_INTERVAL
        with self.store._lock:
            self.store.query(1024, 'proportional', 4)
        self.assertNotIn('Host gone has sent', self.logger.output)

    def test_max_hosts_refuses_new_hosts_keeps_fresh_ones(self):
        self.flags(max_hosts=3, report_ttl=60)
        for host in ('a', 'b', 'c'):
            self.assertTrue(self.store.ingest(base.make_report(host=host)))
        for i in range(50):
            self.assertFalse(self.store.ingest(
                base.make_report(host='new-%d' % i)))
        self.assertEqual(['a', 'b', 'c'], self.store.hosts())
        self.assertEqual(50, self.store.refused)
        self.assertEqual(1, self.logger.output.count(
            'NUMA overhead store full ([numa_overhead] max_hosts = 3): '
            'refused the report of new host new-0'))
        # Hosts held go on reporting.
        self.assertTrue(self.store.ingest(base.make_report(host='a', seq=2)))
        # Once a host is no longer fresh, a new host may take its place.
        self.clock.now += 30
        self.store.ingest(base.make_report(host='a', seq=3))
        self.store.ingest(base.make_report(host='b', seq=2))
        self.clock.now += 31
        self.assertTrue(self.store.ingest(base.make_report(host='d')))
        self.assertEqual(['a', 'b', 'd'], self.store.hosts())
        self.clock.now += store_mod.LOG_INTERVAL
        self.store.sweep()
        self.assertIn('49 more reports of new hosts refused in the last 60 '
                      's', self.logger.output)

    def test_a_flood_of_made_up_hosts_is_bounded_by_max_hosts(self):
        self.flags(max_hosts=100)
        template = base.make_report(nodes=4, policy='proportional')

        def flood(first, count):
            for i in range(first, first + count):
                self.store.ingest(dict(template, host='made-up-%d' % i))

        flood(0, 100)
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.take_snapshot()
            flood(100, 2000)
            gc.collect()
            after = tracemalloc.take_snapshot()
        finally:
            tracemalloc.stop()
        grown = sum(s.size_diff for s in after.compare_to(before,
                                                          'filename'))
        self.assertEqual(100, len(self.store))
        self.assertEqual(2000, self.store.refused)
        # What 2,000 refused hosts leave: nothing per host.
        self.assertLess(grown, 64 * 1024)
        self.assertEqual(1, self.logger.output.count('store full'))
