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

from nova.api.validation.extra_specs import validators
from nova import exception
import testtools

from nova_numa_overhead.api import extra_specs


class TestExtraSpecValidators(testtools.TestCase):

    def setUp(self):
        super().setUp()
        # What nova-api does at start: load every entry point, ours too.
        validators.load_validators()

    def test_registered_through_the_entry_point(self):
        for name in ('numa_overhead:policy', 'numa_overhead:max_level',
                     'numa_overhead:max_nodes', 'numa_overhead:rebalance'):
            self.assertIn(name, validators.VALIDATORS)
        self.assertEqual(4, len(extra_specs.register()))

    def test_valid_values(self):
        for name, value in (('numa_overhead:policy', 'proportional'),
                            ('numa_overhead:policy', 'none'),
                            ('numa_overhead:max_level', '0'),
                            ('numa_overhead:max_nodes', '8'),
                            ('numa_overhead:rebalance', 'false')):
            validators.validate(name, value)

    def test_invalid_values_name_the_problem(self):
        for name, value, fragment in (
                ('numa_overhead:policy', 'fast', "'fast' is not one of"),
                ('numa_overhead:max_level', '-1', 'less than the min'),
                ('numa_overhead:max_level', 'x', 'not a valid integer'),
                ('numa_overhead:max_nodes', '0', 'less than the min'),
                ('numa_overhead:rebalance', 'maybe', 'boolean-like'),
                ('numa_overhead:typo', '1', "extra spec 'numa_overhead:typo'"
                 " does not appear to be a valid extra spec")):
            exc = self.assertRaises(exception.ValidationError,
                                    validators.validate, name, value)
            self.assertIn(fragment, str(exc))
            self.assertIn(name, str(exc))
