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
"""What else places guests on this host: the kernel's automatic NUMA
balancing and numad.

Read from ``/proc`` of the host the agent runs on (a libvirt connection
to a local QEMU; a remote or simulated hypervisor says nothing of its
kernel): ``/proc/sys/kernel/numa_balancing`` (0 off, 1 on, 2 memory
tiering only, 3 both) and the processes whose ``comm`` is ``numad`` and
whose real uid is root. Unprivileged reads: every process's ``comm`` and
``status`` are world-readable (unless ``/proc`` is mounted with
``hidepid``).
"""

import dataclasses
import errno
import os

NUMAD = 'numad'
# /proc/sys/kernel/numa_balancing values (kernel 5.18+ adds the tiering
# modes: 2 memory tiering alone, no NUMA balancing between nodes).
BALANCING = {0: 'off', 1: 'on', 2: 'memory tiering only',
             3: 'on, with memory tiering'}


@dataclasses.dataclass(frozen=True)
class KernelState:
    """The host's kernel placement besides the agent."""

    # /proc/sys/kernel/numa_balancing (None: unknown, unreadable).
    numa_balancing: int | None = None
    # Pids of the numad processes running (() : none; None: unknown,
    # /proc unreadable or hiding other users' processes).
    numad: tuple | None = ()

    def to_dict(self) -> dict:
        return {'numa_balancing': self.numa_balancing,
                'numad': None if self.numad is None else list(self.numad)}

    def text(self) -> str:
        """One sentence for logs and ``status``."""
        if self.numa_balancing is None:
            balancing = 'automatic NUMA balancing unknown'
        else:
            balancing = 'automatic NUMA balancing %s ' \
                '(kernel.numa_balancing = %d)' % (
                    BALANCING.get(self.numa_balancing, 'on'),
                    self.numa_balancing)
        if self.numad is None:
            numad = 'whether numad runs unknown (/proc unreadable, or it ' \
                'hides other users\' processes)'
        elif self.numad:
            numad = 'numad runs (pid %s)' % ', '.join(
                str(p) for p in self.numad)
        else:
            numad = 'numad not running'
        return 'Kernel: %s; %s.' % (balancing, numad)


def read(proc: str = '/proc') -> KernelState:
    """The kernel's state under ``proc``: what cannot be read is unknown
    (None), never an error.
    """
    pids = numad_pids(proc)
    return KernelState(numa_balancing=_balancing(proc),
                       numad=None if pids is None else tuple(pids))


def _balancing(proc: str) -> int | None:
    try:
        with open(os.path.join(proc, 'sys', 'kernel', 'numa_balancing')) \
                as f:
            value = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return value if value >= 0 else None


def numad_pids(proc: str = '/proc') -> list | None:
    """Pids of the processes named numad running as root, sorted (numad
    needs root to bind other processes; a user's process that calls
    itself numad does not step the agent back; an exited one not yet
    reaped is not running). None when it cannot be told: ``proc`` cannot
    be listed, hides other users' processes (``hidepid``: no pid 1) or a
    process's files cannot be read for another reason than its exit.
    """
    pids = []
    try:
        entries = os.listdir(proc)
    except OSError:
        return None
    if '1' not in entries:
        return None
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            # Bytes: any process may give itself a name that is not text.
            with open(os.path.join(proc, entry, 'comm'), 'rb') as f:
                if f.read().strip() != NUMAD.encode():
                    continue
            uid, state = _status(os.path.join(proc, entry, 'status'))
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ESRCH):
                continue        # gone since the listing
            return None
        except ValueError:
            continue
        if uid == 0 and state not in (b'Z', b'X'):
            pids.append(int(entry))
    return sorted(pids)


def _status(path: str) -> tuple:
    """(real uid, state letter) in a ``/proc/<pid>/status`` file (None
    where not found).
    """
    uid = state = None
    with open(path, 'rb') as f:
        for line in f:
            if line.startswith(b'Uid:'):
                uid = int(line.split()[1])
            elif line.startswith(b'State:'):
                state = line.split()[1][:1]
    return uid, state
