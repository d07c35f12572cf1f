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
"""The one-machine cloud, end to end, as ``tools/run.sh cloud`` runs it.

Installs what the cloud needs (its Debian packages, its virtualenv), brings
up keystone, glance, placement, neutron, nova and the agent, and runs the
scenario with the real openstack CLI; then ``tools/run.sh cloud down``,
and no process of the cloud may be left. The cloud gets a run directory,
a name (databases, vhost, guests) and ports of its own, so that a cloud a
developer runs beside it is not touched.

``NUMA_OVERHEAD_CLOUD_FORM`` is ``short`` (the default, CI's: bring-up,
the 400, one server placed by the agent, delete) or ``full`` (every step
of ``tools/run.sh cloud``). Needs root: skipped otherwise, and with
``NUMA_OVERHEAD_SKIP_CLOUD=1``.
"""

import os
import re
import subprocess

import testtools

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
TIMEOUT = 1800


class TestCloud(testtools.TestCase):

    def setUp(self):
        super().setUp()
        if os.environ.get('NUMA_OVERHEAD_SKIP_CLOUD'):
            self.skipTest('NUMA_OVERHEAD_SKIP_CLOUD is set')
        if os.geteuid() != 0:
            self.skipTest('the cloud runs libvirtd and QEMU as root')
        self.env = dict(
            os.environ,
            NUMA_OVERHEAD_CLOUD_DIR=os.path.join(TOP, '.cloud-test'),
            NUMA_OVERHEAD_CLOUD_NAME='nnotest',
            NUMA_OVERHEAD_CLOUD_PORT='28100')
        self.env.pop('NUMA_OVERHEAD_CLOUD_VENV', None)

    def run_cloud(self, *args):
        result = subprocess.run(
            ['bash', os.path.join(TOP, 'tools', 'run.sh'), 'cloud'] +
            list(args), env=self.env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            timeout=TIMEOUT)
        self.addDetail('cloud %s' % ' '.join(args) if args else 'cloud',
                       testtools.content.text_content(result.stdout))
        return result

    def test_up_scenario_down(self):
        form = os.environ.get('NUMA_OVERHEAD_CLOUD_FORM', 'short')
        args = ['--short'] if form == 'short' else []
        try:
            result = self.run_cloud(*args)
        finally:
            down = self.run_cloud('down')
        self.assertEqual(0, result.returncode, 'tools/run.sh cloud failed')
        steps = re.findall(r'^\[(\d+)/(\d+)\] ', result.stdout, re.M)
        oks = re.findall(r'^    ok \(\d+ s\)$', result.stdout, re.M)
        self.assertTrue(steps)
        self.assertEqual(int(steps[-1][1]), len(oks))
        # The 400 as the CLI printed it, naming the key.
        self.assertRegex(result.stdout, r"400: Client Error .*Validation "
                         r"failed for extra spec 'numa_overhead:policy'")
        self.assertEqual(0, down.returncode, 'tools/run.sh cloud down failed')
        self.assertIn('no process of it runs', down.stdout)
