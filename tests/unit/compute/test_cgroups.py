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
"""cpuset.mems of a guest's cgroups, on a cgroupfs made of plain files.

The kernel's side (pages moving, effective nodes) is in tests/numa.
"""

import os

import fixtures
import testtools

from nova_numa_overhead.compute import cgroups

SCOPE = 'machine/qemu-1-instance-1.libvirt-qemu'


class CgroupFsTestCase(testtools.TestCase):

    def setUp(self):
        super().setUp()
        top = self.useFixture(fixtures.TempDir()).path
        self.proc = os.path.join(top, 'proc')
        self.root = os.path.join(top, 'cgroup')

    def process(self, pid, cgroup_text):
        os.makedirs(os.path.join(self.proc, str(pid)))
        with open(os.path.join(self.proc, str(pid), 'cgroup'), 'w') as f:
            f.write(cgroup_text)

    def cgroup(self, path, mems='', effective=None, name='cpuset.mems'):
        directory = os.path.join(self.root, path)
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, name), 'w') as f:
            f.write(mems + '\n')
        if effective is not None:
            with open(os.path.join(directory, name + '.effective'),
                      'w') as f:
                f.write(effective + '\n')
        return directory

    def read(self, path, name='cpuset.mems'):
        with open(os.path.join(self.root, path, name)) as f:
            return f.read().strip()


class TestParsing(testtools.TestCase):

    def test_mems(self):
        self.assertEqual((), cgroups.parse_mems('\n'))
        self.assertEqual((0, 1, 2, 5), cgroups.parse_mems('0-2,5\n'))
        self.assertEqual('1,3', cgroups.format_mems([3, 1, 3]))
        for bad in ('x', '3-1', '-1'):
            self.assertRaises(ValueError, cgroups.parse_mems, bad)

    def test_cpuset_dir(self):
        self.assertEqual(('/sys/fs/cgroup/%s/emulator' % SCOPE, 2),
                         cgroups.cpuset_dir('0::/%s/emulator\n' % SCOPE))
        v1 = ('12:memory:/machine\n'
              '5:cpuset,cpu:/machine/qemu.scope/emulator\n'
              '0::/init.scope\n')
        self.assertEqual(
            ('/sys/fs/cgroup/cpuset/machine/qemu.scope/emulator', 1),
            cgroups.cpuset_dir(v1))
        self.assertRaises(cgroups.CgroupError, cgroups.cpuset_dir,
                          '3:memory:/x\n')


class TestSetMemoryNodes(CgroupFsTestCase):

    def test_every_thread_cgroup_of_a_guest(self):
        self.process(42, '0::/%s/emulator\n' % SCOPE)
        for name in ('vcpu1', 'emulator', 'vcpu0', 'iothread1'):
            self.cgroup('%s/%s' % (SCOPE, name), effective='1-2')
        # Not a thread cgroup of libvirt's: left alone.
        self.cgroup('%s/other' % SCOPE, mems='0')
        written = cgroups.set_memory_nodes(42, [2, 1], proc=self.proc,
                                           root=self.root)
        self.assertEqual(['emulator', 'iothread1', 'vcpu0', 'vcpu1'],
                         [os.path.basename(d) for d in written])
        for name in ('emulator', 'iothread1', 'vcpu0', 'vcpu1'):
            self.assertEqual('1,2', self.read('%s/%s' % (SCOPE, name)))
        self.assertEqual('0', self.read('%s/other' % SCOPE))
        self.assertEqual((1, 2), cgroups.memory_nodes(
            42, proc=self.proc, root=self.root))

    def test_a_plain_process_gets_its_own_cgroup(self):
        self.process(7, '0::/test/helper\n')
        self.cgroup('test/helper')
        self.cgroup('test/vcpu0', mems='3')
        cgroups.set_memory_nodes(7, [0], proc=self.proc, root=self.root)
        self.assertEqual('0', self.read('test/helper'))
        self.assertEqual('3', self.read('test/vcpu0'))

    def test_parent_restriction_is_an_error(self):
        self.process(42, '0::/%s/emulator\n' % SCOPE)
        self.cgroup('%s/emulator' % SCOPE, effective='1')
        error = self.assertRaises(cgroups.CgroupError,
                                  cgroups.set_memory_nodes, 42, [1, 2],
                                  proc=self.proc, root=self.root)
        self.assertIn('allows nodes 1, not 1,2: a parent cgroup', str(error))

    def test_a_refused_change_puts_back_what_it_wrote(self):
        # The emulator's cgroup written first, then refused (a parent
        # allows node 0 only): no thread is left confined alone.
        self.process(42, '0::/%s/emulator\n' % SCOPE)
        for sub in ('emulator', 'vcpu0', 'vcpu1'):
            self.cgroup('%s/%s' % (SCOPE, sub), mems='0-3', effective='0')
        self.assertRaises(cgroups.CgroupError, cgroups.set_memory_nodes,
                          42, [0, 1], proc=self.proc, root=self.root)
        self.assertEqual(['0-3', '0-3', '0-3'],
                         [self.read('%s/%s' % (SCOPE, sub))
                          for sub in ('emulator', 'vcpu0', 'vcpu1')])

    def test_an_empty_value_is_put_back_by_a_write(self):
        # cgroup v2 reads "no restriction of its own" as an empty line;
        # putting it back must reach the kernel (a cgroup file ignores
        # O_TRUNC): one write of it per cgroup written.
        self.process(42, '0::/%s/emulator\n' % SCOPE)
        for sub in ('emulator', 'vcpu0'):
            self.cgroup('%s/%s' % (SCOPE, sub), mems='', effective='0-1')
        writes = []
        real = os.write

        def write(fd, data):
            writes.append((os.readlink('/proc/self/fd/%d' % fd), data))
            return real(fd, data)
        self.useFixture(fixtures.MockPatchObject(cgroups.os, 'write',
                                                 side_effect=write))
        self.assertRaises(cgroups.CgroupError, cgroups.set_memory_nodes,
                          42, [1, 2], proc=self.proc, root=self.root)
        emulator = os.path.join(self.root, SCOPE, 'emulator', 'cpuset.mems')
        self.assertEqual([(emulator, b'1,2'), (emulator, b'\n')], writes)

    def test_no_nodes_gives_the_parents_back(self):
        # Nova's placement back: what the machine scope allows (systemd's
        # AllowedMemoryNodes may be fewer than the host's), not every node
        # of the host written out, which such a parent would refuse.
        self.process(42, '0::/%s/emulator\n' % SCOPE)
        self.cgroup(SCOPE, mems='', effective='0-1')
        for sub in ('emulator', 'vcpu0'):
            self.cgroup('%s/%s' % (SCOPE, sub), mems='1', effective='0,1')
        cgroups.set_memory_nodes(42, [], proc=self.proc, root=self.root)
        self.assertEqual(['0,1', '0,1'],
                         [self.read('%s/%s' % (SCOPE, sub))
                          for sub in ('emulator', 'vcpu0')])

    def test_v1_turns_memory_migration_on(self):
        self.process(42, '4:cpuset:/%s/emulator\n' % SCOPE)
        directory = self.cgroup('cpuset/%s/emulator' % SCOPE)
        with open(os.path.join(directory, 'cpuset.memory_migrate'),
                  'w') as f:
            f.write('0\n')
        cgroups.set_memory_nodes(42, [3], proc=self.proc, root=self.root)
        self.assertEqual('3', self.read('cpuset/%s/emulator' % SCOPE))
        self.assertEqual('1', self.read('cpuset/%s/emulator' % SCOPE,
                                        'cpuset.memory_migrate'))

    def test_errors(self):
        self.assertRaises(cgroups.CgroupError, cgroups.set_memory_nodes, 9,
                          [0], proc=self.proc, root=self.root)
        self.assertRaises(cgroups.CgroupError, cgroups.memory_nodes, 9,
                          proc=self.proc, root=self.root)
        self.process(8, '0::/%s/emulator\n' % SCOPE)
        # No cpuset controller in that cgroup: no cpuset.mems to write.
        os.makedirs(os.path.join(self.root, SCOPE, 'emulator'))
        os.chmod(os.path.join(self.root, SCOPE, 'emulator'), 0o500)
        self.addCleanup(os.chmod, os.path.join(self.root, SCOPE,
                                               'emulator'), 0o700)
        self.assertEqual((), cgroups.memory_nodes(8, proc=self.proc,
                                                  root=self.root))
        self.assertRaises(ValueError, cgroups.set_memory_nodes, 8, [-1],
                          proc=self.proc, root=self.root)
        # No nodes: the parent's, which it cannot read here.
        self.assertRaises(cgroups.CgroupError, cgroups.set_memory_nodes, 8,
                          [], proc=self.proc, root=self.root)
        self.process(6, '0::/../../etc\n')
        self.assertRaises(cgroups.CgroupError, cgroups.set_memory_nodes, 6,
                          [0], proc=self.proc, root=self.root)


class TestSetVcpuCpus(CgroupFsTestCase):

    def cpus(self, path, cpus='', effective=None):
        self.cgroup(path, cpus, effective, name='cpuset.cpus')

    def test_the_vcpu_cgroups_only(self):
        text = '0::/%s/emulator\n' % SCOPE
        for name in ('emulator', 'vcpu0', 'vcpu1', 'iothread1'):
            self.cpus('%s/%s' % (SCOPE, name), cpus='0-7')
        written = cgroups.set_cgroup_vcpu_cpus(text, [5, 4], root=self.root)
        self.assertEqual(['vcpu0', 'vcpu1'],
                         [os.path.basename(d) for d in written])
        self.assertEqual(['0-7', '4,5', '4,5', '0-7'],
                         [self.read('%s/%s' % (SCOPE, name), 'cpuset.cpus')
                          for name in ('emulator', 'vcpu0', 'vcpu1',
                                       'iothread1')])

    def test_none_gives_the_parents_cpus_back(self):
        # v2: the parent's effective CPUs (a parent restricting them
        # would refuse every host CPU written out); v1: its cpuset.cpus.
        text = '0::/%s/emulator\n' % SCOPE
        self.cpus(SCOPE, cpus='', effective='0-5')
        for name in ('emulator', 'vcpu0'):
            self.cpus('%s/%s' % (SCOPE, name), cpus='2')
        cgroups.set_cgroup_vcpu_cpus(text, [], root=self.root)
        self.assertEqual('0,1,2,3,4,5', self.read('%s/vcpu0' % SCOPE,
                                                  'cpuset.cpus'))
        v1 = '4:cpuset:/%s/emulator\n' % SCOPE
        self.cpus('cpuset/%s' % SCOPE, cpus='1-2')
        for name in ('emulator', 'vcpu0'):
            self.cpus('cpuset/%s/%s' % (SCOPE, name), cpus='2')
        cgroups.set_cgroup_vcpu_cpus(v1, [], root=self.root)
        self.assertEqual('1,2', self.read('cpuset/%s/vcpu0' % SCOPE,
                                          'cpuset.cpus'))

    def test_refused_is_put_back_and_errors(self):
        text = '0::/%s/emulator\n' % SCOPE
        self.cpus('%s/emulator' % SCOPE, cpus='0-7')
        for name in ('vcpu0', 'vcpu1'):
            self.cpus('%s/%s' % (SCOPE, name), cpus='0-7', effective='0-3')
        error = self.assertRaises(cgroups.CgroupError,
                                  cgroups.set_cgroup_vcpu_cpus, text, [6],
                                  root=self.root)
        self.assertIn('allows CPUs 0,1,2,3, not 6', str(error))
        self.assertEqual('0-7', self.read('%s/vcpu0' % SCOPE, 'cpuset.cpus'))
        # No vCPU cgroup (a plain process), a negative CPU, outside root.
        self.cpus('test/helper')
        self.assertRaises(cgroups.CgroupError, cgroups.set_cgroup_vcpu_cpus,
                          '0::/test/helper\n', [0], root=self.root)
        self.assertRaises(ValueError, cgroups.set_cgroup_vcpu_cpus, text,
                          [-1], root=self.root)
        self.assertRaises(cgroups.CgroupError, cgroups.set_cgroup_vcpu_cpus,
                          '0::/../../etc/vcpu0\n', [0], root=self.root)

    def test_the_threads_own_affinity_is_set_too(self):
        # Linux 6.2 keeps a thread's own sched_setaffinity across a
        # cpuset change: the helper sets it (CAP_SYS_NICE); without the
        # capability, the kernel's affinity must already be the CPUs.
        text = '0::/%s/emulator\n' % SCOPE
        for name in ('emulator', 'vcpu0'):
            self.cpus('%s/%s' % (SCOPE, name), cpus='0-7')
        with open(os.path.join(self.root, SCOPE, 'vcpu0',
                               'cgroup.threads'), 'w') as f:
            f.write('101\n102\n')
        calls = []
        self.useFixture(fixtures.MockPatchObject(
            cgroups.os, 'sched_setaffinity',
            side_effect=lambda tid, cpus: calls.append((tid, cpus))))
        cgroups.set_cgroup_vcpu_cpus(text, [2, 3], root=self.root)
        self.assertEqual([(101, {2, 3}), (102, {2, 3})], calls)

        def refused(tid, cpus):
            raise PermissionError(1, 'Operation not permitted')
        self.useFixture(fixtures.MockPatchObject(
            cgroups.os, 'sched_setaffinity', side_effect=refused))
        affinity = self.useFixture(fixtures.MockPatchObject(
            cgroups.os, 'sched_getaffinity', return_value={2, 3})).mock
        cgroups.set_cgroup_vcpu_cpus(text, [2, 3], root=self.root)
        affinity.return_value = {5}
        error = self.assertRaises(cgroups.CgroupError,
                                  cgroups.set_cgroup_vcpu_cpus, text, [2, 3],
                                  root=self.root)
        self.assertIn('keeps CPUs 5, not 2,3', str(error))
        self.assertIn('CAP_SYS_NICE', str(error))
        # Put back as before the refused change.
        self.assertEqual('2,3', self.read('%s/vcpu0' % SCOPE, 'cpuset.cpus'))
