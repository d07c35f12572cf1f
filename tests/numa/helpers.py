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
"""Real processes holding memory on chosen nodes, and cgroups for them.

A helper is forked from the test process (a new interpreter costs tens of
seconds under TCG): it maps one anonymous region, faults each part of it
in on its node (``set_mempolicy(MPOL_BIND)`` while touching it), drops
the policy again and then waits for orders on a pipe. Its pages are its
own: private, touched after the fork, so move_pages moves them.
"""

import ctypes
import mmap
import os
import shutil
import signal
import subprocess

import fixtures

from nova_numa_overhead.compute import coldpages
from nova_numa_overhead.compute import mover
from nova_numa_overhead.compute import numa_stat
from nova_numa_overhead.compute import pages
from nova_numa_overhead.compute import syscalls

MIB = 1024 * 1024
HUGE = 2 * MIB
PAGE = os.sysconf('SC_PAGE_SIZE')
MPOL_DEFAULT = 0
MPOL_BIND = 2
MADV_NOHUGEPAGE = 15
CGROUP_ROOT = '/sys/fs/cgroup'
TEST_CGROUP = os.path.join(CGROUP_ROOT, 'numa-tests')


def set_mempolicy(mode: int, nodes=()) -> None:
    bits = ctypes.sizeof(ctypes.c_ulong) * 8
    mask = (ctypes.c_ulong * 1)()
    for node in nodes:
        mask[0] |= 1 << node
    libc = syscalls.libc_syscall()
    ret = libc(ctypes.c_long(syscalls.number('set_mempolicy')),
               ctypes.c_int(mode), mask if nodes else None,
               ctypes.c_ulong(bits + 1 if nodes else 0))
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, 'set_mempolicy: %s' % os.strerror(err))


class Helper:
    """A child process with parts [(node, MiB), ...] of memory.

    cgroup: a directory it joins before touching anything, so its
    memory is charged there. thp=False asks for base pages only.
    """

    def __init__(self, parts, cgroup=None, thp=True):
        self.size = sum(mb for _node, mb in parts) * MIB
        orders_r, orders_w = os.pipe()
        done_r, done_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(orders_w)
            os.close(done_r)
            code = 1
            try:
                self._child(parts, cgroup, thp, orders_r, done_w)
                code = 0
            finally:
                os._exit(code)
        os.close(orders_r)
        os.close(done_w)
        self.pid = pid
        self._orders = orders_w
        self._done = done_r
        reply = self._reply()
        self.start = int(reply, 16)
        self.end = self.start + self.size

    @staticmethod
    def _child(parts, cgroup, thp, orders, done):
        if cgroup:
            with open(os.path.join(cgroup, 'cgroup.procs'), 'w') as f:
                f.write(str(os.getpid()))
        size = sum(mb for _node, mb in parts) * MIB
        # A region starting on a 2 MiB boundary: a transparent huge page
        # straddling two parts would put some of one part on the other's
        # node (Linux 6.1 does not align anonymous mappings itself).
        # (The mmap object stays referenced until the child exits: closing
        # it would unmap the region.)
        mapping = mmap.mmap(-1, size + HUGE, flags=mmap.MAP_PRIVATE |
                            mmap.MAP_ANONYMOUS)
        base = ctypes.addressof(ctypes.c_char.from_buffer(mapping))
        address = -(-base // HUGE) * HUGE
        libc = ctypes.CDLL(None, use_errno=True)
        libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
        if address > base:
            libc.munmap(base, address - base)
        libc.munmap(address + size, base + HUGE - address)
        buf = (ctypes.c_char * size).from_address(address)
        if not thp:
            libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t,
                                     ctypes.c_int)
            libc.madvise(address, size, MADV_NOHUGEPAGE)
        offset = 0
        for node, mb in parts:
            set_mempolicy(MPOL_BIND, [node])
            ctypes.memset(address + offset, 1, mb * MIB)
            offset += mb * MIB
        set_mempolicy(MPOL_DEFAULT)
        os.write(done, b'%x\n' % address)
        while True:
            order = b''
            while not order.endswith(b'\n'):
                chunk = os.read(orders, 4096)
                if not chunk:
                    return
                order += chunk
            words = order.split()
            if words[0] == b'touch':
                # Write one byte at each offset (all pages: 'all').
                if words[1:] == [b'all']:
                    offsets = range(0, size, PAGE)
                else:
                    offsets = [int(w) for w in words[1:]]
                for off in offsets:
                    buf[off] = bytes([(buf[off][0] + 1) % 256])
            os.write(done, b'ok\n')
        del mapping

    def _reply(self) -> bytes:
        reply = b''
        while not reply.endswith(b'\n'):
            chunk = os.read(self._done, 4096)
            if not chunk:
                raise OSError('helper %d died' % self.pid)
            reply += chunk
        return reply.strip()

    def touch(self, offsets='all') -> None:
        """Write to the pages at these offsets (every page by default)."""
        words = 'all' if offsets == 'all' else ' '.join(
            str(o) for o in offsets)
        os.write(self._orders, ('touch %s\n' % words).encode())
        self._reply()

    def addresses(self) -> list:
        return list(range(self.start, self.end, PAGE))

    def region(self) -> numa_stat.Range:
        """Its region as numa_maps and maps describe it now."""
        for rng in numa_stat.read_ranges(self.pid) or ():
            if rng.start <= self.start < (rng.end or rng.start + 1):
                return rng
        raise AssertionError('region %#x of %d not in numa_maps'
                             % (self.start, self.pid))

    def nodes_mb(self) -> dict:
        """MiB of its region per node, from numa_maps."""
        rng = self.region()
        return {n: c * rng.page_size / MIB for n, c in rng.pages.items()
                if c}

    def stop(self) -> None:
        try:
            os.close(self._orders)
            os.close(self._done)
        except OSError:
            pass
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass


def make_cgroup(name: str) -> str:
    """A cgroup under numa-tests with the cpuset and memory controllers."""
    os.makedirs(TEST_CGROUP, exist_ok=True)
    with open(os.path.join(TEST_CGROUP, 'cgroup.subtree_control'),
              'w') as f:
        f.write('+cpuset +memory')
    path = os.path.join(TEST_CGROUP, name)
    os.makedirs(path, exist_ok=True)
    return path


def remove_cgroup(path: str) -> None:
    """Remove a cgroup once its processes are gone."""
    for _ in range(50):
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            import time
            time.sleep(0.1)
    shutil.rmtree(path, ignore_errors=True)


def node_free_mb(node: int) -> int:
    return numa_stat.host_free_memory_mb()[node]


def reserve_hugepages(node: int, count: int) -> int:
    """Ask for count 2 MiB huge pages on node; returns how many."""
    path = ('/sys/devices/system/node/node%d/hugepages/hugepages-2048kB/'
            'nr_hugepages' % node)
    with open(path, 'w') as f:
        f.write(str(count))
    with open(path) as f:
        return int(f.read())


# -- the page helper's operations below its identity check ------------------
#
# The privsep entrypoints take a libvirt domain's identity and refuse any
# process but its QEMU: for plain helper processes the tests call what the
# entrypoints run once the process is verified (as root, in this process).
# tests/numa/test_libvirt.py goes through the entrypoints themselves.

def opener(pid: int):
    """Open ``/proc/<pid>/<name>`` files, like the helper's held process."""
    def open_file(name, mode='r'):
        kwargs = {} if 'b' in mode else {'encoding': 'utf-8',
                                         'errors': 'replace'}
        return open('/proc/%d/%s' % (pid, name), mode, **kwargs)
    return open_file


def read_maps(pid: int) -> dict:
    texts = {}
    for name in ('numa_maps', 'maps'):
        with opener(pid)(name) as f:
            texts[name] = f.read()
    return texts


def move_pages(pid: int, addresses, target_node: int,
               max_batch_pages: int) -> dict:
    result = mover.PageMover(max_batch_pages=max_batch_pages,
                             rate_mb_per_s=0).move(pid, addresses,
                                                   target_node)
    return {'requested': result.requested, 'moved': result.moved,
            'failed': dict(result.failed)}


def page_mover() -> pages.PageMover:
    """The agent's page picker on a plain process: call it with (pid,)."""
    return pages.PageMover(
        read_maps=read_maps,
        page_nodes=lambda pid, addresses: mover.move_pages(pid, addresses,
                                                           None),
        move_pages=move_pages,
        cold_pages=lambda pid, addresses: coldpages.cold(opener(pid),
                                                         addresses),
        track_pages=lambda pid, extents: {
            'mode': coldpages.start(opener(pid), extents), 'error': ''})


def fake_numad(test) -> subprocess.Popen:
    """A process named numad (a copy of sleep: numad itself is not
    installed in the VM), killed at ``test``'s cleanup.
    """
    tmp = test.useFixture(fixtures.TempDir()).path
    binary = os.path.join(tmp, 'numad')
    shutil.copy('/bin/sleep', binary)
    child = subprocess.Popen([binary, '600'])
    test.addCleanup(child.wait)
    test.addCleanup(child.kill)
    return child
