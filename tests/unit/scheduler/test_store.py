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

from nova_numa_overhead.scheduler import store as store_mod
from tests import base


class FakeClock:

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class TestBuckets(base.TestCase):

    def test_bucket_for(self):
        self.assertEqual(256, store_mod.bucket_for(1))
        self.assertEqual(2048, store_mod.bucket_for(2048))
        self.assertEqual(3072, store_mod.bucket_for(2049))
        self.assertEqual(4096, store_mod.bucket_for(3073))
        self.assertEqual(store_mod.BUCKETS[-1],
                         store_mod.bucket_for(10 ** 12))


class TestReportStore(base.TestCase):

    def setUp(self):
        super().setUp()
        self.clock = FakeClock()
        self.store = store_mod.ReportStore(self.conf, clock=self.clock)

    def lookup(self, host='host1', memory_mb=2048, policy='proportional',
               max_nodes=4, free_ram_mb=None, num_instances=None):
        return self.store.planned_overhead(host, free_ram_mb, num_instances,
                                           memory_mb, policy, max_nodes)

    def test_unknown_host(self):
        self.assertIs(store_mod.UNKNOWN, self.lookup())

    def test_accepts_and_plans_at_arrival(self):
        self.assertTrue(self.store.ingest(base.make_report(llc=[2, 1])))
        entry = self.store.get('host1')
        # The default policy is planned for every bucket the host can hold.
        keys = {k for k in entry.plans if k[0] == 'proportional'}
        self.assertEqual(len([b for b in store_mod.BUCKETS
                              if b <= entry.total_mb]), len(keys))
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

    def test_other_policies_are_planned_on_first_use(self):
        self.store.ingest(base.make_report(guests=[0, 2], mc=[0, 3]))
        self.assertEqual(0.0, self.lookup(policy='proportional'))
        self.assertNotIn(('spread', 4, 2048),
                         self.store.get('host1').plans)
        self.assertGreater(self.lookup(policy='spread'), 0.0)
        self.assertIn(('spread', 4, 2048), self.store.get('host1').plans)
        self.assertEqual(self.lookup(policy='local'),
                         self.lookup(policy='none'))

    def test_placements_since_the_report_raise_the_overhead(self):
        # One empty node: the first guest goes there at overhead 0.
        self.store.ingest(base.make_report(guests=[0, 3], mc=[0, 2]))
        first = self.lookup(free_ram_mb=60000, num_instances=3)
        self.assertEqual(0.0, first)
        # Nova placed a 4 GiB guest here since: the node is no longer
        # empty, and carries the claim penalty.
        second = self.lookup(free_ram_mb=60000 - 4096, num_instances=4)
        self.assertGreater(second, first)
        # Without the penalty only free memory is corrected.
        self.flags(claim_penalty=0.0)
        self.store.get('host1').corrected.clear()
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
