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
"""Raw Linux system calls through libc's ``syscall()`` (no libnuma needed).

The numbers of the NUMA memory-policy calls the agent and the probe use, per
architecture. x86_64 and aarch64 are checked against the kernel's tables;
the others come from the kernel sources' syscall tables.
"""

import ctypes
import errno
import platform

NUMBERS = {
    'move_pages': {'x86_64': 279, 'amd64': 279, 'aarch64': 239,
                   'arm64': 239, 'riscv64': 239, 'ppc64': 301,
                   'ppc64le': 301, 's390x': 310},
    'set_mempolicy': {'x86_64': 238, 'amd64': 238, 'aarch64': 237,
                      'arm64': 237, 'riscv64': 237, 'ppc64': 261,
                      'ppc64le': 261, 's390x': 270},
}

_libc = None


def number(name: str, machine: str | None = None) -> int:
    """The number of system call ``name`` on this (or the given) machine.

    :raises OSError: ENOSYS when it is not known there.
    """
    machine = machine or platform.machine()
    try:
        return NUMBERS[name][machine.lower()]
    except KeyError:
        raise OSError(errno.ENOSYS, '%s syscall number unknown on %s'
                      % (name, machine))


def libc_syscall():
    """libc's ``syscall`` function, errno kept, returning a C long."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
    return _libc.syscall
