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
"""The agent's privileged helper: the pages of a domain's QEMU, nothing else.

Every entrypoint takes a libvirt domain identity (name and uuid), never a
pid: the helper finds the QEMU process itself (libvirt's pid file) and
refuses it unless it is that domain's QEMU:

* its cgroup is the domain's machine scope (``machine-qemu\\x2d<id>\\x2d
  <name>.scope`` under systemd, ``qemu-<id>-<name>.libvirt-qemu``
  without), which only root can move a process into;
* its command line carries ``-uuid <the domain's uuid>``;
* its executable is a QEMU system emulator (``qemu-system-*``,
  ``qemu-kvm``) in a directory only root can write.

The process is held by a pidfd (Linux 5.3; a ``/proc/<pid>`` directory
descriptor where it is missing) from before the checks until after the
operation, and every ``/proc`` file is opened through that directory
descriptor, so a pid reused by another process meanwhile reads as "domain
gone", never as that other process.

Privileges (see doc/source/admin/deployment.rst, which a test keeps true):
move_pages(2) on another process and its ``maps``/``numa_maps`` pass a
ptrace read check (PTRACE_MODE_READ_REALCREDS); ``pagemap`` (mode 0400)
and ``clear_refs`` (0200) belong to the process's owner. Running the
helper as QEMU's user and group with no capability at all passes every
one of them for QEMU and fails them all, in the kernel, for any process
of another user. Run as root it needs CAP_SYS_PTRACE for the first two
and gets EACCES for the last two (cold-page tracking then steps aside).

Entrypoints run in the daemon and their results travel back over msgpack:
they take and return plain data, and an exception is re-raised on the
caller's side from its class name and arguments
(:class:`~nova_numa_overhead.compute.hypervisor.DomainGone`,
:class:`NotTheDomain`, :class:`~nova_numa_overhead.compute.mover.MoveError`,
OSError).
"""

import errno
import os
import re
import select
import stat
import string
import uuid as uuid_mod

from oslo_privsep import capabilities as caps
from oslo_privsep import priv_context

from nova_numa_overhead.compute import cgroups
from nova_numa_overhead.compute import coldpages
from nova_numa_overhead.compute import hypervisor
from nova_numa_overhead.compute import mover

#: The default: what a helper running as root needs (move_pages(2),
#: ``maps``, ``numa_maps`` of QEMU running as another user). The
#: documented deployment runs it as QEMU's user with none at all.
CAPABILITIES = [caps.CAP_SYS_PTRACE]

numa_overhead_pctxt = priv_context.PrivContext(
    'nova_numa_overhead',
    cfg_section='numa_overhead_privileged',
    pypath=__name__ + '.numa_overhead_pctxt',
    capabilities=CAPABILITIES,
)

#: The helper that restricts a domain's memory nodes and vCPUs' CPUs:
#: cpuset.mems and cpuset.cpus of its QEMU threads' cgroups, files root
#: owns (mode 0644), so it runs as root (the page helper runs best as
#: QEMU's user); CAP_SYS_PTRACE to verify QEMU's executable like the
#: other, CAP_SYS_NICE to set the vCPU threads' affinity (Linux 6.2 keeps
#: a thread's own across a cpuset change).
CGROUP_CAPABILITIES = [caps.CAP_SYS_PTRACE, caps.CAP_SYS_NICE]
numa_overhead_cgroup_pctxt = priv_context.PrivContext(
    'nova_numa_overhead',
    cfg_section='numa_overhead_cgroups',
    pypath=__name__ + '.numa_overhead_cgroup_pctxt',
    capabilities=CGROUP_CAPABILITIES,
)

#: Where libvirt's system QEMU driver keeps ``<domain name>.pid``.
PID_DIR = '/run/libvirt/qemu'
PROC = '/proc'
#: Executable names of QEMU system emulators.
EMULATOR = re.compile(r'qemu-system-[A-Za-z0-9_]+|qemu-kvm')
#: Who must own the emulator and its directory (root; tests change it).
TRUSTED_OWNER = 0
#: libvirt's machine names are cut at this length.
MACHINE_NAME_MAX = 64
_HOSTNAME_CHARS = frozenset(string.ascii_letters + string.digits + '-')
_SYSTEMD_SCOPE = re.compile(r'machine-qemu-(\d+)-(.+)\.scope')
_LIBVIRT_SCOPE = re.compile(r'qemu-(\d+)-(.+)\.libvirt-qemu')


class NotTheDomain(hypervisor.HypervisorError):
    """The process found is not this domain's QEMU: nothing was done."""


def _append_valid(prefix: str, name: str, old: bool) -> str:
    """libvirt's virDomainMachineNameAppendValid (two historic variants)."""
    out = prefix
    skip = True
    for char in name:
        if len(out) >= MACHINE_NAME_MAX:
            break
        if char in '.-':
            if not skip:
                out += char
            skip = True
            continue
        if old:
            # Older libvirt: any character ends a run of '.'/'-'.
            skip = False
        if char not in _HOSTNAME_CHARS:
            continue
        out += char
        skip = False
    return out.rstrip('-.')


def machine_names(domain_id: int, name: str) -> set:
    """The machine name(s) libvirt gives a system QEMU domain."""
    prefix = 'qemu-%d-' % domain_id
    return {_append_valid(prefix, name, old) for old in (False, True)}


def _unescape_unit(text: str) -> str:
    return re.sub(r'\\x([0-9a-fA-F]{2})',
                  lambda m: chr(int(m.group(1), 16)), text)


def machine_scopes(cgroup_text: str) -> list:
    """``(domain id, machine name)`` of each line's machine scope (or None).

    One entry per line of ``/proc/<pid>/cgroup``.
    """
    found = []
    for line in cgroup_text.splitlines():
        if not line.strip():
            continue
        path = line.split(':', 2)[-1]
        scope = None
        for part in path.split('/'):
            for pattern, unescape in ((_SYSTEMD_SCOPE, True),
                                      (_LIBVIRT_SCOPE, False)):
                match = pattern.fullmatch(_unescape_unit(part) if unescape
                                          else part)
                if match:
                    scope = (int(match.group(1)),
                             'qemu-%s-%s' % match.groups())
        found.append(scope)
    return found


def _check_name(name) -> str:
    if (not isinstance(name, str) or not name or len(name) > 255 or
            '/' in name or '\0' in name or name in ('.', '..')):
        raise NotTheDomain('invalid domain name %r' % (name,))
    return name


def _check_uuid(value) -> str:
    try:
        return str(uuid_mod.UUID(str(value)))
    except ValueError:
        raise NotTheDomain('invalid domain uuid %r' % (value,))


def _trusted(path: str) -> bool:
    """Whether only root can change this file or its directory."""
    try:
        for target in (path, os.path.dirname(path)):
            info = os.stat(target)
            writable = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
            if info.st_uid != TRUSTED_OWNER or writable:
                return False
    except OSError:
        return False
    return True


class Qemu:
    """A domain's QEMU process, verified and held until closed.

    ``pid`` for syscalls, :meth:`open` for its ``/proc`` files (through the
    held directory), :meth:`check` before trusting a result.
    """

    def __init__(self, name: str, pid: int, dirfd: int, pidfd=None):
        self.name = name
        self.pid = pid
        self.dirfd = dirfd
        self.pidfd = pidfd

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        for fd in (self.dirfd, self.pidfd):
            if fd is not None:
                os.close(fd)
        self.dirfd = self.pidfd = None

    def gone(self) -> hypervisor.DomainGone:
        return hypervisor.DomainGone('QEMU of %s (pid %d) exited'
                                     % (self.name, self.pid))

    def alive(self) -> bool:
        if self.pidfd is not None:
            poller = select.poll()
            poller.register(self.pidfd, select.POLLIN)
            return not poller.poll(0)
        try:
            os.stat('stat', dir_fd=self.dirfd)
        except OSError:
            return False
        return True

    def check(self) -> None:
        """Raise DomainGone if the process exited (its pid may be reused)."""
        if not self.alive():
            raise self.gone()

    def open(self, name: str, mode: str = 'r'):
        """One of the process's ``/proc`` files; DomainGone once it exited."""
        def opener(path, flags):
            return os.open(path, flags, dir_fd=self.dirfd)
        kwargs = {} if 'b' in mode else {'encoding': 'utf-8',
                                         'errors': 'replace'}
        try:
            return open(name, mode, opener=opener, **kwargs)
        except (FileNotFoundError, ProcessLookupError):
            raise self.gone()

    def read(self, name: str, mode: str = 'r'):
        with self.open(name, mode) as f:
            return f.read()


def _pid_of(name: str) -> int:
    path = os.path.join(PID_DIR, name + '.pid')
    try:
        with open(path) as f:
            text = f.read(32).strip()
    except FileNotFoundError:
        raise hypervisor.DomainGone('domain %s is not running (no %s)'
                                    % (name, path))
    try:
        pid = int(text)
    except ValueError:
        pid = 0
    if pid <= 1:
        raise NotTheDomain('%s holds no pid: %r' % (path, text))
    return pid


def _hold(name: str, pid: int) -> Qemu:
    pidfd = None
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        raise hypervisor.DomainGone('domain %s: pid %d has exited'
                                    % (name, pid))
    except (AttributeError, OSError):
        # Python < 3.9 or Linux < 5.3: the /proc directory alone holds it.
        pidfd = None
    try:
        dirfd = os.open(os.path.join(PROC, str(pid)),
                        os.O_RDONLY | os.O_DIRECTORY)
    except BaseException as exc:
        # Not held: the pidfd is closed whatever failed (EPERM, EMFILE:
        # the helper lives long, tried again every cycle).
        if pidfd is not None:
            os.close(pidfd)
        if isinstance(exc, FileNotFoundError):
            raise hypervisor.DomainGone('domain %s: pid %d has exited'
                                        % (name, pid))
        raise
    return Qemu(name, pid, dirfd, pidfd)


def _verify(qemu: Qemu, name: str, uuid: str) -> None:
    refuse = 'pid %d is not the QEMU of domain %s' % (qemu.pid, name)
    scopes = machine_scopes(qemu.read('cgroup'))
    named = [s for s in scopes if s is not None]
    if not named:
        raise NotTheDomain('%s: not in a libvirt machine scope' % refuse)
    for domain_id, machine in named:
        if machine not in machine_names(domain_id, name):
            raise NotTheDomain('%s: its machine scope is %s' % (refuse,
                                                                machine))
    argv = qemu.read('cmdline').split('\0')
    uuids = [argv[i + 1].lower() for i in range(len(argv) - 1)
             if argv[i] == '-uuid']
    if uuids != [uuid]:
        raise NotTheDomain('%s: its -uuid is %s, not %s'
                           % (refuse, ','.join(uuids) or 'missing', uuid))
    try:
        exe = os.readlink('exe', dir_fd=qemu.dirfd)
    except (FileNotFoundError, ProcessLookupError):
        raise qemu.gone()
    deleted = exe.endswith(' (deleted)')
    if deleted:
        # QEMU upgraded under a running guest: the name still tells.
        exe = exe[:-len(' (deleted)')]
    if not EMULATOR.fullmatch(os.path.basename(exe)):
        raise NotTheDomain('%s: it runs %s' % (refuse, exe))
    if not deleted and not _trusted(exe):
        raise NotTheDomain('%s: %s or its directory is not root-owned or '
                           'is writable by others' % (refuse, exe))
    qemu.check()


def resolve(name: str, uuid: str) -> Qemu:
    """The QEMU process of this domain, verified; close it when done.

    :raises DomainGone: the domain is not running (any more).
    :raises NotTheDomain: the process is not this domain's QEMU.
    """
    name = _check_name(name)
    uuid = _check_uuid(uuid)
    qemu = _hold(name, _pid_of(name))
    try:
        _verify(qemu, name, uuid)
    except BaseException:
        qemu.close()
        raise
    return qemu


def _moves(qemu: Qemu, call):
    """Run ``call`` (a move_pages(2) user); ESRCH and exits: DomainGone."""
    try:
        result = call()
    except mover.MoveError as exc:
        if exc.errno == errno.ESRCH:
            raise qemu.gone()
        raise
    qemu.check()
    return result


@numa_overhead_pctxt.entrypoint
def move_pages(name: str, uuid: str, addresses: list, target_node: int,
               max_batch_pages: int) -> dict:
    """Move pages of the domain's QEMU to ``target_node``, unthrottled.

    Returns ``{'requested': n, 'moved': n, 'failed': {errno name: n}}``.
    The caller throttles by sizing its calls: the daemon is shared and
    must not sleep on anyone's behalf.
    """
    with resolve(name, uuid) as qemu:
        result = _moves(qemu, lambda: mover.PageMover(
            max_batch_pages=max_batch_pages, rate_mb_per_s=0).move(
                qemu.pid, addresses, target_node))
    return {'requested': result.requested, 'moved': result.moved,
            'failed': dict(result.failed)}


@numa_overhead_pctxt.entrypoint
def query_pages(name: str, uuid: str, addresses: list) -> dict:
    """Node id -> how many of these pages of the domain are on it."""
    with resolve(name, uuid) as qemu:
        return _moves(qemu, lambda: mover.PageMover(rate_mb_per_s=0).query(
            qemu.pid, addresses))


@numa_overhead_pctxt.entrypoint
def page_nodes(name: str, uuid: str, addresses: list) -> list:
    """The node of each page of the domain (negative errno where none)."""
    with resolve(name, uuid) as qemu:
        return _moves(qemu, lambda: mover.move_pages(qemu.pid, addresses,
                                                     None))


def _check_extents(extents) -> list:
    """``(start, end, page_size)`` triples of whole pages, or ValueError.

    From the agent: a bad one must fail here, not make the helper walk
    2**64 bytes' worth of page addresses.
    """
    checked = []
    for extent in extents:
        try:
            start, end, page_size = extent
        except (TypeError, ValueError):
            raise ValueError('extent %r is not (start, end, page_size)'
                             % (extent,))
        if (not all(type(v) is int for v in (start, end, page_size)) or
                page_size <= 0 or page_size % coldpages.PAGE_SIZE or
                not 0 <= start < end <= 1 << 64):
            raise ValueError('invalid extent %r' % (extent,))
        checked.append((start, end, page_size))
    return checked


@numa_overhead_pctxt.entrypoint
def track_pages(name: str, uuid: str, extents: list) -> dict:
    """Start a cold-page tracking period (see :func:`coldpages.start`).

    ``extents`` are the ``(start, end, page_size)`` of the guest's RAM
    ranges, a few numbers a range whatever the guest's size: one call a
    domain per period.

    Returns ``{'mode': mode or None, 'error': why not or ''}``: a kernel
    without the interfaces, or files this helper may not open (it does
    not run as QEMU's user), give no mode and the reason.

    :raises ValueError: an extent is not one.
    """
    extents = _check_extents(extents)
    with resolve(name, uuid) as qemu:
        try:
            used = coldpages.start(qemu.open, extents)
        except OSError as exc:
            if isinstance(exc, (FileNotFoundError, ProcessLookupError)):
                qemu.check()
            return {'mode': None, 'error': coldpages.why(exc)}
        return {'mode': used, 'error': '' if used else
                'this kernel has neither idle page tracking nor '
                'soft-dirty bits'}


@numa_overhead_pctxt.entrypoint
def cold_pages(name: str, uuid: str, addresses: list) -> list | None:
    """Pages of the domain not used since track_pages; None if unknown."""
    with resolve(name, uuid) as qemu:
        try:
            return coldpages.cold(qemu.open, addresses)
        except OSError:
            qemu.check()
            return None


@numa_overhead_pctxt.entrypoint
def read_maps(name: str, uuid: str) -> dict:
    """The text of the domain's QEMU ``numa_maps`` and ``maps``.

    Returned as text and parsed by the caller
    (:func:`nova_numa_overhead.compute.numa_stat.numa_maps_ranges`,
    :func:`~nova_numa_overhead.compute.numa_stat.with_extents`), so that
    the daemon does as little as possible.
    """
    with resolve(name, uuid) as qemu:
        texts = {part: qemu.read(part) for part in ('numa_maps', 'maps')}
        qemu.check()
        return texts


@numa_overhead_cgroup_pctxt.entrypoint
def set_memory_nodes(name: str, uuid: str, nodes: list) -> list:
    """Restrict the domain's QEMU to memory ``nodes`` (cpuset.mems).

    Writes the cpuset cgroups of its threads, found from the verified
    process (see :func:`nova_numa_overhead.compute.cgroups.set_cgroup_mems`);
    on cgroup v2 the kernel moves the pages outside ``nodes`` meanwhile.
    Returns the cgroups written.
    """
    with resolve(name, uuid) as qemu:
        written = cgroups.set_cgroup_mems(qemu.read('cgroup'), nodes)
        qemu.check()
        return written


@numa_overhead_cgroup_pctxt.entrypoint
def set_vcpu_cpus(name: str, uuid: str, cpus: list) -> list:
    """Keep the domain's vCPU threads on ``cpus`` (cpuset.cpus of its
    vcpuN cgroups; [] = the CPUs their parent allows), see
    :func:`nova_numa_overhead.compute.cgroups.set_cgroup_vcpu_cpus`.
    Returns the cgroups written.
    """
    with resolve(name, uuid) as qemu:
        written = cgroups.set_cgroup_vcpu_cpus(qemu.read('cgroup'), cpus)
        qemu.check()
        return written
