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
"""Pages between real nodes: numa_maps, move_pages, the mover, privsep."""

import errno
import time

from nova_numa_overhead.compute import mover
from nova_numa_overhead.compute import numa_stat
from nova_numa_overhead.compute import placer
from tests.numa import base
from tests.numa import helpers

MIB = helpers.MIB


class TestNumaMaps(base.TestCase):

    def _check(self):
        helper = self.useFixture(base.HelperFixture(
            [(0, 16), (2, 16), (3, 32)])).helper
        rng = helper.region()
        self.assertEqual(helper.end, rng.end)
        # numa_maps counts base pages, THP or not.
        self.assertEqual({0: 16 * 256, 2: 16 * 256, 3: 32 * 256},
                         {n: c for n, c in rng.pages.items() if c})
        self.assertIn(rng, numa_stat.guest_ram_ranges(
            numa_stat.read_ranges(helper.pid)))
        # move_pages' query mode (no nodes) finds the same pages there.
        self.assertEqual(
            {n: c for n, c in rng.pages.items() if c},
            mover.PageMover(rate_mb_per_s=0).query(helper.pid,
                                                   rng.addresses()))
        whole = numa_stat.read_numa_maps(helper.pid)
        for node, count in rng.pages.items():
            self.assertGreaterEqual(whole[node], count // 256)

    def test_three_nodes_balancing_off(self):
        with base.numa_balancing(False):
            self._check()

    def test_three_nodes_balancing_on(self):
        with base.numa_balancing(True):
            self._check()


class TestMover(base.TestCase):
    """The mover on plain processes, below the helper's identity check
    (the entrypoints themselves are in test_libvirt, on QEMU).
    """

    def _planned_shares(self):
        helper = self.useFixture(base.HelperFixture([(0, 64)])).helper
        before = helper.nodes_mb()
        self.assertEqual({0: 64}, before)
        plan = {0: 16, 2: 16, 3: 32}
        moves = placer.moves_towards(before, plan)
        self.assertEqual([(0, 3, 32), (0, 2, 16)], moves)
        # The agent's page picker and mover.
        result = helpers.page_mover()((helper.pid,), moves, None)
        self.assertEqual(48 * 256, result.requested)
        self.assertEqual(48 * 256, result.moved, result.failed)
        self.assertEqual({}, result.failed)
        self.assertEqual(plan, helper.nodes_mb())

    def test_planned_shares_balancing_off(self):
        with base.numa_balancing(False):
            self._planned_shares()

    def test_planned_shares_balancing_on(self):
        with base.numa_balancing(True):
            self._planned_shares()

    def test_rate_limit(self):
        helper = self.useFixture(base.HelperFixture([(0, 16)])).helper
        rate = mover.PageMover(max_batch_pages=256, rate_mb_per_s=8)
        start = time.monotonic()
        result = rate.move(helper.pid, helper.addresses(), 2)
        elapsed = time.monotonic() - start
        self.assertEqual(16 * 256, result.moved, result.failed)
        # The bucket holds one batch (1 MiB): the other 15 MiB at 8 MiB/s.
        self.assertGreaterEqual(elapsed, 15 / 8.0)
        self.assertEqual({2: 16}, helper.nodes_mb())

    def test_full_node_is_counted_not_raised(self):
        helper = self.useFixture(base.HelperFixture([(0, 32)])).helper
        self.addCleanup(helpers.reserve_hugepages, 3, 0)
        # Node 3 filled with huge pages, but for a few MiB.
        helpers.reserve_hugepages(3, 10 ** 6)
        free = helpers.node_free_mb(3)
        self.assertLess(free, 32)
        result = helpers.move_pages(helper.pid, helper.addresses(), 3, 1024)
        self.assertEqual(32 * 256, result['requested'])
        self.assertLess(result['moved'], 32 * 256)
        self.assertTrue(result['failed'], result)
        self.assertEqual(32 * 256, result['moved'] +
                         sum(result['failed'].values()))
        # What did not move is still where it was.
        where = helper.nodes_mb()
        self.assertEqual(32, where.get(0, 0) + where.get(3, 0))
        # Within a few pages: a CI run once found one 4 KiB page more on
        # node 3 than move_pages reported moved (it reclaims and retries
        # on a nearly full node).
        self.assertAlmostEqual(result['moved'] / 256, where.get(3, 0),
                               delta=4 / 256)

    def test_node_without_memory_or_outside_is_counted(self):
        helper = self.useFixture(base.HelperFixture([(0, 4)],
                                                    thp=False)).helper
        result = helpers.move_pages(helper.pid, helper.addresses(), 9, 256)
        self.assertEqual({'requested': 1024, 'moved': 0,
                          'failed': {errno.errorcode[errno.ENODEV]: 1024}},
                         result)
