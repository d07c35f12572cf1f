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
import random
import struct
import subprocess
import sys
import tracemalloc

from unittest import mock

import fixtures
import testtools

from nova_numa_overhead.compute import coldpages

GIB = 1 << 30


def peak_bytes(call) -> int:
    """The most memory Python held at once while ``call()`` ran."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def walk_forbidden():
    """Extents whose pages must not be looked at."""
    class Extents:
        def __iter__(self):
            raise AssertionError('the extents were walked')
    return Extents()


def start_per_page(opener, addresses, bitmap):
    """Idle tracking's start as it was: a list of every address's
    entry, a seek and read each, then the words of their frames.
    """
    pfns = [e & coldpages.PFN_MASK
            for e in coldpages.pagemap_entries(opener, addresses)
            if e & coldpages.PRESENT and e & coldpages.PFN_MASK]
    words = {}
    for pfn in pfns:
        words[pfn // 64] = words.get(pfn // 64, 0) | 1 << (pfn % 64)
    with open(bitmap, 'r+b') as f:
        for word, bits in sorted(words.items()):
            f.seek(word * 8)
            f.write(struct.pack('<Q', bits))


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
            opener, [(0, 4 * page, page)], bitmap=tmp.join('x'),
            soft_dirty=True))
        with open(os.path.join(pid_dir, 'clear_refs')) as f:
            self.assertEqual('4', f.read())
        self.assertEqual([0, 3 * page], coldpages.cold(
            opener, addresses, bitmap=tmp.join('x'), soft_dirty=True))

    def test_start_clears_the_bits_once_without_walking_the_extents(self):
        tmp = self.useFixture(fixtures.TempDir())
        os.mkdir(tmp.join('7'))
        opened = []

        def opener(name, mode='r'):
            opened.append((name, mode))
            return open(tmp.join('7', name), mode)

        self.assertEqual(coldpages.SOFT_DIRTY_MODE, coldpages.start(
            opener, walk_forbidden(), bitmap=tmp.join('x'), soft_dirty=True))
        self.assertEqual([('clear_refs', 'w')], opened)
        with open(tmp.join('7', 'clear_refs')) as f:
            self.assertEqual('4', f.read())

    def test_a_64_gib_guest_costs_what_a_small_one_does(self):
        # Before: a list of its 16M page addresses, in the helper and on
        # the way to it.
        tmp = self.useFixture(fixtures.TempDir())
        os.mkdir(tmp.join('7'))
        opener = coldpages.proc_opener(7, proc=tmp.path)
        first = 0x7f0000000000
        extents = [(first, first + 64 * GIB, coldpages.PAGE_SIZE),
                   (first + 64 * GIB, first + 128 * GIB, 2 << 20)]
        used = []
        peak = peak_bytes(lambda: used.append(coldpages.start(
            opener, extents, bitmap=tmp.join('x'), soft_dirty=True)))
        self.assertEqual([coldpages.SOFT_DIRTY_MODE], used)
        self.assertLess(peak, 64 * 1024)


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
            opener, [(0, 4 * page, page)], bitmap=bitmap, frames=True))
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

    def test_start_sets_the_bits_the_per_page_walk_set(self):
        tmp = self.useFixture(fixtures.TempDir())
        page = coldpages.PAGE_SIZE
        huge = 512 * page
        rand = random.Random(42)
        # Present or not, frame 0 or not, other flag bits set at random.
        entries = []
        for _ in range(13000):
            flags = rand.getrandbits(8) << 55 & ~coldpages.PRESENT
            if rand.random() < 0.75:
                flags |= coldpages.PRESENT
            pfn = 0 if rand.random() < 0.1 else rand.randrange(1, 1 << 15)
            entries.append(flags | pfn)
        os.mkdir(tmp.join('9'))
        with open(tmp.join('9', 'pagemap'), 'wb') as f:
            f.write(struct.pack('<%dQ' % len(entries), *entries))
        opener = coldpages.proc_opener(9, proc=tmp.path)
        # Base pages over several chunks; huge pages (their first base
        # page's entry); base pages past the end of the file.
        extents = [(0, 9000 * page, page),
                   (9216 * page, 9216 * page + 4 * huge, huge),
                   (12000 * page, 14000 * page, page)]
        addresses = [a for start, end, size in extents
                     for a in range(start, end, size)]
        initial = rand.randbytes((1 << 15) // 8)
        for chunk in (1, 7, coldpages.CHUNK_PAGES):
            before, after = tmp.join('before'), tmp.join('after')
            for path in (before, after):
                with open(path, 'wb') as f:
                    f.write(initial)
            start_per_page(opener, addresses, before)
            with mock.patch.object(coldpages, 'CHUNK_PAGES', chunk):
                self.assertEqual(coldpages.IDLE, coldpages.start(
                    opener, extents, bitmap=after, frames=True))
            with open(before, 'rb') as f, open(after, 'rb') as g:
                expected, got = f.read(), g.read()
            self.assertNotEqual(initial, expected)
            self.assertEqual(expected, got, 'chunks of %d' % chunk)

    def test_start_streams_the_pagemap(self):
        # A 1 GiB guest with four pages present: memory for the bitmap
        # words and a chunk, not for its 256K pages (5 MiB as a list).
        tmp = self.useFixture(fixtures.TempDir())
        page = coldpages.PAGE_SIZE
        pages = GIB // page
        os.mkdir(tmp.join('5'))
        with open(tmp.join('5', 'pagemap'), 'wb') as f:
            f.truncate(pages * 8)
            for index, pfn in ((0, 3), (1, 130), (pages // 2, 131),
                               (pages - 1, 64 * 63)):
                f.seek(index * 8)
                f.write(struct.pack('<Q', coldpages.PRESENT | pfn))
        bitmap = tmp.join('bitmap')
        with open(bitmap, 'wb') as f:
            f.write(b'\0' * 64 * 8)
        opener = coldpages.proc_opener(5, proc=tmp.path)
        used = []
        peak = peak_bytes(lambda: used.append(coldpages.start(
            opener, [(0, GIB, page)], bitmap=bitmap, frames=True)))
        self.assertEqual([coldpages.IDLE], used)
        self.assertLess(peak, 1 << 20)
        with open(bitmap, 'rb') as f:
            words = struct.unpack('<64Q', f.read())
        self.assertEqual({0: 1 << 3, 2: 1 << 2 | 1 << 3, 63: 1},
                         {i: w for i, w in enumerate(words) if w})
