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

import subprocess
import sys

import testtools

from nova_numa_overhead.overhead import specs
from nova_numa_overhead.scheduler import request


class TestSpecs(testtools.TestCase):

    def test_parsed_beside_the_planner(self):
        policy = specs.policy_from_extra_specs(
            {'numa_overhead:policy': 'spread', 'numa_overhead:max_nodes': '2',
             'numa_overhead:rebalance': 'false'}, 'proportional', 4)
        self.assertEqual(specs.Policy('spread', 2, None, False), policy)
        self.assertRaises(specs.InvalidRequest,
                          specs.policy_from_extra_specs,
                          {'numa_overhead:max_level': '-1'}, 'local', 4)

    def test_scheduler_names_are_the_same(self):
        # Code that imported them from the scheduler package keeps working.
        for name in ('NAMESPACE', 'SPEC_POLICY', 'SPEC_MAX_LEVEL',
                     'SPEC_MAX_NODES', 'SPEC_REBALANCE', 'InvalidRequest',
                     'Policy', 'parse_int', 'policy_from_extra_specs'):
            self.assertIs(getattr(specs, name), getattr(request, name), name)

    def test_the_agent_needs_nothing_of_the_scheduler(self):
        code = ('import sys; import nova_numa_overhead.compute.agent; '
                'print([m for m in sys.modules '
                'if m.startswith("nova_numa_overhead.scheduler")])')
        out = subprocess.run([sys.executable, '-c', code], check=True,
                             capture_output=True, text=True, timeout=120)
        self.assertEqual('[]', out.stdout.strip(), out.stderr)
