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

import fixtures
import testtools

from nova_numa_overhead.compute import numa_stat

MIB = 1024 * 1024

# cgroup v2 memory.numa_stat of a 4 GiB guest's machine scope (values in
# bytes): 3 GiB anonymous on node 0, 1 GiB anonymous and 512 MiB shmem on
# node 1, plus page cache (file) that is not guest RAM, and lines a newer
# or broken kernel could print.
V2_NUMA_STAT = """\
anon N0=3221225472 N1=1073741824
file N0=2147483648 N1=805306368
kernel_stack N0=196608 N1=0
pagetables N0=8998912 N1=2101248
sec_pagetables N0=0 N1=0
shmem N0=0 N1=536870912
file_mapped N0=33554432 N1=0
file_dirty N0=0 N1=0
file_writeback N0=0 N1=0
swapcached N0=0 N1=0
anon_thp N0=2147483648 N1=1073741824
file_thp N0=0 N1=0
shmem_thp N0=0 N1=0
inactive_anon N0=3221225472 N1=1610612736
active_anon N0=0 N1=0
inactive_file N0=2147483648 N1=268435456
active_file N0=0 N1=0
unevictable N0=0 N1=0
slab_reclaimable N0=1048576 N1=0
slab_unreclaimable N0=524288 N1=0
workingset_refault_anon N0=0 N1=0

garbage
future_key N0=12 N1=
anon_broken N0=abc N1=1
N0=5
"""

# cgroup v1 memory.numa_stat (values in pages; 256 pages = 1 MiB).
V1_NUMA_STAT = """\
total=307200 N0=281600 N1=25600
file=25600 N0=25600 N1=0
anon=230400 N0=230400 N1=0
unevictable=2560 N0=2560 N1=0
hierarchical_total=320000 N0=271360 N1=48640
hierarchical_file=25600 N0=25600 N1=0
hierarchical_anon=258560 N0=243200 N1=15360
hierarchical_unevictable=12800 N0=2560 N1=10240
not a line
bogus=x N0=1
"""

# /proc/<qemu pid>/numa_maps: binary, heap, a 4 GiB guest RAM mapping, a
# 1 GiB hugetlbfs mapping (2 MiB pages), memfd, unusual policies, and
# lines to skip or partly skip.
NUMA_MAPS = """\
55d4c8a00000 default file=/usr/bin/qemu-system-x86_64 mapped=1200 \
mapmax=3 N0=1000 N1=200 kernelpagesize_kB=4
55d4ca1b9000 default heap anon=5000 dirty=5000 N0=4000 N1=1000 \
kernelpagesize_kB=4
7f3a40000000 default anon=1048576 dirty=1048576 active=0 N0=786432 \
N1=262144 kernelpagesize_kB=4
7f3b00000000 bind:1 file=/dev/hugepages/libvirt/qemu/1-inst/pc.ram huge \
dirty=512 N1=512 kernelpagesize_kB=2048
7f3c00000000 prefer (many)=static:0-1 anon=256 dirty=256 N0=256 \
kernelpagesize_kB=4
7f3c10000000 weighted interleave:0-1 anon=512 dirty=512 N0=256 N1=256 \
kernelpagesize_kB=4
7f3e00000000 default file=/memfd:pc.ram\\040(deleted) dirty=131072 \
N1=131072 kernelpagesize_kB=4
7ffd1e1f0000 default stack anon=33 dirty=33 N0=33 kernelpagesize_kB=4
7ffd1e3f0000 default
garbage line
zzzz default anon=3 N0=3 kernelpagesize_kB=4
7f3d00000000 default anon=10 N0=x N1=10 kernelpagesize_kB=4

"""

MAPS = """\
55d4c8a00000-55d4c8f00000 r-xp 00000000 fd:01 1234 /usr/bin/qemu
7f3a40000000-7f3b40000000 rw-p 00000000 00:00 0
7f3c00000000-7f3c00100000 rw-p 00000000 00:00 0
not a maps line
"""


class TestParseCgroupNumaStat(testtools.TestCase):

    def test_v2_counts_anon_and_shmem_in_bytes(self):
        # Neither file (page cache) nor anon_thp (inside anon) counts.
        self.assertEqual({0: 3072, 1: 1536},
                         numa_stat.parse_cgroup_numa_stat(V2_NUMA_STAT))

    def test_v2_ignores_page_size(self):
        self.assertEqual(
            {0: 3072, 1: 1536},
            numa_stat.parse_cgroup_numa_stat(V2_NUMA_STAT, page_size=65536))

    def test_v2_lists_nodes_without_guest_memory(self):
        text = 'anon N0=0 N1=0 N2=1048576\nfile N0=1048576 N1=0 N2=0\n'
        self.assertEqual({0: 0, 1: 0, 2: 1},
                         numa_stat.parse_cgroup_numa_stat(text))

    def test_v2_rounds_to_nearest_mib(self):
        text = 'anon N0=%d N1=%d\nshmem N0=0 N1=0\n' % (
            MIB + MIB // 2, MIB // 2 - 1)
        self.assertEqual({0: 2, 1: 0},
                         numa_stat.parse_cgroup_numa_stat(text))

    def test_v1_prefers_hierarchical_pages(self):
        # (243200 + 2560) / 256 and (15360 + 10240) / 256.
        self.assertEqual({0: 960, 1: 100},
                         numa_stat.parse_cgroup_numa_stat(V1_NUMA_STAT))

    def test_v1_without_hierarchical(self):
        text = '\n'.join(line for line in V1_NUMA_STAT.splitlines()
                         if not line.startswith('hierarchical_'))
        self.assertEqual({0: 910, 1: 0},
                         numa_stat.parse_cgroup_numa_stat(text))

    def test_v1_page_size(self):
        text = 'anon=16 N0=16\nunevictable=0 N0=0\n'
        self.assertEqual({0: 1}, numa_stat.parse_cgroup_numa_stat(
            text, page_size=65536))

    def test_garbage_gives_empty(self):
        for text in ('', '\n\n', 'hello world', 'anon', 'anon N0=x',
                     'anon N0=1 junk', '\x00\x01'):
            self.assertEqual({}, numa_stat.parse_cgroup_numa_stat(text))

    def test_unknown_keys_only_list_nodes(self):
        self.assertEqual({0: 0, 3: 0}, numa_stat.parse_cgroup_numa_stat(
            'future_key N0=1048576 N3=7\n'))


class TestParseNumaMaps(testtools.TestCase):

    def test_node_totals_honour_page_size_per_line(self):
        n0 = (1000 + 4000 + 786432 + 256 + 256 + 33) * 4096
        n1 = ((200 + 1000 + 262144 + 256 + 131072 + 10) * 4096 +
              512 * 2 * MIB)
        expected = {0: round(n0 / MIB), 1: round(n1 / MIB)}
        self.assertEqual({0: 3094, 1: 2566}, expected)
        self.assertEqual(expected, numa_stat.parse_numa_maps(NUMA_MAPS))

    def test_hugepage_line_alone(self):
        line = ('7f3b00000000 bind:1 file=/dev/hugepages/x huge dirty=2 '
                'N1=2 kernelpagesize_kB=1048576\n')
        self.assertEqual({1: 2048}, numa_stat.parse_numa_maps(line))

    def test_default_page_size_when_not_printed(self):
        line = '7f3b00000000 default anon=256 N0=256\n'
        self.assertEqual({0: 1}, numa_stat.parse_numa_maps(line))
        self.assertEqual({0: 16},
                         numa_stat.parse_numa_maps(line, page_size=65536))

    def test_garbage_gives_empty(self):
        for text in ('', 'garbage', '7f00', '7f00 N0=1', 'xyz default N0=1'):
            self.assertEqual({}, numa_stat.parse_numa_maps(text))

    def test_ranges(self):
        ranges = numa_stat.numa_maps_ranges(NUMA_MAPS)
        self.assertEqual(10, len(ranges))
        by_start = {r.start: r for r in ranges}

        ram = by_start[0x7f3a40000000]
        self.assertEqual('default', ram.policy)
        self.assertEqual({0: 786432, 1: 262144}, ram.pages)
        self.assertEqual(4096, ram.page_size)
        self.assertTrue(ram.anon)
        self.assertIsNone(ram.file)
        self.assertFalse(ram.huge)
        self.assertEqual(4 * 1024 * MIB, ram.resident_bytes)

        huge = by_start[0x7f3b00000000]
        self.assertEqual('bind:1', huge.policy)
        self.assertEqual(2 * MIB, huge.page_size)
        self.assertTrue(huge.huge)
        self.assertFalse(huge.anon)
        self.assertEqual('/dev/hugepages/libvirt/qemu/1-inst/pc.ram',
                         huge.file)

        self.assertEqual('prefer (many)=static:0-1',
                         by_start[0x7f3c00000000].policy)
        self.assertEqual('weighted interleave:0-1',
                         by_start[0x7f3c10000000].policy)
        memfd = by_start[0x7f3e00000000]
        self.assertFalse(memfd.anon)
        self.assertEqual('/memfd:pc.ram\\040(deleted)', memfd.file)
        self.assertTrue(by_start[0x55d4ca1b9000].anon)   # heap
        self.assertTrue(by_start[0x7ffd1e1f0000].anon)   # stack
        self.assertEqual({}, by_start[0x7ffd1e3f0000].pages)
        # The bad N0=x token is skipped, the rest of its line kept.
        self.assertEqual({1: 10}, by_start[0x7f3d00000000].pages)

    def test_guest_ram_ranges(self):
        ranges = numa_stat.numa_maps_ranges(NUMA_MAPS)
        # Private anonymous RAM and QEMU's memfd-backed pc.ram both count.
        self.assertEqual([0x7f3a40000000, 0x7f3e00000000],
                         [r.start for r in numa_stat.guest_ram_ranges(ranges)])
        small = numa_stat.guest_ram_ranges(ranges, min_mb=1)
        self.assertEqual([0x7f3a40000000, 0x7f3e00000000, 0x55d4ca1b9000,
                          0x7f3c10000000, 0x7f3c00000000],
                         [r.start for r in small])

    def test_extents_and_addresses(self):
        ranges = numa_stat.with_extents(
            numa_stat.numa_maps_ranges(NUMA_MAPS), MAPS)
        self.assertEqual([0x55d4c8a00000, 0x7f3a40000000, 0x7f3c00000000],
                         [r.start for r in ranges])
        self.assertEqual(0x7f3b40000000, ranges[1].end)
        addresses = ranges[2].addresses()
        self.assertEqual(256, len(addresses))
        self.assertEqual(0x7f3c00000000, addresses[0])
        self.assertEqual(0x7f3c00000000 + 255 * 4096, addresses[-1])

    def test_addresses_need_extent(self):
        ranges = numa_stat.numa_maps_ranges(NUMA_MAPS)
        self.assertRaises(ValueError, ranges[0].addresses)


class TestCgroupPaths(testtools.TestCase):

    def test_hybrid_host(self):
        text = ('4:memory:/machine.slice/machine-qemu.scope\n'
                '3:cpuset:/machine.slice/machine-qemu.scope/emulator\n'
                '0::/\n')
        self.assertEqual(
            ['/sys/fs/cgroup/memory.numa_stat',
             '/sys/fs/cgroup/unified/memory.numa_stat',
             '/sys/fs/cgroup/memory/machine.slice/machine-qemu.scope/'
             'memory.numa_stat'],
            numa_stat.cgroup_numa_stat_paths(text))

    def test_v2_libvirt_thread_cgroups_use_the_scope(self):
        scope = '/machine.slice/machine-qemu\\x2d1\\x2dinst.scope'
        for sub in ('/libvirt/emulator', '/libvirt/vcpu12',
                    '/libvirt/iothread1', '/emulator', ''):
            paths = numa_stat.cgroup_numa_stat_paths('0::%s%s\n' % (scope,
                                                                    sub))
            self.assertEqual('/sys/fs/cgroup%s/memory.numa_stat' % scope,
                             paths[0])

    def test_domain_cgroup(self):
        self.assertEqual('/', numa_stat.domain_cgroup('/libvirt/emulator'))
        self.assertEqual('/a/libvirt', numa_stat.domain_cgroup('/a/libvirt'))


class TestReaders(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.tmp = self.useFixture(fixtures.TempDir()).path

    def _write(self, path, text):
        path = os.path.join(self.tmp, path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, 'w') as f:
            f.write(text)

    def test_read_cgroup_numa_stat_v2(self):
        self._write('proc/42/cgroup', '0::/machine.slice/vm.scope/'
                                      'libvirt/emulator\n')
        self._write('cg/machine.slice/vm.scope/memory.numa_stat',
                    V2_NUMA_STAT)
        self.assertEqual({0: 3072, 1: 1536}, numa_stat.read_cgroup_numa_stat(
            42, proc=os.path.join(self.tmp, 'proc'),
            root=os.path.join(self.tmp, 'cg')))

    def test_read_cgroup_numa_stat_v1_fallback(self):
        self._write('proc/42/cgroup', '5:memory:/vm\n0::/\n')
        self._write('cg/memory/vm/memory.numa_stat', V1_NUMA_STAT)
        result = numa_stat.read_cgroup_numa_stat(
            42, proc=os.path.join(self.tmp, 'proc'),
            root=os.path.join(self.tmp, 'cg'))
        page = os.sysconf('SC_PAGE_SIZE')
        self.assertEqual(
            {0: round(245760 * page / MIB), 1: round(25600 * page / MIB)},
            result)

    def test_read_cgroup_numa_stat_missing(self):
        proc = os.path.join(self.tmp, 'proc')
        root = os.path.join(self.tmp, 'cg')
        self.assertIsNone(numa_stat.read_cgroup_numa_stat(42, proc, root))
        self._write('proc/42/cgroup', '0::/gone\n')
        self.assertIsNone(numa_stat.read_cgroup_numa_stat(42, proc, root))

    def test_read_numa_maps_missing(self):
        self.assertIsNone(numa_stat.read_numa_maps(
            42, proc=os.path.join(self.tmp, 'proc')))
        self.assertIsNone(numa_stat.read_ranges(
            42, proc=os.path.join(self.tmp, 'proc')))

    def test_host_free_memory_from_fake_sysfs(self):
        for node, free_kb in ((0, 2048000), (1, 1024), (10, 0)):
            self._write('node/node%d/meminfo' % node,
                        'Node %d MemTotal: 9999999 kB\n'
                        'Node %d MemFree: %d kB\n'
                        'Node %d HugePages_Total:     0\n'
                        'junk\n' % (node, node, free_kb, node))
        self._write('node/node2/uevent', '')
        self._write('node/possible/meminfo', 'Node 9 MemFree: 1 kB\n')
        self.assertEqual({0: 2000, 1: 1, 10: 0},
                         numa_stat.host_free_memory_mb(
                             os.path.join(self.tmp, 'node')))

    def test_parse_node_meminfo(self):
        info = numa_stat.parse_node_meminfo(
            'Node 0 MemTotal:  100 kB\nNode 0 HugePages_Free:     3\n'
            'Node 0 Broken: x kB\nrubbish\n')
        self.assertEqual({'MemTotal': 100, 'HugePages_Free': 3}, info)


class TestRealFiles(testtools.TestCase):
    """This machine's own kernel files (one NUMA node, node 0)."""

    def test_proc_self_numa_maps(self):
        if not os.path.exists('/proc/self/numa_maps'):
            self.skipTest('kernel without NUMA support')
        with open('/proc/self/numa_maps') as f:
            text = f.read()
        self.assertGreater(numa_stat.parse_numa_maps(text).get(0, 0), 0)
        ranges = numa_stat.numa_maps_ranges(text)
        self.assertEqual(len(text.splitlines()), len(ranges))
        self.assertGreater(numa_stat.read_numa_maps(os.getpid())[0], 0)

    def test_read_ranges_of_self(self):
        ranges = numa_stat.read_ranges(os.getpid())
        if ranges is None:
            self.skipTest('kernel without NUMA support')
        self.assertTrue(ranges)
        for r in ranges:
            self.assertGreater(r.end, r.start)

    def test_node0_meminfo(self):
        path = '/sys/devices/system/node/node0/meminfo'
        if not os.path.exists(path):
            self.skipTest('kernel without NUMA support')
        with open(path) as f:
            info = numa_stat.parse_node_meminfo(f.read())
        self.assertGreater(info['MemTotal'], 0)
        self.assertLessEqual(info['MemFree'], info['MemTotal'])
        free = numa_stat.host_free_memory_mb()
        self.assertIn(0, free)
        self.assertGreater(free[0], 0)

    def test_own_cgroup_numa_stat(self):
        result = numa_stat.read_cgroup_numa_stat(os.getpid())
        if result is None:
            self.skipTest('no memory.numa_stat for this process')
        self.assertIn(0, result)
        self.assertTrue(all(mib >= 0 for mib in result.values()))
