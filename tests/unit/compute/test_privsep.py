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
"""The privileged helper: it acts on a domain's QEMU and on nothing else.

A "domain" here is a real child process laid out as libvirt would have
started it (pid file, machine scope, ``-uuid`` and an emulator binary)
under a temporary tree that the helper's ``PID_DIR`` and ``PROC`` point
at; its memory, ``maps`` and ``pagemap`` are the real process's. The
checks on a real libvirt host are in tests/numa.
"""

import errno
import os
import shutil
import subprocess
import sys
import tempfile
import uuid as uuid_mod

import fixtures
from oslo_config import cfg
from oslo_config import fixture as config_fixture
from oslo_privsep import priv_context
import testtools

from nova_numa_overhead.compute import coldpages
from nova_numa_overhead.compute import hypervisor
from nova_numa_overhead.compute import mover
from nova_numa_overhead.compute import numa_stat
from nova_numa_overhead.compute import privsep
from tests.unit.compute import test_mover

NOBODY = 65534
# The child must be runnable as another user: the system's Python where
# there is one (a pyenv build under /root is not).
PYTHON = ('/usr/bin/python3' if os.access('/usr/bin/python3', os.X_OK)
          else os.path.realpath(sys.executable))


class FakeHost(fixtures.Fixture):
    """A libvirt run directory and a /proc view the helper is pointed at."""

    def _setUp(self):
        self.root = tempfile.mkdtemp(prefix='numa-overhead-host-')
        self.addCleanup(shutil.rmtree, self.root, ignore_errors=True)
        self.run_dir = os.path.join(self.root, 'run')
        self.proc = os.path.join(self.root, 'proc')
        self.bin = os.path.join(self.root, 'bin')
        for path in (self.root, self.run_dir, self.proc, self.bin):
            os.makedirs(path, exist_ok=True)
            # Only we may write, anyone may read (a helper run as another
            # user reads it too).
            os.chmod(path, 0o755)
        self.useFixture(fixtures.MockPatchObject(privsep, 'PID_DIR',
                                                 self.run_dir))
        self.useFixture(fixtures.MockPatchObject(privsep, 'PROC',
                                                 self.proc))
        self.useFixture(fixtures.MockPatchObject(privsep, 'TRUSTED_OWNER',
                                                 os.getuid()))
        self.qemus = []

    def emulator(self, name='qemu-system-x86_64') -> str:
        path = os.path.join(self.bin, name)
        if not os.path.exists(path):
            with open(path, 'w') as f:
                f.write('#!/bin/false\n')
            os.chmod(path, 0o755)
        return path

    def start(self, name=None, uuid=None, domain_id=7, user=None,
              systemd=True, exe=None, machine=None):
        """A domain's QEMU (a real process); returns a FakeQemu."""
        qemu = FakeQemu(self, name or 'instance-%08x' % (
            len(self.qemus) + 1), uuid or str(uuid_mod.uuid4()), domain_id,
            user, systemd, exe or self.emulator(), machine)
        self.qemus.append(qemu)
        return self.useFixture(qemu)

    def pid_file(self, name, pid) -> None:
        with open(os.path.join(self.run_dir, name + '.pid'), 'w') as f:
            f.write('%s\n' % pid)


class FakeQemu(fixtures.Fixture):

    def __init__(self, host, name, uuid, domain_id, user, systemd, exe,
                 machine):
        super().__init__()
        self.host = host
        self.name = name
        self.uuid = uuid
        self.domain_id = domain_id
        self.user = user
        self.systemd = systemd
        self.exe = exe
        self.machine = machine or 'qemu-%d-%s' % (domain_id, name)

    @property
    def identity(self):
        return (self.name, self.uuid)

    def _setUp(self):
        self.child = self.useFixture(test_mover.Child(
            ['-uuid', self.uuid], user=self.user, python=PYTHON))
        self.proc = self.child.proc
        self.pid = self.child.pid
        self.touched = self.child.touched
        self.untouched = self.child.untouched
        # The touched pages' range, as the agent gives it to track_pages.
        self.extents = [(self.touched[0],
                         self.touched[-1] + coldpages.PAGE_SIZE,
                         coldpages.PAGE_SIZE)]
        self.host.pid_file(self.name, self.pid)
        self.dir = os.path.join(self.host.proc, str(self.pid))
        os.mkdir(self.dir)
        os.chmod(self.dir, 0o755)
        if self.systemd:
            scope = ('/machine.slice/machine-%s.scope/libvirt/emulator'
                     % self.machine.replace('-', '\\x2d'))
        else:
            scope = '/machine/%s.libvirt-qemu/emulator' % self.machine
        self.set_cgroup('0::%s\n' % scope)
        os.symlink(self.exe, os.path.join(self.dir, 'exe'))
        for name in ('cmdline', 'maps', 'numa_maps', 'pagemap',
                     'clear_refs', 'stat'):
            os.symlink('/proc/%d/%s' % (self.pid, name),
                       os.path.join(self.dir, name))

    def set_cgroup(self, text):
        path = os.path.join(self.dir, 'cgroup')
        with open(path, 'w') as f:
            f.write(text)
        os.chmod(path, 0o644)

    def stop(self):
        self.child._stop()


class PrivsepFixture(fixtures.Fixture):
    """Run privsep entrypoints in-process, as nova's PrivsepFixture does."""

    def _setUp(self):
        self.useFixture(fixtures.MockPatchObject(
            privsep.numa_overhead_pctxt, 'client_mode', False))


def skip_without_move_pages(test):
    try:
        mover.syscall_number()
    except mover.MoveError:
        test.skipTest('move_pages not known on this architecture')


class TestMachineNames(testtools.TestCase):

    def test_nova_instance_names(self):
        self.assertEqual({'qemu-3-instance-0000002a'},
                         privsep.machine_names(3, 'instance-0000002a'))

    def test_libvirt_sanitising(self):
        # Hostname characters only; a run of '.'/'-' keeps its first;
        # none leads or trails.
        self.assertIn('qemu-1-my.guestx',
                      privsep.machine_names(1, 'my..guest_x'))
        self.assertIn('qemu-1-x', privsep.machine_names(1, '-.x.'))
        long_name = 'a' * 100
        for machine in privsep.machine_names(12, long_name):
            self.assertEqual(64, len(machine))

    def test_scopes(self):
        self.assertEqual(
            [(3, 'qemu-3-instance-0000002a')],
            privsep.machine_scopes(
                '0::/machine.slice/machine-qemu\\x2d3\\x2dinstance\\x2d'
                '0000002a.scope/libvirt/emulator\n'))
        self.assertEqual(
            [(3, 'qemu-3-instance-0000002a')],
            privsep.machine_scopes(
                '0::/machine/qemu-3-instance-0000002a.libvirt-qemu/'
                'emulator\n'))
        # cgroup v1: one line per hierarchy.
        self.assertEqual(
            [(5, 'qemu-5-vm'), None],
            privsep.machine_scopes(
                '4:memory:/machine/qemu-5-vm.libvirt-qemu/emulator\n'
                '1:name=systemd:/user.slice\n'))
        self.assertEqual([None], privsep.machine_scopes('0::/init.scope\n'))


class TestResolve(testtools.TestCase):
    """Finding a domain's QEMU, and refusing everything else."""

    def setUp(self):
        super().setUp()
        self.host = self.useFixture(FakeHost())

    def refused(self, name, uuid, fragment, exc=privsep.NotTheDomain):
        error = self.assertRaises(exc, privsep.resolve, name, uuid)
        self.assertIn(fragment, str(error))
        return error

    def test_a_process_not_held_leaves_no_pidfd_open(self):
        opened = []
        pidfd_open = os.pidfd_open

        def pidfd(pid, *args):
            opened.append(pidfd_open(os.getpid()))
            return opened[-1]

        def refused(path, flags, *args, **kwargs):
            raise PermissionError(errno.EPERM, 'Operation not permitted',
                                  path)
        self.useFixture(fixtures.MonkeyPatch('os.pidfd_open', pidfd))
        self.useFixture(fixtures.MonkeyPatch(
            'nova_numa_overhead.compute.privsep.os.open', refused))
        self.assertRaises(PermissionError, privsep._hold, 'g', 12345)
        self.assertRaises(OSError, os.fstat, opened[0])

    def test_a_domains_qemu_is_found_and_held(self):
        for systemd in (True, False):
            qemu = self.host.start(systemd=systemd)
            with privsep.resolve(*qemu.identity) as held:
                self.assertEqual(qemu.pid, held.pid)
                self.assertTrue(held.alive())
                self.assertIn('-uuid', held.read('cmdline'))

    def test_a_process_outside_the_domains_machine_scope(self):
        # The attack of the review: aim the helper at a root process (this
        # test runner) through a pid file.
        self.host.pid_file('instance-evil', os.getpid())
        os.symlink('/proc/%d' % os.getpid(),
                   os.path.join(self.host.proc, str(os.getpid())))
        self.refused('instance-evil', str(uuid_mod.uuid4()),
                     'not in a libvirt machine scope')

    def test_another_domains_qemu(self):
        victim = self.host.start(name='instance-victim')
        # A pid file naming the victim's QEMU under another domain's name.
        self.host.pid_file('instance-other', victim.pid)
        self.refused('instance-other', victim.uuid,
                     'its machine scope is qemu-7-instance-victim')

    def test_wrong_uuid(self):
        qemu = self.host.start()
        other = str(uuid_mod.uuid4())
        self.refused(qemu.name, other, 'its -uuid is %s, not %s'
                     % (qemu.uuid, other))

    def test_not_an_emulator(self):
        qemu = self.host.start(exe=self.host.emulator('python3'))
        self.refused(qemu.name, qemu.uuid, 'it runs')

    def test_emulator_writable_by_others(self):
        qemu = self.host.start()
        os.chmod(self.host.bin, 0o777)
        self.addCleanup(os.chmod, self.host.bin, 0o755)
        self.refused(qemu.name, qemu.uuid, 'is writable by others')

    def test_upgraded_emulator_still_counts(self):
        qemu = self.host.start()
        link = os.path.join(qemu.dir, 'exe')
        os.unlink(link)
        os.symlink(qemu.exe + ' (deleted)', link)
        privsep.resolve(*qemu.identity).close()

    def test_bad_names_and_uuids(self):
        uuid = str(uuid_mod.uuid4())
        for name in ('../../../etc/passwd', 'a/b', '', '..', 'a\0b', 7):
            self.refused(name, uuid, 'invalid domain name')
        self.refused('instance-1', 'not-a-uuid', 'invalid domain uuid')

    def test_not_running(self):
        self.refused('instance-absent', str(uuid_mod.uuid4()),
                     'is not running', hypervisor.DomainGone)
        dead = subprocess.Popen([PYTHON, '-c', 'pass'])
        dead.wait()
        self.host.pid_file('instance-dead', dead.pid)
        self.refused('instance-dead', str(uuid_mod.uuid4()), 'has exited',
                     hypervisor.DomainGone)
        self.host.pid_file('instance-init', 1)
        self.refused('instance-init', str(uuid_mod.uuid4()), 'holds no pid')

    def test_exit_while_held_reads_as_gone(self):
        qemu = self.host.start()
        held = privsep.resolve(*qemu.identity)
        self.addCleanup(held.close)
        qemu.stop()
        self.assertFalse(held.alive())
        self.assertRaises(hypervisor.DomainGone, held.check)
        self.assertRaises(hypervisor.DomainGone, held.read, 'maps')

    def test_exit_while_held_without_pidfd(self):
        qemu = self.host.start()
        self.useFixture(fixtures.MockPatchObject(
            os, 'pidfd_open', side_effect=OSError(errno.ENOSYS, 'ENOSYS')))
        held = privsep.resolve(*qemu.identity)
        self.addCleanup(held.close)
        self.assertIsNone(held.pidfd)
        self.assertTrue(held.alive())
        qemu.stop()
        self.assertFalse(held.alive())


class TestEntrypoints(testtools.TestCase):
    """The entrypoints in-process (as the daemon runs them)."""

    def setUp(self):
        super().setUp()
        skip_without_move_pages(self)
        self.useFixture(PrivsepFixture())
        self.host = self.useFixture(FakeHost())
        self.qemu = self.host.start()

    def test_a_pid_is_not_accepted(self):
        # Before: read_maps(pid) read any process's maps through the helper.
        self.assertRaises(TypeError, privsep.read_maps, os.getpid())
        # A pid where the name goes is a domain that does not run.
        self.assertRaises(hypervisor.DomainGone, privsep.read_maps,
                          str(os.getpid()), self.qemu.uuid)
        self.assertRaises(TypeError, privsep.move_pages, os.getpid(),
                          self.qemu.touched, 0, 128)

    def test_move_query_and_maps(self):
        pages = self.qemu.touched + self.qemu.untouched
        name, uuid = self.qemu.identity
        self.assertEqual({'requested': len(pages),
                          'moved': len(self.qemu.touched),
                          'failed': {'ENOENT': len(self.qemu.untouched)}},
                         privsep.move_pages(name, uuid, pages, 0, 128))
        self.assertEqual({0: len(self.qemu.touched)},
                         privsep.query_pages(name, uuid, pages))
        self.assertEqual([0, 0], privsep.page_nodes(name, uuid,
                                                    self.qemu.touched[:2]))
        texts = privsep.read_maps(name, uuid)
        ranges = numa_stat.with_extents(
            numa_stat.numa_maps_ranges(texts['numa_maps']), texts['maps'])
        ram = [r for r in ranges if r.start == self.qemu.touched[0]]
        self.assertEqual(self.qemu.touched, ram[0].addresses())

    def test_cold_pages(self):
        name, uuid = self.qemu.identity
        started = privsep.track_pages(name, uuid, self.qemu.extents)
        if coldpages.soft_dirty_supported():
            self.assertEqual({'mode': coldpages.SOFT_DIRTY_MODE,
                              'error': ''}, started)
            self.assertEqual(self.qemu.touched,
                             privsep.cold_pages(name, uuid,
                                                self.qemu.touched))
        else:
            self.assertIsNone(started['mode'])

    def test_track_pages_takes_extents_not_addresses(self):
        name, uuid = self.qemu.identity
        page = coldpages.PAGE_SIZE
        for bad in ([self.qemu.touched[0]], [(0, page)], [(page, 0, page)],
                    [(0, page, 0)], [(0, page, page + 1)],
                    [(0, 1 << 65, page)], [('0', page, page)]):
            self.assertRaises(ValueError, privsep.track_pages, name, uuid,
                              bad)
        # What crosses the msgpack channel: lists, not tuples.
        started = privsep.track_pages(name, uuid,
                                      [list(e) for e in self.qemu.extents])
        self.assertEqual(coldpages.SOFT_DIRTY_MODE
                         if coldpages.soft_dirty_supported() else None,
                         started['mode'])

    def test_qemu_exit_is_domain_gone_not_esrch(self):
        name, uuid = self.qemu.identity
        self.qemu.stop()
        for call in (lambda: privsep.move_pages(name, uuid,
                                                self.qemu.touched, 0, 128),
                     lambda: privsep.read_maps(name, uuid),
                     lambda: privsep.page_nodes(name, uuid,
                                                self.qemu.touched)):
            self.assertRaises(hypervisor.DomainGone, call)


class DaemonTestCase(testtools.TestCase):
    """Through a real forked privsep daemon.

    The daemon drops to the ``[numa_overhead_privileged]`` user, group and
    capabilities a test sets: what the kernel then allows is what a
    deployment gets.
    """

    def setUp(self):
        super().setUp()
        if os.geteuid() != 0:
            self.skipTest('needs root to start the privsep daemon')
        skip_without_move_pages(self)
        self.host = self.useFixture(FakeHost())
        self.conf = self.useFixture(config_fixture.Config(cfg.CONF))

    def start_daemon(self, user=None, group=None,
                     capabilities=privsep.CAPABILITIES):
        # Explicitly: a Config fixture's cleanup also drops the defaults
        # the context set at import.
        for name, value in (('user', user), ('group', group),
                            ('capabilities', capabilities)):
            cfg.CONF.set_override(name, value,
                                  group='numa_overhead_privileged')
        # The file permissions are under test, not this kernel's
        # CONFIG_MEM_SOFT_DIRTY: the forked daemon inherits this.
        self.useFixture(fixtures.MockPatchObject(
            coldpages, '_SOFT_DIRTY_WORKS', True))
        ctx = privsep.numa_overhead_pctxt
        self.useFixture(fixtures.MockPatchObject(ctx, 'client_mode', True))
        self.assertIsNone(ctx.channel)
        ctx.start(priv_context.Method.FORK)
        self.addCleanup(ctx.stop)


class TestDaemon(DaemonTestCase):

    def test_context(self):
        ctx = privsep.numa_overhead_pctxt
        self.assertEqual('numa_overhead_privileged', ctx.cfg_section)
        for func in (privsep.move_pages, privsep.query_pages,
                     privsep.page_nodes, privsep.track_pages,
                     privsep.cold_pages, privsep.read_maps):
            self.assertTrue(ctx.is_entrypoint(func), func)

    def test_results_and_errors_cross_the_channel(self):
        qemu = self.host.start()
        self.start_daemon()
        name, uuid = qemu.identity
        pages = qemu.touched + qemu.untouched
        self.assertEqual(
            {'requested': len(pages), 'moved': len(qemu.touched),
             'failed': {'ENOENT': len(qemu.untouched)}},
            privsep.move_pages(name, uuid, pages, 0, 256))
        self.assertIn('%x ' % qemu.touched[0],
                      privsep.read_maps(name, uuid)['numa_maps'])
        self.assertRaises(privsep.NotTheDomain, privsep.read_maps, name,
                          str(uuid_mod.uuid4()))
        self.assertRaises(hypervisor.DomainGone, privsep.read_maps,
                          'instance-absent', uuid)


class TestLeastPrivilege(DaemonTestCase):
    """The documented setup against the one the review found lacking."""

    def test_as_qemus_user_without_capabilities(self):
        # [numa_overhead_privileged] user/group = QEMU's, capabilities =
        qemu = self.host.start(user=NOBODY)
        root_qemu = self.host.start()
        self.start_daemon(user=str(NOBODY), group=str(NOBODY),
                          capabilities=[])
        name, uuid = qemu.identity
        moved = privsep.move_pages(name, uuid, qemu.touched, 0, 256)
        self.assertEqual(len(qemu.touched), moved['moved'])
        self.assertIn('numa_maps', privsep.read_maps(name, uuid))
        # pagemap and clear_refs are the owner's: cold pages work.
        self.assertEqual({'mode': coldpages.SOFT_DIRTY_MODE, 'error': ''},
                         privsep.track_pages(name, uuid, qemu.extents))
        self.assertIsNotNone(privsep.cold_pages(name, uuid, qemu.touched))
        # Any process of another user, even one passing every identity
        # check, is the kernel's to refuse.
        error = self.assertRaises(OSError, privsep.read_maps,
                                  *root_qemu.identity)
        self.assertEqual(errno.EACCES, error.errno)
        error = self.assertRaises(OSError, privsep.move_pages,
                                  *root_qemu.identity, root_qemu.touched, 0,
                                  256)
        self.assertIn(error.errno, (errno.EACCES, errno.EPERM))

    def test_as_root_with_the_default_capability(self):
        # What the review ran: QEMU as another user, the helper as root
        # with CAP_SYS_PTRACE (the review's CAP_SYS_NICE served nothing).
        qemu = self.host.start(user=NOBODY)
        self.start_daemon()
        name, uuid = qemu.identity
        moved = privsep.move_pages(name, uuid, qemu.touched, 0, 256)
        self.assertEqual(len(qemu.touched), moved['moved'])
        self.assertIn('numa_maps', privsep.read_maps(name, uuid))
        started = privsep.track_pages(name, uuid, qemu.extents)
        self.assertIsNone(started['mode'])
        self.assertIn('Permission denied (EACCES)', started['error'])
        self.assertIsNone(privsep.cold_pages(name, uuid, qemu.touched))
