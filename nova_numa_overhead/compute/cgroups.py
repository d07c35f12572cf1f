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
"""A guest's memory nodes (``cpuset.mems``) and vCPUs' CPUs
(``cpuset.cpus``) through its cpuset cgroups.

libvirt changes a running domain's memory nodeset only in numatune
``mode='restrictive'``; Nova writes no numatune for a floating guest, and on
such a domain (libvirt 9.0, kernel 6.1, cgroup v2) the first live change
succeeds and turns the live XML into ``mode='strict'``, after which every
change is refused. Writing ``cpuset.mems`` of the cgroups libvirt made for
the guest's threads restricts it as often as needed: libvirt neither
notices nor reverts it (not even across a libvirtd restart), and on cgroup
v2 the kernel migrates the pages that lie outside the new nodes during the
write (cgroup v1: when ``cpuset.memory_migrate`` is 1, which libvirt sets).
The domain XML does not change, so nothing of it travels with a live
migration: the agent applies it again on the destination's "started" event.

libvirt puts a QEMU process's threads in sub-cgroups of the machine scope:
``<scope>/emulator``, ``<scope>/vcpuN``, ``<scope>/iothreadN`` (with
systemd one level lower, under ``<scope>/libvirt/``). Every one of them
gets the nodes: the emulator cgroup holds the main thread (which owns the
memory map, so its write migrates the pages), the others the threads whose
future page faults must stay on the nodes. A process in any other cgroup
gets its own cgroup written.

Writing needs write access to the cgroup files (root owns them): the agent
does it through its privsep helper for cgroups
(:func:`nova_numa_overhead.compute.privsep.set_memory_nodes`, which runs as
root). Reading is allowed to everyone.
"""

import os
import re

ROOT = '/sys/fs/cgroup'
# libvirt's per-thread sub-cgroups of a guest.
THREAD_CGROUP_RE = re.compile(r'^(?:emulator|vcpu\d+|iothread\d+)$')
VCPU_CGROUP_RE = re.compile(r'^vcpu\d+$')


class CgroupError(OSError):
    """The cpuset cgroups of a process cannot be read or written."""


def parse_mems(text: str) -> tuple:
    """A cpuset list ('0-2,5') as sorted node ids; '' is ()."""
    nodes = set()
    for part in text.strip().split(','):
        part = part.strip()
        if not part:
            continue
        first, sep, last = part.partition('-')
        try:
            lo, hi = int(first), int(last) if sep else int(first)
        except ValueError:
            raise ValueError('bad cpuset list %r' % text)
        if lo < 0 or hi < lo:
            raise ValueError('bad cpuset list %r' % text)
        nodes.update(range(lo, hi + 1))
    return tuple(sorted(nodes))


def format_mems(nodes) -> str:
    """Node ids as the comma-separated list cpuset.mems takes."""
    return ','.join(str(n) for n in sorted(set(nodes)))


def cpuset_dir(cgroup_text: str, root: str = ROOT) -> tuple[str, int]:
    """The cpuset cgroup directory of ``/proc/<pid>/cgroup`` text.

    :returns: (directory, cgroup version 1 or 2).
    :raises CgroupError: no cpuset controller is listed.
    """
    v2 = None
    for line in cgroup_text.splitlines():
        parts = line.split(':', 2)
        if len(parts) != 3:
            continue
        hier, controllers, path = parts
        if 'cpuset' in controllers.split(','):
            return os.path.join(root, 'cpuset', path.lstrip('/')), 1
        if hier == '0' and controllers == '':
            v2 = os.path.join(root, path.lstrip('/'))
    if v2 is None:
        raise CgroupError('no cpuset cgroup in %r' % cgroup_text.strip())
    return v2, 2


def thread_cgroups(directory: str) -> list[str]:
    """The cgroups of a guest's threads, given the one of its main thread.

    The libvirt sub-cgroups next to ``directory`` (emulator first) when it
    is one of them, else ``directory`` alone.
    """
    directory = os.path.normpath(directory)
    if not THREAD_CGROUP_RE.match(os.path.basename(directory)):
        return [directory]
    parent = os.path.dirname(directory)
    try:
        names = sorted(n for n in os.listdir(parent)
                       if THREAD_CGROUP_RE.match(n) and
                       os.path.isdir(os.path.join(parent, n)))
    except OSError as e:
        raise CgroupError(e.errno, 'cannot list %s: %s'
                          % (parent, e.strerror))
    names.sort(key=lambda n: n != 'emulator')
    return [os.path.join(parent, n) for n in names]


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError as e:
        raise CgroupError(e.errno, 'cannot read %s: %s' % (path, e.strerror))


def process_cpuset(pid: int, proc: str = '/proc',
                   root: str = ROOT) -> tuple[str, int]:
    """(cpuset cgroup directory, cgroup version) of process ``pid``."""
    text = _read(os.path.join(proc, str(int(pid)), 'cgroup'))
    return cpuset_dir(text, root)


def memory_nodes(pid: int, proc: str = '/proc',
                 root: str = ROOT) -> tuple:
    """The nodes the cgroup of ``pid`` restricts it to; () if none.

    () when ``cpuset.mems`` is empty (the parent's nodes apply) or when the
    process has no cpuset cgroup. Raises CgroupError when the process is
    gone.
    """
    try:
        directory, _version = process_cpuset(pid, proc, root)
    except CgroupError:
        if not os.path.exists(os.path.join(proc, str(int(pid)))):
            raise
        return ()
    try:
        return parse_mems(_read(os.path.join(directory, 'cpuset.mems')))
    except CgroupError:
        return ()


def set_memory_nodes(pid: int, nodes, proc: str = '/proc',
                     root: str = ROOT) -> list[str]:
    """Restrict ``pid``'s threads to memory ``nodes`` through cpuset.mems.

    Writes every thread cgroup of the guest (see :func:`thread_cgroups`),
    then checks that each one's effective nodes are ``nodes``: a parent
    cgroup that does not allow them all (Nova's or libvirt's own
    restriction) makes it fail rather than silently use fewer nodes.

    :returns: the cgroup directories written.
    :raises CgroupError: with the cgroup and the kernel's reason.
    """
    cgroup_text = _read(os.path.join(proc, str(int(pid)), 'cgroup'))
    return set_cgroup_mems(cgroup_text, nodes, root)


def set_cgroup_mems(cgroup_text: str, nodes, root: str = ROOT) -> list:
    """:func:`set_memory_nodes` for the process whose ``/proc/<pid>/cgroup``
    reads ``cgroup_text`` (read by the caller through a held process);
    no ``nodes``: every node the parent cgroup allows.
    """
    nodes = tuple(sorted(set(int(n) for n in nodes)))
    if nodes and nodes[0] < 0:
        raise ValueError('nodes must be non-negative ids, not %r'
                         % (nodes,))
    directory, version = _cpuset_dir_below(cgroup_text, root)
    threads = thread_cgroups(directory)
    if not nodes:
        # Every node its parent allows (what it had before the agent).
        nodes = _parents(threads[0], version, 'cpuset.mems')
        if not nodes:
            raise CgroupError('%s allows no memory node'
                              % os.path.dirname(threads[0]))

    def migrate(cgroup):
        if version == 1:
            _enable_v1_migration(cgroup)
    # Not half-restricted (the emulator's thread confined, the vCPUs
    # not): on a failure what was written is put back, best effort.
    return _write_all(threads, 'cpuset.mems', nodes, 'nodes',
                      before=migrate)


def set_cgroup_vcpu_cpus(cgroup_text: str, cpus, root: str = ROOT) -> list:
    """Keep the vCPU threads of the process whose ``/proc/<pid>/cgroup``
    reads ``cgroup_text`` on ``cpus`` (``cpuset.cpus`` of libvirt's
    ``vcpuN`` cgroups); () gives them the CPUs their parent allows again.

    What ``virDomainPinVcpu`` does, without its ``<vcpupin>`` in the live
    XML, which Nova copies into a live migration's destination and
    persistent definition: like ``cpuset.mems``, nothing of this travels.
    The kernel sets every thread's affinity to the cgroup's CPUs on the
    write. Checked as :func:`set_cgroup_mems` is (effective CPUs, put back
    on a failure).

    :returns: the cgroup directories written.
    :raises CgroupError: no vCPU cgroup, or the kernel's refusal.
    """
    cpus = tuple(sorted(set(int(c) for c in cpus)))
    if cpus and cpus[0] < 0:
        raise ValueError('CPUs must be non-negative ids, not %r' % (cpus,))
    directory, version = _cpuset_dir_below(cgroup_text, root)
    vcpus = [c for c in thread_cgroups(directory)
             if VCPU_CGROUP_RE.match(os.path.basename(c))]
    if not vcpus:
        raise CgroupError('no vCPU cgroup (vcpuN) next to %s' % directory)
    if not cpus:
        cpus = _parents(vcpus[0], version, 'cpuset.cpus')
    return _write_all(vcpus, 'cpuset.cpus', cpus, 'CPUs',
                      after=lambda cgroup: _set_affinity(cgroup, version,
                                                         cpus))


def _cpuset_dir_below(cgroup_text: str, root: str) -> tuple[str, int]:
    """:func:`cpuset_dir`, refused unless below ``root``."""
    directory, version = cpuset_dir(cgroup_text, root)
    if not os.path.normpath(directory).startswith(
            os.path.normpath(root) + os.sep):
        raise CgroupError('cgroup %s is not below %s' % (directory, root))
    return directory, version


def _parents(cgroup: str, version: int, name: str) -> tuple:
    """The ids the parent of ``cgroup`` allows in ``name``: its effective
    ones (cgroup v2), or its own (v1, where "the parent's" has no value
    and a child's must be written out).
    """
    parent = os.path.dirname(cgroup)
    return parse_mems(_read(os.path.join(
        parent, name + '.effective' if version == 2 else name)))


def _write_all(cgroups, name: str, ids, what: str, before=None,
               after=None) -> list:
    """``ids`` into ``name`` (``cpuset.mems``, ``cpuset.cpus``) of every
    one of ``cgroups``, each checked against its effective ids (a parent
    that does not allow them all makes it fail rather than silently use
    fewer); on a failure what was written is put back, best effort.
    ``before(cgroup)`` and ``after(cgroup)`` run around each write.

    :returns: the cgroup directories written.
    """
    value = format_mems(ids)
    written = []
    try:
        for cgroup in cgroups:
            if before is not None:
                before(cgroup)
            path = os.path.join(cgroup, name)
            old = _read(path).strip()
            try:
                _write(path, value)
            except OSError as e:
                raise CgroupError(e.errno, 'cannot write %s to %s: %s'
                                  % (value, path, e.strerror))
            written.append((cgroup, old))
            effective = path + '.effective'
            if os.path.exists(effective):
                got = parse_mems(_read(effective))
                if got != tuple(ids):
                    raise CgroupError('%s allows %s %s, not %s: a '
                                      'parent cgroup restricts them'
                                      % (cgroup, what,
                                         format_mems(got) or '-', value))
            if after is not None:
                after(cgroup)
    except (CgroupError, OSError):
        _put_back(written, name)
        raise
    return [cgroup for cgroup, _old in written]


def _set_affinity(cgroup: str, version: int, cpus) -> None:
    """Every thread of ``cgroup`` on ``cpus``, also where it asked for
    fewer before: since Linux 6.2 a cpuset change keeps the CPUs a thread
    last asked for with sched_setaffinity (numad's binding, libvirt's own
    pinning), so the cgroup's CPUs alone could leave it on those. Needs
    CAP_SYS_NICE for QEMU's threads (another user's); without it the
    kernel's affinity must already be ``cpus``.
    """
    path = os.path.join(cgroup, 'cgroup.threads' if version == 2
                        else 'tasks')
    if not os.path.exists(path):
        return
    wanted = set(cpus)
    for line in _read(path).split():
        tid = int(line)
        try:
            os.sched_setaffinity(tid, wanted)
        except ProcessLookupError:
            continue
        except PermissionError:
            try:
                now = os.sched_getaffinity(tid)
            except ProcessLookupError:
                continue
            if now != wanted:
                raise CgroupError(
                    'thread %d of %s keeps CPUs %s, not %s: an earlier '
                    'affinity of its own, which only CAP_SYS_NICE may '
                    'change (the cgroup helper\'s capabilities)'
                    % (tid, cgroup, format_mems(now), format_mems(wanted)))


def _put_back(written, name: str) -> None:
    for cgroup, before in reversed(written):
        try:
            _write(os.path.join(cgroup, name), before)
        except OSError:
            pass


def _write(path: str, value: str) -> None:
    """One write(2) of ``value`` to a cgroup file, also of an empty one
    (cgroup v2's "no restriction of its own", what libvirt leaves a
    floating guest): Python writes nothing for an empty string, and a
    cgroup file ignores O_TRUNC, so the old value would stay.
    """
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, (value or '\n').encode())
    finally:
        os.close(fd)


def _enable_v1_migration(cgroup: str) -> None:
    """cgroup v1 moves pages on a cpuset.mems change only if told to."""
    path = os.path.join(cgroup, 'cpuset.memory_migrate')
    if os.path.exists(path) and _read(path).strip() != '1':
        try:
            with open(path, 'w') as f:
                f.write('1')
        except OSError as e:
            raise CgroupError(e.errno, 'cannot write %s: %s'
                              % (path, e.strerror))
