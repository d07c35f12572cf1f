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
"""The VM's topology as the kernel and the agent's sysfs readers see it."""

import os

from nova_numa_overhead.compute import kernel
from nova_numa_overhead.compute import numa_stat
from nova_numa_overhead.compute import probe
from tests.numa import base
from tests.numa import helpers

NODE_SYSFS = '/sys/devices/system/node'


class TestTopology(base.TestCase):

    def test_nodes_and_cpus(self):
        nodes = probe.host_nodes()
        expected = base.expected_node_cpus()
        self.assertEqual(dict(enumerate(expected)), nodes)
        # Two nodes with a CPU, two memory-only ones (like CXL memory).
        self.assertEqual(2, sum(1 for cpus in nodes.values() if not cpus))

    def test_memory_per_node(self):
        free = numa_stat.host_free_memory_mb()
        self.assertEqual(list(range(4)), sorted(free))
        for node, size_mb in enumerate(base.expected_node_mb()):
            with open(os.path.join(NODE_SYSFS, 'node%d' % node,
                                   'meminfo')) as f:
                info = numa_stat.parse_node_meminfo(f.read())
            total_mb = info['MemTotal'] // 1024
            # The kernel keeps some of each node for itself.
            self.assertLessEqual(total_mb, size_mb)
            self.assertGreater(total_mb, size_mb * 0.8)
            self.assertLessEqual(free[node], total_mb)
            self.assertGreater(free[node], 0)

    def test_asymmetric_distances(self):
        matrix = []
        for node in range(4):
            with open(os.path.join(NODE_SYSFS, 'node%d' % node,
                                   'distance')) as f:
                matrix.append([int(d) for d in f.read().split()])
        self.assertEqual(base.expected_distances(), matrix)
        self.assertNotEqual(matrix[0][1], matrix[1][0])


class TestKernelState(base.TestCase):
    """What the agent reads of the kernel's own placement."""

    def test_numa_balancing_is_read(self):
        state = kernel.read()
        with open('/proc/sys/kernel/numa_balancing') as f:
            self.assertEqual(int(f.read()), state.numa_balancing)
        self.assertIn(state.numa_balancing, kernel.BALANCING)

    def test_a_process_named_numad_is_found(self):
        self.assertEqual((), kernel.read().numad)
        child = helpers.fake_numad(self)
        self.assertEqual((child.pid,), kernel.read().numad)
        child.kill()
        child.wait()
        self.assertEqual((), kernel.read().numad)
