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

import fixtures

from nova_numa_overhead.scheduler import request
from nova_numa_overhead.scheduler import store
from tests.unit.scheduler import fakes
from tests.unit.scheduler import test_filters


class TestPolicyFromExtraSpecs(fakes.NovaTestCase):

    def parse(self, specs):
        return request.policy_from_extra_specs(specs, 'proportional', 4)

    def test_defaults(self):
        p = self.parse({})
        self.assertEqual(('proportional', 4, None, True),
                         (p.policy, p.max_nodes, p.max_level, p.rebalance))

    def test_all_specs(self):
        p = self.parse({'numa_overhead:policy': 'spread',
                        'numa_overhead:max_nodes': '2',
                        'numa_overhead:max_level': ' 6 ',
                        'numa_overhead:rebalance': 'false',
                        'hw:cpu_policy': 'shared'})
        self.assertEqual(('spread', 2, 6, False),
                         (p.policy, p.max_nodes, p.max_level, p.rebalance))

    def test_bad_values_name_the_key(self):
        for specs, fragment in (
                ({'numa_overhead:policy': 'fast'},
                 "numa_overhead:policy: 'fast' is not one of"),
                ({'numa_overhead:max_nodes': '0'},
                 'numa_overhead:max_nodes: 0 is less than 1'),
                ({'numa_overhead:max_level': '-1'},
                 'numa_overhead:max_level: -1 is less than 0'),
                ({'numa_overhead:max_level': 'high'},
                 "numa_overhead:max_level: 'high' is not an integer"),
                ({'numa_overhead:rebalance': 'maybe'},
                 "numa_overhead:rebalance: 'maybe' is not a boolean")):
            exc = self.assertRaises(request.InvalidRequest, self.parse,
                                    specs)
            self.assertIn(fragment, str(exc))


class TestFromSpec(fakes.NovaTestCase):

    def test_hint_tightens_flavor(self):
        req = request.from_spec(fakes.spec(
            memory_mb=4096, extra_specs={'numa_overhead:max_level': '6'},
            hints={'numa_overhead_max_level': '3'}), self.conf)
        self.assertEqual(3, req.max_level)
        self.assertEqual(4096, req.memory_mb)

    def test_hint_cannot_loosen_flavor(self):
        req = request.from_spec(fakes.spec(
            extra_specs={'numa_overhead:max_level': '2'},
            hints={'numa_overhead_max_level': '9'}), self.conf)
        self.assertEqual(2, req.max_level)

    def test_no_limit(self):
        self.assertIsNone(request.from_spec(fakes.spec(),
                                            self.conf).max_level)

    def test_defaults_come_from_config(self):
        self.flags(default_policy='local', default_max_nodes=2)
        req = request.from_spec(fakes.spec(), self.conf)
        self.assertEqual(('local', 2), (req.policy, req.max_nodes))

    def test_bad_hints_are_logged_and_ignored(self):
        # nova-api checks no hint, and the request spec keeps it for
        # every later move: never a reason to refuse the request.
        test_filters.fresh_flavor_throttle(self)
        errors = self.useFixture(fixtures.FakeLogger(name=request.__name__,
                                                     level='ERROR'))
        for value, fragment in ((['x'], "'x' is not an integer"),
                                (['-2'], '-2 is less than 0'),
                                (['1', '2'], 'give exactly one value')):
            req = request.from_spec(
                fakes.spec(extra_specs={'numa_overhead:max_level': '5'},
                           hints={'numa_overhead_max_level': value}),
                self.conf)
            self.assertEqual(5, req.max_level)
            self.assertIn('hint numa_overhead_max_level', errors.output)
            self.assertIn(fragment, errors.output)

    def test_bad_flavor_spec_means_the_defaults(self):
        test_filters.fresh_flavor_throttle(self)
        errors = self.useFixture(fixtures.FakeLogger(name=request.__name__,
                                                     level='ERROR'))
        self.flags(default_policy='local', default_max_nodes=2)
        bad = {'numa_overhead:policy': 'spread',
               'numa_overhead:max_level': '3',
               'numa_overhead:rebalance': 'sometimes'}
        spec_obj = fakes.spec(extra_specs=bad)
        spec_obj.flavor.name = 'm1.old'
        for _ in range(store.LOG_BURST + 5):
            req = request.from_spec(spec_obj, self.conf)
            # The bad one only: the good policy and max_level apply.
            self.assertEqual(('spread', 2, 3, True),
                             (req.policy, req.max_nodes, req.max_level,
                              req.rebalance))
        line = ("Ignoring bad extra specs of flavor m1.old, their defaults "
                "apply: numa_overhead:rebalance: 'sometimes' is not a "
                "boolean")
        # Throttled: every boot of the flavor would log it.
        self.assertEqual(store.LOG_BURST, errors.output.count(line))

    def test_bad_hint_and_bad_flavor_spec_both_ignored(self):
        test_filters.fresh_flavor_throttle(self)
        req = request.from_spec(
            fakes.spec(extra_specs={'numa_overhead:max_nodes': '0'},
                       hints={'numa_overhead_max_level': 'x'}), self.conf)
        self.assertIsNone(req.max_level)
        self.assertEqual(self.conf.numa_overhead.default_max_nodes,
                         req.max_nodes)
