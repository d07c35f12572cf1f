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
"""cgroup v2 on the real kernel: memory.numa_stat, and cpuset.mems moving
pages (the agent's nodeset enforcement, as its cgroup helper runs it once
it verified the process; through the entrypoint in test_libvirt).
"""

from nova_numa_overhead.compute import cgroups
from nova_numa_overhead.compute import numa_stat
from tests.numa import base


class TestNumaStat(base.TestCase):

    def test_per_node(self):
        fixture = self.useFixture(base.HelperFixture(
            [(1, 16), (2, 32)], cgroup_name='numa-stat'))
        per_node = numa_stat.read_cgroup_numa_stat(fixture.helper.pid)
        self.assertEqual([0, 1, 2, 3], sorted(per_node))
        # The memory-only node holds only what the helper bound there; the
        # CPU nodes also get the pages the forked helper copied on write.
        # (MiB rounded from bytes: the cgroup may be charged a page or two
        # less or more than numa_maps shows the mapping holds.)
        self.assertLessEqual(abs(per_node[2] - 32), 1, per_node)
        self.assertEqual(0, per_node[3])
        self.assertGreaterEqual(per_node[1], 15, per_node)
        self.assertEqual({1: 16, 2: 32}, fixture.helper.nodes_mb())


class TestCpusetMems(base.TestCase):

    def _moves_repeatedly(self, balancing):
        fixture = self.useFixture(base.HelperFixture(
            [(0, 32)], cgroup_name='cpuset-%d' % id(self)))
        helper = fixture.helper
        for nodes in ([2], [3], [2, 3], [0, 1, 2, 3], [1]):
            before = helper.nodes_mb()
            written = cgroups.set_memory_nodes(helper.pid, nodes)
            self.assertEqual([fixture.cgroup], written)
            self.assertEqual(tuple(nodes), cgroups.memory_nodes(helper.pid))
            after = helper.nodes_mb()
            # Pages already inside the new nodes stay (the kernel's
            # balancing may move them among those nodes when touched);
            # the others move in.
            for node, mb in before.items():
                if node in nodes and not balancing:
                    self.assertEqual(mb, after.get(node), (nodes, after))
            self.assertEqual(32, sum(after.values()))
            self.assertEqual(set(), set(after) - set(nodes), (nodes, after))
            # New faults (a guest touching its memory) stay inside too.
            helper.touch()
            self.assertEqual(set(), set(helper.nodes_mb()) - set(nodes))

    def test_moves_repeatedly_balancing_off(self):
        with base.numa_balancing(False):
            self._moves_repeatedly(False)

    def test_moves_repeatedly_balancing_on(self):
        # The kernel's balancing moves pages towards the CPU that touches
        # them, but never out of the cgroup's nodes.
        with base.numa_balancing(True):
            self._moves_repeatedly(True)
