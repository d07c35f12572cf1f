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
from unittest import mock

import fixtures
import testtools

from nova_numa_overhead.compute import hypervisor
from nova_numa_overhead.compute import mover

MIB = 1024 * 1024
PAGE = os.sysconf('SC_PAGE_SIZE')

# A process with 8 MiB of touched anonymous memory and 16 untouched pages;
# prints "<touched addr> <pages> <untouched addr> <pages>" and waits.
CHILD = """
import ctypes, mmap, sys
page = mmap.PAGESIZE
touched = mmap.mmap(-1, 8 * 1024 * 1024)
for offset in range(0, len(touched), page):
    touched[offset] = 1
untouched = mmap.mmap(-1, 16 * page)
def address(m):
    return ctypes.addressof(ctypes.c_char.from_buffer(m))
print(address(touched), len(touched) // page,
      address(untouched), len(untouched) // page, flush=True)
sys.stdin.read()
"""


class Child(fixtures.Fixture):
    """A live child process with known touched and untouched pages.

    ``args``: more command line arguments (ignored by the child);
    ``user``: run it as this user and group id.
    """

    def __init__(self, args=(), user=None, python=sys.executable):
        super().__init__()
        self.args = list(args)
        self.user = user
        self.python = python

    def _setUp(self):
        kwargs = {}
        if self.user is not None:
            kwargs = {'user': self.user, 'group': self.user,
                      'extra_groups': []}
        self.proc = subprocess.Popen(
            [self.python, '-c', CHILD] + self.args, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, **kwargs)
        self.addCleanup(self._stop)
        touched, n_touched, untouched, n_untouched = map(
            int, self.proc.stdout.readline().split())
        self.pid = self.proc.pid
        self.touched = [touched + i * PAGE for i in range(n_touched)]
        self.untouched = [untouched + i * PAGE for i in range(n_untouched)]

    def _stop(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen([sys.executable, '-c', 'pass'])
    proc.wait()
    return proc.pid


def online_node(node: int) -> bool:
    return os.path.exists('/sys/devices/system/node/node%d' % node)


class TestSyscallNumber(testtools.TestCase):

    def test_known_machines(self):
        self.assertEqual(279, mover.syscall_number('x86_64'))
        self.assertEqual(239, mover.syscall_number('aarch64'))

    def test_unknown_machine(self):
        exc = self.assertRaises(mover.MoveError, mover.syscall_number,
                                'pdp11')
        self.assertEqual(errno.ENOSYS, exc.errno)
        self.assertEqual('ENOSYS', exc.name)

    @mock.patch('platform.machine', autospec=True, return_value='aarch64')
    def test_uses_platform_machine(self, machine):
        self.assertEqual(239, mover.syscall_number())
        machine.assert_called_once_with()


class TestMovePagesSyscall(testtools.TestCase):
    """The real move_pages(2) on this machine (node 0 only)."""

    def setUp(self):
        super().setUp()
        try:
            mover.syscall_number()
        except mover.MoveError:
            self.skipTest('move_pages not known on this architecture')
        self.child = self.useFixture(Child())

    def test_query_touched_and_untouched_pages(self):
        statuses = mover.move_pages(
            self.child.pid, self.child.touched + self.child.untouched +
            [PAGE], None)
        touched = len(self.child.touched)
        self.assertEqual([0] * touched, statuses[:touched])
        self.assertEqual([-errno.ENOENT] * len(self.child.untouched),
                         statuses[touched:-1])
        self.assertEqual(-errno.EFAULT, statuses[-1])   # not mapped

    def test_empty(self):
        self.assertEqual([], mover.move_pages(self.child.pid, [], None))

    def test_nodes_must_match_addresses(self):
        self.assertRaises(ValueError, mover.move_pages, self.child.pid,
                          self.child.touched[:2], [0])

    def test_invalid_node_fails_the_whole_call(self):
        # The kernel checks every target node before moving anything:
        # a node that is not online fails the call with ENODEV.
        for node in (63, 4096, -1):
            if online_node(node):
                continue
            exc = self.assertRaises(mover.MoveError, mover.move_pages,
                                    self.child.pid, self.child.touched[:4],
                                    [node] * 4)
            self.assertEqual(errno.ENODEV, exc.errno)

    def test_dead_pid(self):
        exc = self.assertRaises(mover.MoveError, mover.move_pages,
                                dead_pid(), self.child.touched[:1], None)
        self.assertEqual(errno.ESRCH, exc.errno)
        self.assertEqual('ESRCH', exc.name)


class TestPageMoverReal(testtools.TestCase):
    """PageMover against a real child process."""

    def setUp(self):
        super().setUp()
        try:
            mover.syscall_number()
        except mover.MoveError:
            self.skipTest('move_pages not known on this architecture')
        self.child = self.useFixture(Child())
        self.mover = mover.PageMover(max_batch_pages=300, rate_mb_per_s=0)

    def test_move_to_node0_then_query(self):
        pages = self.child.touched
        result = self.mover.move(self.child.pid, pages, 0)
        self.assertEqual(hypervisor.MoveResult(requested=len(pages),
                                               moved=len(pages), failed={}),
                         result)
        self.assertEqual({0: len(pages)},
                         self.mover.query(self.child.pid, pages))

    def test_absent_and_unmapped_pages_are_counted(self):
        pages = self.child.touched[:10] + self.child.untouched + [PAGE]
        result = self.mover.move(self.child.pid, pages, 0)
        self.assertEqual(len(pages), result.requested)
        self.assertEqual(10, result.moved)
        self.assertEqual({'ENOENT': len(self.child.untouched), 'EFAULT': 1},
                         result.failed)
        self.assertEqual({0: 10}, self.mover.query(self.child.pid, pages))

    def test_invalid_node_is_counted_not_raised(self):
        pages = self.child.touched
        for node in (63, 4096):
            if online_node(node):
                continue
            result = self.mover.move(self.child.pid, pages, node)
            self.assertEqual(hypervisor.MoveResult(
                requested=len(pages), moved=0,
                failed={'ENODEV': len(pages)}), result)
        # The pages stayed where they were.
        self.assertEqual({0: len(pages)},
                         self.mover.query(self.child.pid, pages))

    def test_dead_pid_raises(self):
        exc = self.assertRaises(mover.MoveError, self.mover.move,
                                dead_pid(), self.child.touched, 0)
        self.assertEqual(errno.ESRCH, exc.errno)
        self.assertEqual(hypervisor.MoveResult(
            requested=len(self.child.touched), moved=0), exc.result)
        exc = self.assertRaises(mover.MoveError, self.mover.query,
                                dead_pid(), self.child.touched)
        self.assertEqual(errno.ESRCH, exc.errno)


class FakeClock:
    """A clock that only moves when slept on."""

    def __init__(self):
        self.now = 100.0
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


class TestPageMoverBatchesAndRate(testtools.TestCase):
    """Batching, accounting and the token bucket, with a fake syscall."""

    def setUp(self):
        super().setUp()
        self.clock = FakeClock()
        self.move_pages = self.useFixture(fixtures.MockPatchObject(
            mover, 'move_pages', autospec=True,
            side_effect=self._all_moved)).mock

    @staticmethod
    def _all_moved(pid, addresses, nodes, flags=mover.MPOL_MF_MOVE):
        return [0] * len(addresses) if nodes is None else list(nodes)

    def _mover(self, rate, batch=256):
        # 256 pages of 4 KiB = 1 MiB per batch.
        return mover.PageMover(max_batch_pages=batch, rate_mb_per_s=rate,
                               page_size=4096, clock=self.clock,
                               sleep=self.clock.sleep)

    def test_batches_are_bounded(self):
        result = self._mover(0, batch=100).move(7, list(range(250)), 1)
        self.assertEqual(hypervisor.MoveResult(250, 250, {}), result)
        self.assertEqual([100, 100, 50],
                         [len(c.args[1]) for c in
                          self.move_pages.call_args_list])
        self.move_pages.assert_called_with(7, list(range(200, 250)),
                                           [1] * 50, mover.MPOL_MF_MOVE)
        self.assertEqual([], self.clock.sleeps)

    def test_rate_limits_average(self):
        # 4 MiB at 1 MiB/s: one batch of burst, then a second per batch.
        m = self._mover(1.0)
        m.move(7, list(range(1024)), 0)
        self.assertEqual([1.0, 1.0, 1.0], self.clock.sleeps)
        self.assertEqual(103.0, self.clock.now)

    def test_rate_holds_across_calls(self):
        m = self._mover(2.0)
        m.move(7, list(range(256)), 0)
        self.assertEqual([], self.clock.sleeps)
        m.move(7, list(range(256)), 0)
        self.assertEqual([0.5], self.clock.sleeps)
        self.clock.now += 10    # idle: the bucket refills, up to one batch
        m.move(7, list(range(512)), 0)
        self.assertEqual([0.5, 0.5], self.clock.sleeps)

    def test_moved_bytes_never_exceed_the_bucket(self):
        m = self._mover(3.0, batch=100)
        start = self.clock.now
        m.move(7, list(range(5000)), 0)
        elapsed = self.clock.now - start
        moved = 5000 * 4096
        self.assertLessEqual(moved, 100 * 4096 + 3.0 * MIB * elapsed + 1)
        self.assertGreater(elapsed, 0)

    def test_failed_pages_are_refunded(self):
        self.move_pages.side_effect = (
            lambda pid, addresses, nodes, flags=0:
            [-errno.ENOENT] * len(addresses))
        m = self._mover(1.0)
        result = m.move(7, list(range(1024)), 0)
        self.assertEqual(hypervisor.MoveResult(1024, 0, {'ENOENT': 1024}),
                         result)
        self.assertEqual([], self.clock.sleeps)

    def test_per_page_errors_are_counted_by_name(self):
        statuses = [0, -errno.ENOENT, -errno.EACCES, -errno.ENOENT,
                    -errno.EBUSY, 1]

        def fake(pid, addresses, nodes, flags=0):
            if nodes is None:       # the EBUSY page is asked again
                return [1] * len(addresses)
            return statuses

        self.move_pages.side_effect = fake
        result = self._mover(0).move(7, list(range(6)), 0)
        self.assertEqual(hypervisor.MoveResult(
            6, 1, {'ENOENT': 2, 'EACCES': 1, 'EBUSY': 2}), result)

    def test_full_node_is_counted_not_raised(self):
        # Linux 6.1 fails the call with ENOMEM when the target node fills
        # up, after moving what fitted.
        def fake(pid, addresses, nodes, flags=0):
            if nodes is None:
                return [3 if a < 300 else 0 for a in addresses]
            if addresses[0] >= 256:
                raise mover.MoveError(errno.ENOMEM, 'full')
            return [3] * len(addresses)

        self.move_pages.side_effect = fake
        result = self._mover(0).move(7, list(range(1000)), 3)
        self.assertEqual(hypervisor.MoveResult(1000, 300, {'ENOMEM': 700}),
                         result)

    def test_ebusy_pages_of_a_moved_huge_page_count_as_moved(self):
        # A transparent huge page moves with its first base page; the
        # kernel reports -EBUSY for the others (Linux 6.1).
        def fake(pid, addresses, nodes, flags=0):
            if nodes is None:
                return [3] * len(addresses)
            return [3] + [-errno.EBUSY] * (len(addresses) - 1)

        self.move_pages.side_effect = fake
        result = self._mover(0, batch=512).move(7, list(range(512)), 3)
        self.assertEqual(hypervisor.MoveResult(512, 512, {}), result)
        self.move_pages.assert_called_with(7, list(range(1, 512)), None)

    def test_unreported_pages_are_queried(self):
        nr = mover.NOT_REPORTED

        def fake(pid, addresses, nodes, flags=0):
            if nodes is None:       # the follow-up query
                return [2 if a == 3 else 1 for a in addresses]
            return [2, 2, nr, nr, nr]

        self.move_pages.side_effect = fake
        result = self._mover(0).move(7, [0, 1, 2, 3, 4], 2)
        self.assertEqual(hypervisor.MoveResult(5, 3, {'EBUSY': 2}), result)
        self.move_pages.assert_called_with(7, [2, 3, 4], None)

    def test_unreported_pages_of_a_vanished_process(self):
        def fake(pid, addresses, nodes, flags=0):
            if nodes is None:
                raise mover.MoveError(errno.ESRCH, 'gone')
            return [mover.NOT_REPORTED] * len(addresses)

        self.move_pages.side_effect = fake
        result = self._mover(0).move(7, [0, 1], 2)
        self.assertEqual(hypervisor.MoveResult(2, 0, {'EBUSY': 2}), result)

    def test_node_error_counts_all_remaining_pages(self):
        self.move_pages.side_effect = [
            [0] * 256, mover.MoveError(errno.EACCES, 'cpuset')]
        result = self._mover(0).move(7, list(range(1000)), 0)
        self.assertEqual(hypervisor.MoveResult(1000, 256, {'EACCES': 744}),
                         result)
        self.assertEqual(2, self.move_pages.call_count)

    def test_process_error_raises_with_partial_result(self):
        self.move_pages.side_effect = [
            [0] * 256, mover.MoveError(errno.EPERM, 'no')]
        exc = self.assertRaises(mover.MoveError, self._mover(0).move, 7,
                                list(range(1000)), 0)
        self.assertEqual(errno.EPERM, exc.errno)
        self.assertEqual(hypervisor.MoveResult(1000, 256, {}), exc.result)

    def test_query_counts_per_node(self):
        self.move_pages.side_effect = (
            lambda pid, addresses, nodes, flags=0:
            [a % 3 - 1 for a in addresses])
        counts = self._mover(0, batch=4).query(7, list(range(10)))
        # statuses -1, 0, 1, -1, 0, 1...: negative ones (absent) left out.
        self.assertEqual({0: 3, 1: 3}, counts)
        self.assertEqual(3, self.move_pages.call_count)

    def test_bad_arguments(self):
        self.assertRaises(ValueError, mover.PageMover, max_batch_pages=0)
        self.assertRaises(ValueError, mover.PageMover, rate_mb_per_s=-1)
