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
"""tools/numa-vm.sh outside the VM: lint and its one-line errors.

What it does inside the VM is the tests/numa group's business.
"""

import os
import shutil
import subprocess
import sys

import fixtures
import testtools

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
SCRIPT = os.path.join(TOP, 'tools', 'numa-vm.sh')


class TestNumaVmScript(testtools.TestCase):

    def run_script(self, *args, **env):
        result = subprocess.run(
            [SCRIPT] + list(args), capture_output=True, text=True,
            timeout=60, env=dict(os.environ, **env), stdin=subprocess.DEVNULL)
        return result.returncode, result.stdout, result.stderr

    def assertOneLineError(self, expected, result):
        rc, out, err = result
        self.assertEqual(125, rc, err)
        self.assertEqual('', out)
        self.assertEqual(1, len(err.splitlines()), err)
        self.assertIn(expected, err)
        self.assertTrue(err.startswith('numa-vm: '), err)

    def test_missing_qemu(self):
        self.assertOneLineError(
            'QEMU (/nonexistent/qemu) not found (install qemu-system-x86',
            self.run_script('true', NUMA_VM_QEMU='/nonexistent/qemu'))

    def test_missing_kernel(self):
        self.assertOneLineError(
            'no readable kernel image /nonexistent/vmlinuz-6.1.0 (install '
            'linux-image-amd64',
            self.run_script('true', NUMA_VM_QEMU=sys.executable,
                            NUMA_VM_KERNEL='/nonexistent/vmlinuz-6.1.0'))

    def test_kernel_without_modules(self):
        kernel = self.useFixture(fixtures.TempDir()).path
        image = os.path.join(kernel, 'vmlinuz-0.0.0-none')
        with open(image, 'w') as f:
            f.write('not a kernel')
        self.assertOneLineError(
            'no modules for kernel 0.0.0-none in /lib/modules',
            self.run_script('true', NUMA_VM_QEMU=sys.executable,
                            NUMA_VM_KERNEL=image))

    def test_spool_without_vm(self):
        spool = self.useFixture(fixtures.TempDir()).path
        self.assertOneLineError(
            'no VM is serving %s' % spool,
            self.run_script('true', NUMA_VM_SPOOL=spool))

    def test_libvirtd_only_inside(self):
        if os.path.exists('/run/numa-vm'):
            self.skipTest('inside the VM')
        self.assertOneLineError('--libvirtd runs inside the VM only',
                                self.run_script('--libvirtd'))

    def test_help(self):
        rc, out, _err = self.run_script('--help')
        self.assertEqual(0, rc)
        self.assertIn('tools/numa-vm.sh CMD [ARGS...]', out)

    def test_shellcheck(self):
        shellcheck = shutil.which('shellcheck')
        if shellcheck is None:
            self.skipTest('shellcheck is not installed')
        result = subprocess.run([shellcheck, '-s', 'bash', SCRIPT],
                                capture_output=True, text=True, timeout=60)
        self.assertEqual(0, result.returncode, result.stdout)

    def test_bashate(self):
        bashate = shutil.which('bashate') or os.path.join(
            os.path.dirname(sys.executable), 'bashate')
        if not os.path.exists(bashate):
            self.skipTest('bashate is not installed')
        result = subprocess.run([bashate, '-i', 'E006', '-e', 'E005,E042',
                                 SCRIPT],
                                capture_output=True, text=True, timeout=60)
        self.assertEqual((0, ''), (result.returncode, result.stdout.strip()),
                         result.stderr)
