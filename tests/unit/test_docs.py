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
"""The documentation builds without a warning, as ``tox -e docs`` does."""

import importlib.util
import os
import subprocess
import sys

import fixtures
import testtools

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


class TestDocs(testtools.TestCase):

    def test_html_build_has_no_warnings(self):
        if importlib.util.find_spec('sphinx') is None:
            self.skipTest('sphinx is not installed (doc/requirements.txt)')
        out = self.useFixture(fixtures.TempDir()).path
        result = subprocess.run(
            [sys.executable, '-m', 'sphinx', '-W', '--keep-going', '-q',
             '-b', 'html', '-d', os.path.join(out, 'doctrees'),
             os.path.join(TOP, 'doc', 'source'), os.path.join(out, 'html')],
            cwd=TOP, capture_output=True, text=True, timeout=120)
        self.assertEqual(0, result.returncode,
                         'sphinx-build failed:\n%s%s'
                         % (result.stdout, result.stderr))
        self.assertTrue(os.path.exists(
            os.path.join(out, 'html', 'configuration', 'index.html')))
