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

import errno
import os

import fixtures

from nova_numa_overhead.compute import kernel
from tests import base


class TestKernelState(base.TestCase):

    def setUp(self):
        super().setUp()
        self.proc = self.useFixture(fixtures.TempDir()).path
        self.process(1, 'systemd\n')

    def write(self, path, text):
        path = os.path.join(self.proc, path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, 'w') as f:
            f.write(text)

    def process(self, pid, comm, uid=0, state='S (sleeping)'):
        self.write('%s/comm' % pid, comm)
        self.write('%s/status' % pid, 'Name:\t%s\nUmask:\t0022\n'
                   'State:\t%s\nUid:\t%d\t%d\t%d\t%d\n' % (
                       comm.strip(), state, uid, uid, uid, uid))

    def test_balancing_and_numad(self):
        self.write('sys/kernel/numa_balancing', '1\n')
        self.process(812, 'numad\n')
        self.process(77, 'qemu-system-x86\n', uid=64055)
        self.process(90, 'numad-helper\n')
        # A user's process calling itself numad cannot bind others.
        self.process(95, 'numad\n', uid=1000)
        # A name that is not text.
        with open(os.path.join(self.proc, '77', 'comm'), 'wb') as f:
            f.write(b'\xff\xfenumad\n')
        # Not processes, gone before their comm was read, or without a
        # status.
        self.write('self/comm', 'numad\n')
        os.makedirs(os.path.join(self.proc, '91'))
        self.write('92/comm', 'numad\n')
        state = kernel.read(self.proc)
        self.assertEqual(1, state.numa_balancing)
        self.assertEqual((812,), state.numad)
        self.assertEqual('Kernel: automatic NUMA balancing on '
                         '(kernel.numa_balancing = 1); numad runs (pid '
                         '812).', state.text())
        self.assertEqual({'numa_balancing': 1, 'numad': [812]},
                         state.to_dict())

    def test_nothing_readable_is_unknown(self):
        state = kernel.read(os.path.join(self.proc, 'missing'))
        self.assertIsNone(state.numa_balancing)
        self.assertIsNone(state.numad)
        self.assertEqual('Kernel: automatic NUMA balancing unknown; whether '
                         'numad runs unknown (/proc unreadable, or it hides '
                         'other users\' processes).', state.text())
        self.assertEqual({'numa_balancing': None, 'numad': None},
                         state.to_dict())

    def test_an_exited_numad_not_yet_reaped_is_not_running(self):
        self.process(812, 'numad\n', state='Z (zombie)')
        self.process(813, 'numad\n', state='X (dead)')
        self.assertEqual((), kernel.read(self.proc).numad)

    def test_hidden_or_unreadable_processes_make_numad_unknown(self):
        self.process(812, 'numad\n')
        # hidepid=2: other users' processes, pid 1 among them, not listed.
        os.rename(os.path.join(self.proc, '1'),
                  os.path.join(self.proc, 'x1'))
        self.assertIsNone(kernel.read(self.proc).numad)
        os.rename(os.path.join(self.proc, 'x1'),
                  os.path.join(self.proc, '1'))
        self.assertEqual((812,), kernel.read(self.proc).numad)
        # Out of file descriptors, or hidepid=1: not "numad stopped".
        real = open

        def failing(path, *args, **kwargs):
            if path.endswith('812/status'):
                raise OSError(errno.EMFILE, 'Too many open files')
            return real(path, *args, **kwargs)
        self.useFixture(fixtures.MonkeyPatch('builtins.open', failing))
        self.assertIsNone(kernel.read(self.proc).numad)

    def test_odd_sysctl_values(self):
        for text, value in (('0', 0), ('2', 2), ('3', 3), ('on', None),
                            ('-1', None), ('', None)):
            self.write('sys/kernel/numa_balancing', text)
            self.assertEqual(value, kernel.read(self.proc).numa_balancing,
                             text)
        self.write('sys/kernel/numa_balancing', '2')
        self.assertIn('memory tiering only (kernel.numa_balancing = 2)',
                      kernel.read(self.proc).text())
