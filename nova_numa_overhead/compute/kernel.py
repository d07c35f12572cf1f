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
    # Pids of the numad processes running (() : none).
    numad: tuple = ()

    def to_dict(self) -> dict:
        return {'numa_balancing': self.numa_balancing,
                'numad': list(self.numad)}

    def text(self) -> str:
        """One sentence for logs and ``status``."""
        if self.numa_balancing is None:
            balancing = 'automatic NUMA balancing unknown'
        else:
            balancing = 'automatic NUMA balancing %s ' \
                '(kernel.numa_balancing = %d)' % (
                    BALANCING.get(self.numa_balancing, 'on'),
                    self.numa_balancing)
        if self.numad:
            numad = 'numad runs (pid %s)' % ', '.join(
                str(p) for p in self.numad)
        else:
            numad = 'numad not running'
        return 'Kernel: %s; %s.' % (balancing, numad)


def read(proc: str = '/proc') -> KernelState:
    """The kernel's state under ``proc``: what cannot be read is unknown
    (the sysctl) or not found (numad), never an error.
    """
    return KernelState(numa_balancing=_balancing(proc),
                       numad=tuple(numad_pids(proc)))


def _balancing(proc: str) -> int | None:
    try:
        with open(os.path.join(proc, 'sys', 'kernel', 'numa_balancing')) \
                as f:
            value = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return value if value >= 0 else None


def numad_pids(proc: str = '/proc') -> list:
    """Pids of the processes named numad running as root, sorted (numad
    needs root to bind other processes; a user's process that calls
    itself numad does not step the agent back).
    """
    pids = []
    try:
        entries = os.listdir(proc)
    except OSError:
        return pids
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            # Bytes: any process may give itself a name that is not text.
            with open(os.path.join(proc, entry, 'comm'), 'rb') as f:
                if f.read().strip() != NUMAD.encode():
                    continue
            if _real_uid(os.path.join(proc, entry, 'status')) != 0:
                continue
        except (OSError, ValueError):
            # Gone since the listing, or hidden (hidepid): not counted.
            continue
        pids.append(int(entry))
    return sorted(pids)


def _real_uid(path: str) -> int | None:
    """The real uid in a ``/proc/<pid>/status`` file (None: not found)."""
    with open(path, 'rb') as f:
        for line in f:
            if line.startswith(b'Uid:'):
                return int(line.split()[1])
    return None
