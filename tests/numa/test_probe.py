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
"""nova-numa-overhead probe on the 4-node kernel.

Under TCG the figures are the emulator's, not a memory system's: only the
matrix's shape and sanity are checked.
"""

import json
import math
import os

import fixtures

from nova_numa_overhead.cmd import main
from nova_numa_overhead.compute import probe
from tests.numa import base


class TestProbe(base.TestCase):

    def test_writes_a_4x4_matrix(self):
        path = os.path.join(self.useFixture(fixtures.TempDir()).path,
                            'topology.json')
        self.useFixture(fixtures.MonkeyPatch('sys.stdout', open(os.devnull,
                                                                'w')))
        self.assertEqual(0, main.main(['probe', '--output', path,
                                       '--size-mb', '64', '--repeat', '1']))
        with open(path) as f:
            data = json.load(f)
        self.assertEqual([0, 1, 2, 3], data['nodes'])
        self.assertEqual(probe.FORMAT_VERSION, data['version'])
        # One CPU on each of nodes 0 and 1: one stream each; none on the
        # memory-only nodes.
        self.assertEqual([1, 1, None, None], data['bandwidth_streams'])
        for name in ('latency_ns', 'bandwidth_mbps'):
            rows = data[name]
            self.assertEqual(4, len(rows))
            self.assertEqual([4] * 4, [len(r) for r in rows])
            # Rows are CPU nodes: the memory-only nodes have none.
            self.assertEqual([[None] * 4] * 2, rows[2:])
            for row in rows[:2]:
                self.assertTrue(all(math.isfinite(v) and v > 0
                                    for v in row), row)
        # What the agent reads: the memory-only nodes' rows as None.
        matrix = probe.load(path, nodes=[0, 1, 2, 3], cpu_less=[2, 3])
        args = probe.as_topology_args(matrix, cpu_less=[2, 3])
        self.assertEqual([None, None], list(args['latency_ns'][2:]))
        self.assertEqual((1, 1, None, None), args['bandwidth_streams'])
