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

from importlib import metadata
from unittest import mock

import testtools

from nova_numa_overhead import version


class TestVersion(testtools.TestCase):

    def setUp(self):
        super().setUp()
        version.version_string.cache_clear()
        self.addCleanup(version.version_string.cache_clear)

    def test_the_installed_distribution_s(self):
        with mock.patch.object(metadata, 'version', autospec=True,
                               return_value='1.2.1.dev3'):
            self.assertEqual('1.2.1.dev3', version.version_string())

    def test_unknown_without_one_or_when_a_report_would_refuse_it(self):
        for effect in (metadata.PackageNotFoundError('x'), ['1.0 beta'],
                       ['x' * 65], [''], [None]):
            version.version_string.cache_clear()
            kwargs = ({'side_effect': effect} if isinstance(
                effect, Exception) else {'return_value': effect[0]})
            with mock.patch.object(metadata, 'version', autospec=True,
                                   **kwargs):
                self.assertEqual('unknown', version.version_string())
