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
"""What the NUMA VM tests share: the VM's expected topology, skipping
outside the VM, and the kernel's automatic NUMA balancing switch.
"""

import contextlib
import os

import fixtures
from oslo_privsep import priv_context
import testtools

from nova_numa_overhead.compute import privsep
from tests.numa import helpers

IN_VM = os.path.exists('/run/numa-vm')
NUMA_BALANCING = '/proc/sys/kernel/numa_balancing'


def expected_node_mb() -> list:
    """The memory of each node as tools/numa-vm.sh gives it (MiB)."""
    return [int(mb) for mb in os.environ['NUMA_VM_NODE_MB'].split()]


def expected_node_cpus() -> list:
    """The CPUs of each node as tools/numa-vm.sh gives them."""
    return [[int(c) for c in part.split(',') if c]
            for part in os.environ['NUMA_VM_NODE_CPUS'].split(';')]


def expected_distances() -> list:
    """The SLIT matrix tools/numa-vm.sh gives QEMU (row = from)."""
    return [[int(d) for d in row.split()]
            for row in os.environ['NUMA_VM_DISTANCES'].split(';')]


@contextlib.contextmanager
def numa_balancing(on: bool):
    """The kernel's automatic NUMA balancing on or off, then as it was."""
    with open(NUMA_BALANCING) as f:
        before = f.read().strip()
    with open(NUMA_BALANCING, 'w') as f:
        f.write('1' if on else '0')
    try:
        yield
    finally:
        with open(NUMA_BALANCING, 'w') as f:
            f.write(before)


class TestCase(testtools.TestCase):
    """A test that needs the NUMA VM (skipped anywhere else)."""

    def setUp(self):
        super().setUp()
        if not IN_VM:
            self.skipTest('needs the 4-node VM of tools/numa-vm.sh')
        # Not DEBUG: formatting every privsep reply (lists of thousands of
        # page statuses) costs minutes under TCG.
        self.logger = self.useFixture(fixtures.FakeLogger(level='INFO'))


class Privsep(fixtures.Fixture):
    """The agent's two privsep daemons, forked from this process.

    Each drops every capability but its context's, as when started
    through privsep-helper (a fork costs nothing under TCG, a new
    interpreter tens of seconds). They run as root here, like QEMU.
    """

    def _setUp(self):
        for ctx in (privsep.numa_overhead_pctxt,
                    privsep.numa_overhead_cgroup_pctxt):
            self.useFixture(fixtures.MockPatchObject(ctx, 'client_mode',
                                                     True))
            ctx.start(priv_context.Method.FORK)
            self.addCleanup(ctx.stop)


class HelperFixture(fixtures.Fixture):
    """A :class:`helpers.Helper`, stopped (and its cgroup removed) after."""

    def __init__(self, parts, cgroup_name=None, thp=True):
        super().__init__()
        self.parts = parts
        self.cgroup_name = cgroup_name
        self.thp = thp

    def _setUp(self):
        self.cgroup = None
        if self.cgroup_name:
            self.cgroup = helpers.make_cgroup(self.cgroup_name)
            self.addCleanup(helpers.remove_cgroup, self.cgroup)
        self.helper = helpers.Helper(self.parts, cgroup=self.cgroup,
                                     thp=self.thp)
        self.addCleanup(self.helper.stop)
