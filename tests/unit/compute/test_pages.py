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

import errno
import os
import subprocess
import sys
import tracemalloc

import fixtures
import testtools

from nova_numa_overhead.compute import hypervisor as hv_mod
from nova_numa_overhead.compute import mover
from nova_numa_overhead.compute import numa_stat
from nova_numa_overhead.compute import pages

# A stand-in for QEMU: 96 MiB of private anonymous "guest RAM" (QEMU's
# default), every page touched.
GUEST = """
import mmap, sys
ram = mmap.mmap(-1, 96 * 1024 * 1024,
                flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
for off in range(0, len(ram), mmap.PAGESIZE):
    ram[off] = 1
print('ready', flush=True)
sys.stdin.read()
"""


def read_maps(pid):
    texts = {}
    for name in ('numa_maps', 'maps'):
        try:
            with open('/proc/%d/%s' % (pid, name)) as f:
                texts[name] = f.read()
        except OSError:
            return None
    return texts


def move_pages(pid, addresses, node, batch):
    result = mover.PageMover(max_batch_pages=batch, rate_mb_per_s=0).move(
        pid, addresses, node)
    return {'requested': result.requested, 'moved': result.moved,
            'failed': dict(result.failed)}


class TestPageMoverOnARealProcess(testtools.TestCase):
    """The picker and mover on a real process (this host has node 0)."""

    def setUp(self):
        super().setUp()
        self.proc = subprocess.Popen([sys.executable, '-c', GUEST],
                                     stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.addCleanup(self._stop)
        self.assertEqual('ready', self.proc.stdout.readline().strip())
        # Helpers of this test's own take the pid where the privileged
        # helper takes (name, uuid).
        self.domain = (self.proc.pid,)
        self.tracked = []
        self.mover = pages.PageMover(
            read_maps=read_maps,
            page_nodes=lambda pid, a: mover.move_pages(pid, a, None),
            move_pages=move_pages,
            cold_pages=lambda pid, a: None,
            track_pages=lambda pid, extents: self.tracked.append(extents))

    def _stop(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=10)

    def test_guest_ram_is_found(self):
        ranges = self.mover.ranges(self.domain)
        self.assertTrue(ranges)
        self.assertGreaterEqual(ranges[0].resident_bytes, 96 * pages.MIB)

    def test_moves_the_asked_amount_from_the_source_node(self):
        result = self.mover(self.domain, [(0, 0, 8)], None)
        self.assertEqual(8 * pages.MIB // pages.PAGE_SIZE, result.requested)
        self.assertEqual(result.requested, result.moved)
        self.assertEqual({}, result.failed)

    def test_cold_pages_are_picked_first(self):
        ranges = self.mover.ranges(self.domain)
        first = ranges[0].start
        page = pages.PAGE_SIZE
        cold = [first + 5 * page, first + 9 * page]
        self.mover.cold_pages = lambda pid, a: [x for x in cold if x in a]
        picked = self.mover.pick(self.domain, ranges, 0, 4)
        self.assertEqual(cold + [first, first + page], picked)

    def test_tracking_restarts_after_a_move(self):
        self.mover(self.domain, [(0, 0, 1)], None)
        # One call for the guest, with its RAM's extents.
        self.assertEqual(1, len(self.tracked))
        self.assertGreaterEqual(
            sum((end - start) // size for start, end, size in self.tracked[0]),
            96 * pages.MIB // pages.PAGE_SIZE)

    def test_nothing_to_move_touches_nothing(self):
        # No budget, no MiB asked for, or nothing on the source node: no
        # mappings read for a zero budget, and no clear_refs at all.
        reads = []
        real = self.mover.read_maps
        self.mover.read_maps = lambda *a: reads.append(a) or real(*a)
        for moves, budget in (([(0, 0, 8)], 0), ([(0, 0, 0)], None)):
            result = self.mover(self.domain, moves, budget)
            self.assertEqual(0, result.requested)
        self.assertEqual([], reads)
        self.mover(self.domain, [(3, 0, 8)], None)
        self.assertEqual([], self.tracked)

    def test_page_budget_bounds_the_move(self):
        result = self.mover(self.domain, [(0, 0, 64)], 100)
        self.assertEqual(100, result.requested)

    def test_invalid_target_node_is_counted_not_raised(self):
        result = self.mover(self.domain, [(0, 4095, 1)], None)
        self.assertEqual(0, result.moved)
        self.assertEqual({'ENODEV': 1 * pages.MIB // pages.PAGE_SIZE},
                         result.failed)

    def test_nothing_on_the_source_node(self):
        result = self.mover(self.domain, [(3, 0, 8)], None)
        self.assertEqual(0, result.requested)

    def test_gone_process(self):
        self._stop()
        self.addCleanup(lambda: None)
        self.assertRaises(hv_mod.DomainGone, self.mover, self.domain,
                          [(0, 0, 1)], None)
        self.assertFalse(os.path.exists('/proc/%d/maps' % self.proc.pid))


class TestHelperFailures(testtools.TestCase):
    """What the helper's failures become for the agent."""

    def setUp(self):
        super().setUp()
        self.logger = self.useFixture(fixtures.FakeLogger(level='DEBUG'))
        guest = subprocess.Popen([sys.executable, '-c', GUEST],
                                 stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
        self.assertEqual('ready', guest.stdout.readline().strip())
        maps = read_maps(guest.pid)
        guest.communicate('')
        self.mover = pages.PageMover(
            read_maps=lambda name: maps,
            page_nodes=lambda name, a: [0] * len(a),
            move_pages=self.move_pages, cold_pages=lambda name, a: None,
            track_pages=lambda name, a: {'mode': None, 'error': 'clear_refs:'
                                         ' Permission denied (EACCES)'})
        self.failure = None

    def move_pages(self, name, addresses, node, batch):
        if self.failure is not None:
            raise self.failure
        return {'requested': len(addresses), 'moved': len(addresses),
                'failed': {}}

    def test_qemu_exit_mid_move_is_domain_gone(self):
        # The helper re-raises move_pages(2)'s ESRCH as a MoveError.
        self.failure = mover.MoveError(errno.ESRCH, 'no such process')
        self.assertRaises(hv_mod.DomainGone, self.mover, ('g',),
                          [(0, 1, 1)], None)

    def test_helper_not_started_is_a_hypervisor_error(self):
        from oslo_privsep import daemon
        self.failure = daemon.FailedToDropPrivileges(
            'privsep helper command exited non-zero (1)')
        error = self.assertRaises(hv_mod.HypervisorError, self.mover,
                                  ('g',), [(0, 1, 1)], None)
        self.assertIn('[numa_overhead_privileged] did not start', str(error))

    def test_other_errors_are_not_hidden(self):
        self.failure = RuntimeError('a bug')
        self.assertRaises(RuntimeError, self.mover, ('g',), [(0, 1, 1)],
                          None)

    def test_permission_error_is_a_hypervisor_error(self):
        self.failure = PermissionError(errno.EACCES, 'Permission denied',
                                       'pagemap')
        exc = self.assertRaises(hv_mod.HypervisorError, self.mover, ('g',),
                                [(0, 1, 1)], None)
        self.assertNotIsInstance(exc, hv_mod.DomainGone)
        self.assertIn('Permission denied', str(exc))

    def test_no_cold_page_tracking_warns_once_then_address_order(self):
        for _ in range(3):
            result = self.mover(('g',), [(0, 1, 1)], None)
            self.assertEqual(256 * 4096 // pages.PAGE_SIZE, result.moved)
        self.assertEqual(1, self.logger.output.count(
            'Cold-page tracking is not available (clear_refs: Permission '
            'denied (EACCES)): pages move in address order'))
        self.assertIsNone(self.mover.cold_pages)


class TestPartialMoves(testtools.TestCase):
    """Pages moved before a failure are counted, not lost with it."""

    START = 0x7f0000000000

    def texts(self, size):
        n = size // pages.PAGE_SIZE
        return {'numa_maps': '%x default anon=%d dirty=%d N0=%d '
                             'kernelpagesize_kB=%d\n'
                             % (self.START, n, n, n, pages.PAGE_SIZE // 1024),
                'maps': '%x-%x rw-p 00000000 00:00 0\n'
                        % (self.START, self.START + size)}

    def test_the_pages_moved_before_the_helper_died_are_counted(self):
        logger = self.useFixture(fixtures.FakeLogger(level='WARNING'))
        moved = []

        def move_pages(name, uuid, addresses, node, batch):
            moved.extend(addresses)
            return {'requested': len(addresses), 'moved': len(addresses),
                    'failed': {}}

        def track_pages(name, uuid, extents):
            # What the oslo.privsep client raises when its daemon dies.
            raise OSError('Premature eof waiting for privileged process')

        mover = pages.PageMover(
            read_maps=lambda n, u: self.texts(256 << 20),
            page_nodes=lambda n, u, a: [0] * len(a),
            move_pages=move_pages, cold_pages=lambda n, u, a: None,
            track_pages=track_pages)
        result = mover(('guest', 'uuid'), [(0, 1, 100)], None)
        self.assertEqual(100 * pages.MIB // pages.PAGE_SIZE, len(moved))
        self.assertEqual(len(moved), result.moved)
        self.assertIn('Page moves of guest stopped after', logger.output)

    def test_a_failure_before_any_page_moved_is_raised(self):
        def move_pages(name, uuid, addresses, node, batch):
            raise OSError(errno.EPERM, 'not permitted')

        mover = pages.PageMover(
            read_maps=lambda n, u: self.texts(256 << 20),
            page_nodes=lambda n, u, a: [0] * len(a),
            move_pages=move_pages, cold_pages=lambda n, u, a: None,
            track_pages=lambda n, u, a: None)
        self.assertRaises(hv_mod.HypervisorError, mover, ('guest', 'uuid'),
                          [(0, 1, 4)], None)


class TestPick(testtools.TestCase):
    """Which pages a move takes: the cold ones first, over more than one
    window, within a bounded scan.
    """

    START = 0x7f0000000000
    P = 4096

    def mover(self, windows, cold):
        n = windows * pages.WINDOW_PAGES
        self.ranges = [numa_stat.Range(
            start=self.START, policy='default', pages={0: n},
            page_size=self.P, anon=True, end=self.START + n * self.P)]
        self.scanned = []

        def page_nodes(name, addresses):
            self.scanned.extend(addresses)
            return [0] * len(addresses)

        return pages.PageMover(
            read_maps=lambda name: None, page_nodes=page_nodes,
            move_pages=lambda *a: None,
            cold_pages=lambda name, a: [x for x in a if x in cold],
            track_pages=lambda *a: None)

    def window(self, i):
        first = self.START + i * pages.WINDOW_PAGES * self.P
        return [first + k * self.P for k in range(pages.WINDOW_PAGES)]

    def test_cold_pages_of_later_windows_come_before_warm_ones(self):
        # A move of a whole window: the first two are in use, the third
        # is not.
        cold = set(self.window(2))
        mover = self.mover(3, cold)
        picked = mover.pick(('g',), self.ranges, 0, pages.WINDOW_PAGES)
        self.assertEqual(sorted(cold), picked)

    def test_warm_pages_fill_in_address_order(self):
        cold = set(self.window(1)[:10])
        mover = self.mover(3, cold)
        want = pages.WINDOW_PAGES // 2
        picked = mover.pick(('g',), self.ranges, 0, want)
        self.assertEqual(sorted(cold) + self.window(0)[:want - 10], picked)

    def test_the_scan_for_cold_pages_is_bounded(self):
        # Nothing cold in reach: the scan stops after COLD_SCAN times the
        # pages asked, and takes the first warm ones.
        windows = pages.COLD_SCAN + 4
        mover = self.mover(windows, set(self.window(windows - 1)))
        picked = mover.pick(('g',), self.ranges, 0, pages.WINDOW_PAGES)
        self.assertEqual(self.window(0), picked)
        self.assertEqual(pages.COLD_SCAN * pages.WINDOW_PAGES,
                         len(self.scanned))

    def test_without_cold_page_tracking_one_window_is_enough(self):
        mover = self.mover(3, set())
        mover.cold_pages = None
        picked = mover.pick(('g',), self.ranges, 0, 100)
        self.assertEqual(self.window(0)[:100], picked)
        self.assertEqual(pages.WINDOW_PAGES, len(self.scanned))


class TestRestartTracking(testtools.TestCase):
    """A tracking period starts with one helper call for the guest."""

    START = 0x7f0000000000
    GIB = 1 << 30

    def setUp(self):
        super().setUp()
        self.calls = []
        self.reply = {'mode': 'soft-dirty', 'error': ''}
        # Nothing may list a range's page addresses on the way.
        self.useFixture(fixtures.MockPatchObject(
            numa_stat.Range, 'addresses', autospec=True,
            side_effect=AssertionError('addresses listed')))

    def track_pages(self, name, uuid, extents):
        self.calls.append((name, uuid, extents))
        return self.reply

    def mover(self):
        return pages.PageMover(
            read_maps=lambda n, u: None, page_nodes=lambda n, u, a: [],
            move_pages=lambda *a: None, cold_pages=lambda n, u, a: None,
            track_pages=self.track_pages)

    def range(self, start, size, page_size, end=True):
        return numa_stat.Range(
            start=start, policy='default', pages={0: size // page_size},
            page_size=page_size, anon=True,
            end=start + size if end else None)

    def test_one_call_per_domain_with_the_extents(self):
        huge = 2 << 20
        ranges = [self.range(self.START, 8 * self.GIB, pages.PAGE_SIZE),
                  # Not in maps (gone meanwhile): no extent to track.
                  self.range(self.START + 9 * self.GIB, self.GIB,
                             pages.PAGE_SIZE, end=False),
                  self.range(self.START + 16 * self.GIB, 4 * self.GIB, huge)]
        self.mover().restart_tracking(('guest', 'uuid'), ranges)
        self.assertEqual(
            [('guest', 'uuid',
              [(self.START, self.START + 8 * self.GIB, pages.PAGE_SIZE),
               (self.START + 16 * self.GIB, self.START + 20 * self.GIB,
                huge)])],
            self.calls)

    def test_no_extents_no_call(self):
        self.mover().restart_tracking(('guest', 'uuid'), [self.range(
            self.START, self.GIB, pages.PAGE_SIZE, end=False)])
        self.assertEqual([], self.calls)

    def test_no_tracking_no_more_calls(self):
        self.reply = {'mode': None, 'error': 'clear_refs: EACCES'}
        mover = self.mover()
        ranges = [self.range(self.START, self.GIB, pages.PAGE_SIZE)]
        mover.restart_tracking(('guest', 'uuid'), ranges)
        mover.restart_tracking(('guest', 'uuid'), ranges)
        self.assertEqual(1, len(self.calls))
        self.assertIsNone(mover.track_pages)

    def test_a_64_gib_guest_costs_what_a_small_one_does(self):
        # Before: its 16M page addresses, listed and sent to the helper.
        ranges = [self.range(self.START, 64 * self.GIB, pages.PAGE_SIZE)]
        mover = self.mover()
        tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            mover.restart_tracking(('guest', 'uuid'), ranges)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        self.assertEqual(1, len(self.calls))
        self.assertLess(peak, 64 * 1024)
