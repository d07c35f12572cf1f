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

import os
import subprocess
import sys

import fixtures
import testtools

from nova_numa_overhead.compute import coldpages

# 64 pages, all written once; then, when told, the first half again.
CHILD = """
import ctypes, mmap, sys
n = 64
buf = mmap.mmap(-1, n * mmap.PAGESIZE,
                flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
for i in range(n):
    buf[i * mmap.PAGESIZE] = 1
address = ctypes.addressof(ctypes.c_char.from_buffer(buf))
print(address, flush=True)
sys.stdin.readline()
for i in range(n // 2):
    buf[i * mmap.PAGESIZE] = 2
print('written', flush=True)
sys.stdin.readline()
"""


class TestOnARealProcess(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.proc = subprocess.Popen([sys.executable, '-c', CHILD],
                                     stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.addCleanup(self._stop)
        start = int(self.proc.stdout.readline())
        self.addresses = [start + i * coldpages.PAGE_SIZE
                          for i in range(64)]
        self.missing = self.useFixture(fixtures.TempDir()).join('nobitmap')
        self.opener = coldpages.proc_opener(self.proc.pid)

    def _stop(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=10)

    def test_pages_not_written_since_the_start_are_cold(self):
        if not coldpages.soft_dirty_supported():
            # This kernel (CONFIG_MEM_SOFT_DIRTY unset) cannot tell: the
            # caller must fall back to address order.
            self.assertIsNone(coldpages.mode(self.missing))
            self.assertIsNone(coldpages.start(self.opener, self.addresses,
                                              bitmap=self.missing))
            self.assertIsNone(coldpages.cold(self.opener, self.addresses,
                                             bitmap=self.missing))
            return
        used = coldpages.start(self.opener, self.addresses,
                               bitmap=self.missing)
        self.assertEqual(coldpages.SOFT_DIRTY_MODE, used)
        self.proc.stdin.write('\n')
        self.proc.stdin.flush()
        self.assertEqual('written', self.proc.stdout.readline().strip())
        cold = coldpages.cold(self.opener, self.addresses,
                              bitmap=self.missing)
        self.assertEqual(self.addresses[32:], cold)

    def test_pagemap_of_a_real_process(self):
        entries = coldpages.pagemap_entries(self.opener, self.addresses)
        self.assertTrue(all(e & coldpages.PRESENT for e in entries))


class TestSoftDirtyBits(testtools.TestCase):
    """The soft-dirty logic on fixture pagemaps."""

    def test_clean_present_pages_are_cold(self):
        tmp = self.useFixture(fixtures.TempDir())
        pid_dir = os.path.join(tmp.path, '7')
        os.mkdir(pid_dir)
        entries = [coldpages.PRESENT, coldpages.PRESENT | coldpages.SOFT_DIRTY,
                   0, coldpages.PRESENT]
        with open(os.path.join(pid_dir, 'pagemap'), 'wb') as f:
            for e in entries:
                f.write(e.to_bytes(8, 'little'))
        page = coldpages.PAGE_SIZE
        addresses = [i * page for i in range(4)]
        opener = coldpages.proc_opener(7, proc=tmp.path)
        self.assertEqual(coldpages.SOFT_DIRTY_MODE, coldpages.start(
            opener, addresses, bitmap=tmp.join('x'), soft_dirty=True))
        with open(os.path.join(pid_dir, 'clear_refs')) as f:
            self.assertEqual('4', f.read())
        self.assertEqual([0, 3 * page], coldpages.cold(
            opener, addresses, bitmap=tmp.join('x'), soft_dirty=True))


class TestIdleTracking(testtools.TestCase):
    """Idle page tracking on fixture files (this kernel lacks it)."""

    def test_idle_frames_round_trip(self):
        tmp = self.useFixture(fixtures.TempDir())
        bitmap = tmp.join('bitmap')
        with open(bitmap, 'wb') as f:
            f.write(b'\0' * 64)
        pid_dir = os.path.join(tmp.path, '42')
        os.mkdir(pid_dir)
        page = coldpages.PAGE_SIZE
        # Virtual pages 0..3 map to frames 5, 70, 71 and absent.
        entries = [coldpages.PRESENT | 5, coldpages.PRESENT | 70,
                   coldpages.PRESENT | 71, 0]
        with open(os.path.join(pid_dir, 'pagemap'), 'wb') as f:
            for e in entries:
                f.write(e.to_bytes(8, 'little'))
        addresses = [i * page for i in range(4)]
        opener = coldpages.proc_opener(42, proc=tmp.path)
        self.assertEqual(coldpages.IDLE, coldpages.start(
            opener, addresses, bitmap=bitmap, frames=True))
        # The "kernel" clears the bit of frame 70: it was accessed.
        with open(bitmap, 'r+b') as f:
            f.seek(8)
            word = int.from_bytes(f.read(8), 'little')
            f.seek(8)
            f.write((word & ~(1 << 6)).to_bytes(8, 'little'))
        self.assertEqual([0, 2 * page], coldpages.cold(
            opener, addresses, bitmap=bitmap, frames=True))

    def test_idle_needs_frame_numbers(self):
        # The bitmap is there, but frame numbers read as 0 without
        # CAP_SYS_ADMIN: soft-dirty bits it is.
        bitmap = self.useFixture(fixtures.TempDir()).join('bitmap')
        with open(bitmap, 'wb') as f:
            f.write(b'\0' * 8)
        self.assertEqual(coldpages.SOFT_DIRTY_MODE, coldpages.mode(
            bitmap, soft_dirty=True, frames=False))
        self.assertIsNone(coldpages.mode(bitmap, soft_dirty=False,
                                         frames=False))
