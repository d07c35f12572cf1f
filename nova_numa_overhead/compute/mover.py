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
"""Moving a process's pages between NUMA nodes with move_pages(2).

The syscall is called through ctypes so that no libnuma is needed. Moving
another user's process's pages needs CAP_SYS_PTRACE (a ptrace read-access
check since Linux 4.13), and MPOL_MF_MOVE_ALL needs CAP_SYS_NICE: the agent
does it through its privsep helper
(:mod:`nova_numa_overhead.compute.privsep`).

How the kernel reports (as checked on Linux 6.x):

* per page, ``status`` holds the node the page is on, or a negative errno:
  ``-ENOENT`` for a page not present (never touched, or swapped out: normal
  for a guest), ``-EFAULT`` for an address outside any mapping, ``-EACCES``
  for a page shared with another process, ``-EBUSY``/``-ENOMEM``...;
* a target node that does not exist or has no memory fails the whole call
  with ``ENODEV`` (``EACCES`` if the node is outside the process's cpuset)
  before any page moves: the kernel checks each page's target node first;
  a node too full to take the pages fails it with ``ENOMEM`` (seen on
  Linux 6.1 in tests/numa), possibly after moving some of them;
* when some pages of a call could be queued but then not migrated, the
  call returns their number (> 0) and leaves the status of that chunk
  and of every later page unwritten: those are :data:`NOT_REPORTED`;
* a transparent huge page moves whole with the first of its base pages in
  the call, and every other base page of it reports ``-EBUSY`` (it was
  already queued) although it moved (seen on Linux 6.1 in tests/numa).

Pages left unreported or reporting ``-EBUSY`` are therefore asked where
they are after the call.
"""

import ctypes
import errno
import logging
import os
import platform
import time

from nova_numa_overhead.compute import hypervisor
from nova_numa_overhead.compute import syscalls

LOG = logging.getLogger(__name__)

# move_pages(2) syscall numbers by platform.machine().
SYSCALL_NUMBERS = syscalls.NUMBERS['move_pages']

MPOL_MF_MOVE = 1 << 1       # move pages mapped only by this process
MPOL_MF_MOVE_ALL = 1 << 2   # also shared pages (needs CAP_SYS_NICE)

# Status of a page the kernel did not report on (see module docstring).
NOT_REPORTED = -(2 ** 31)
# Errno name under which pages the kernel did not report on are counted:
# it tried them (or would have) and says only how many did not migrate.
UNREPORTED_NAME = 'EBUSY'
# Syscall-level errors about the target node rather than the process:
# every page of the call fails the same way, so they are counted per page.
NODE_ERRNOS = frozenset((errno.ENODEV, errno.EACCES, errno.ENOMEM))
# Statuses that do not say where the page ended up (module docstring).
_ASK_AGAIN = frozenset((NOT_REPORTED, -errno.EBUSY))


class MoveError(OSError):
    """move_pages(2) failed as a whole (process gone, not permitted...)."""

    @property
    def name(self) -> str:
        """The errno's symbolic name, e.g. ``'ESRCH'``."""
        return errno_name(self.errno)


def errno_name(err: int) -> str:
    """Symbolic name of a (positive or negative) errno value."""
    return errno.errorcode.get(abs(err), 'E%d' % abs(err))


def syscall_number(machine: str | None = None) -> int:
    """move_pages(2)'s number on this (or the given) architecture."""
    try:
        return syscalls.number('move_pages',
                               machine or platform.machine())
    except OSError as exc:
        raise MoveError(exc.errno, exc.strerror)


def _syscall():
    return syscalls.libc_syscall()


def move_pages(pid: int, addresses: list[int], nodes: list[int] | None,
               flags: int = MPOL_MF_MOVE) -> list[int]:
    """Call move_pages(2) once; return the status of each page.

    ``nodes`` gives each page's target node; None only queries where the
    pages are. A status is a node id, a negative errno, or
    :data:`NOT_REPORTED`. Raises :class:`MoveError` when the call fails
    as a whole (ESRCH, EPERM, ENODEV...).
    """
    count = len(addresses)
    if nodes is not None and len(nodes) != count:
        raise ValueError('%d addresses but %d nodes' % (count, len(nodes)))
    if count == 0:
        return []
    number = syscall_number()
    pages = (ctypes.c_void_p * count)(*addresses)
    targets = None if nodes is None else (ctypes.c_int * count)(*nodes)
    status = (ctypes.c_int * count)(*([NOT_REPORTED] * count))
    ret = _syscall()(ctypes.c_long(number), ctypes.c_long(pid),
                     ctypes.c_ulong(count), pages, targets, status,
                     ctypes.c_int(flags))
    if ret < 0:
        err = ctypes.get_errno()
        raise MoveError(err, 'move_pages(pid=%d, %d pages) failed: %s' %
                        (pid, count, os.strerror(err)))
    return list(status)


class PageMover:
    """Moves pages in bounded batches, at a bounded average rate.

    The rate is a token bucket in bytes, filled at ``rate_mb_per_s`` and
    holding at most one batch, shared by all calls on this mover so that
    the limit holds across guests and sampling cycles; a rate of 0 means
    unlimited. Each batch is charged in full before it runs (the kernel
    does not say which pages it copied and which were already in place),
    and the pages that failed are refunded.
    """

    def __init__(self, max_batch_pages: int = 1024,
                 rate_mb_per_s: float = 256.0,
                 page_size: int = os.sysconf('SC_PAGE_SIZE'),
                 clock=time.monotonic, sleep=time.sleep,
                 flags: int = MPOL_MF_MOVE):
        if max_batch_pages < 1:
            raise ValueError('max_batch_pages must be at least 1')
        if rate_mb_per_s < 0:
            raise ValueError('rate_mb_per_s must not be negative')
        self.max_batch_pages = max_batch_pages
        self.page_size = page_size
        self.flags = flags
        self._rate = rate_mb_per_s * 1024 * 1024   # bytes per second
        self._clock = clock
        self._sleep = sleep
        self._capacity = float(max_batch_pages * page_size)
        self._tokens = self._capacity
        self._last = None

    def _refill(self) -> None:
        now = self._clock()
        if self._last is not None:
            self._tokens = min(self._capacity,
                               self._tokens + (now - self._last) * self._rate)
        self._last = now

    def _take(self, num_bytes: int) -> None:
        """Wait until ``num_bytes`` may be moved, then take them."""
        if not self._rate:
            return
        self._refill()
        if self._tokens < num_bytes:
            self._sleep((num_bytes - self._tokens) / self._rate)
            self._refill()
        self._tokens -= num_bytes

    def _give_back(self, num_bytes: int) -> None:
        if self._rate:
            self._tokens = min(self._capacity, self._tokens + num_bytes)

    def _batches(self, addresses):
        for start in range(0, len(addresses), self.max_batch_pages):
            yield addresses[start:start + self.max_batch_pages]

    def move(self, pid: int, addresses: list[int], target_node: int
             ) -> hypervisor.MoveResult:
        """Move these pages of ``pid`` to ``target_node``.

        Per-page failures are counted by errno name, never raised; pages
        that fail stay where they were. A target node the kernel refuses
        (ENODEV, EACCES) or that is full (ENOMEM) fails every page not
        moved yet under that name. A failure of
        the process itself (ESRCH, EPERM) raises :class:`MoveError`, with
        what was done so far in its ``result`` attribute.
        """
        moved = 0
        failed = {}
        done = 0
        for batch in self._batches(addresses):
            self._take(len(batch) * self.page_size)
            try:
                statuses = move_pages(pid, batch, [target_node] * len(batch),
                                      self.flags)
            except MoveError as exc:
                self._give_back(len(batch) * self.page_size)
                if exc.errno not in NODE_ERRNOS:
                    exc.result = hypervisor.MoveResult(
                        requested=len(addresses), moved=moved,
                        failed=failed)
                    raise
                if exc.errno == errno.ENOMEM:
                    # The node filled up during the call: some pages of
                    # the batch may have made it.
                    landed = sum(1 for n in self._where(pid, batch,
                                                        target_node)
                                 if n == target_node)
                    moved += landed
                    done += landed
                name = errno_name(exc.errno)
                failed[name] = (failed.get(name, 0) +
                                len(addresses) - done)
                LOG.debug('move_pages to node %d refused for pid %d: %s',
                          target_node, pid, exc)
                break
            done += len(batch)
            unreported = [addr for addr, status in zip(batch, statuses)
                          if status in _ASK_AGAIN]
            if unreported:
                statuses = [s for s in statuses if s not in _ASK_AGAIN]
                statuses += self._where(pid, unreported, target_node)
            batch_failed = 0
            for status in statuses:
                if status == target_node:
                    moved += 1
                    continue
                batch_failed += 1
                if status >= 0 or status == NOT_REPORTED:
                    name = UNREPORTED_NAME
                else:
                    name = errno_name(status)
                failed[name] = failed.get(name, 0) + 1
            self._give_back(batch_failed * self.page_size)
        return hypervisor.MoveResult(requested=len(addresses), moved=moved,
                                     failed=failed)

    def _where(self, pid: int, addresses: list[int], target_node: int
               ) -> list[int]:
        """Statuses for pages the kernel left unreported after a move.

        Queries them: those on the target made it, any other node means
        the kernel could not migrate the page (reported as a non-target
        node, counted as :data:`UNREPORTED_NAME`).
        """
        try:
            return move_pages(pid, addresses, None)
        except MoveError:
            return [NOT_REPORTED] * len(addresses)

    def query(self, pid: int, addresses: list[int]) -> dict[int, int]:
        """Node id -> number of these pages on it (absent pages omitted)."""
        per_node = {}
        for batch in self._batches(addresses):
            for status in move_pages(pid, batch, None):
                if status >= 0:
                    per_node[status] = per_node.get(status, 0) + 1
        return dict(sorted(per_node.items()))
