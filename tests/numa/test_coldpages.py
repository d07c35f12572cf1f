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
"""Cold-first page order with what the Debian kernel has.

Its config (6.1, amd64) has CONFIG_MEM_SOFT_DIRTY=y and no
CONFIG_IDLE_PAGE_TRACKING: the agent uses soft-dirty bits there.
"""

import os

from nova_numa_overhead.compute import coldpages
from nova_numa_overhead.compute import numa_stat
from nova_numa_overhead.compute import pages
from tests.numa import base
from tests.numa import helpers

MIB = helpers.MIB


class TestColdPages(base.TestCase):
    """As the page helper runs it once it verified the process (as QEMU's
    user in the documented deployment, as root here).
    """

    def test_kernel_offers_soft_dirty(self):
        self.assertFalse(os.path.exists(coldpages.PAGE_IDLE_BITMAP))
        self.assertEqual(coldpages.SOFT_DIRTY_MODE, coldpages.mode())

    def test_written_pages_come_last(self):
        helper = self.useFixture(base.HelperFixture([(0, 64)])).helper
        addresses = helper.addresses()
        proc = helpers.opener(helper.pid)
        self.assertEqual(coldpages.SOFT_DIRTY_MODE, coldpages.start(
            proc, [(helper.start, helper.end, helpers.PAGE)]))
        # The guest writes one page in every 8 MiB: with transparent huge
        # pages the kernel marks the whole 2 MiB page written.
        written = list(range(0, 64 * MIB, 8 * MIB))
        helper.touch(written)
        cold = set(coldpages.cold(proc, addresses))
        hot = set(a for a in addresses if a not in cold)
        for offset in written:
            self.assertIn(helper.start + offset, hot)
        # Pages 4 MiB away from any write were not written.
        far = [a for a in addresses
               if all(abs(a - helper.start - w) >= 4 * MIB
                      for w in written)]
        self.assertTrue(far)
        self.assertEqual(set(), set(far) - cold)
        self.assertLess(len(hot), len(addresses) // 2)
        # The page picker takes the cold ones first.
        mover = helpers.page_mover()
        ranges = numa_stat.guest_ram_ranges(
            numa_stat.read_ranges(helper.pid))
        self.assertEqual(helper.start, ranges[0].start)
        window = addresses[:pages.WINDOW_PAGES]
        picked = mover.pick((helper.pid,), ranges, 0, len(window))
        cold_first = [a for a in window if a in cold]
        self.assertTrue(cold_first)
        self.assertEqual(cold_first, picked[:len(cold_first)])
        # Then those of the next windows, before any written page.
        self.assertEqual(len(window), len(picked))
        self.assertEqual(set(), set(picked) - cold)
        self.assertEqual(sorted(picked), picked)
