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
"""Which of a guest's pages were not used recently: the swap FIFO's
candidates come from these first.

Two kernel interfaces can tell, both read through ``/proc/<pid>/pagemap``
(64 bits per virtual page: bit 63 present, bit 55 soft-dirty, bits 0-54 the
page frame number, visible with CAP_SYS_ADMIN):

* idle page tracking (``/sys/kernel/mm/page_idle/bitmap``, kernels built
  with CONFIG_IDLE_PAGE_TRACKING): mark the guest's frames idle, and a
  frame still idle a period later was not accessed at all;
* soft-dirty bits (``/proc/<pid>/clear_refs``, value 4): a page whose bit
  is still clear a period later was not written.

Idle tracking is used where the kernel has it, soft-dirty where it has
CONFIG_MEM_SOFT_DIRTY (checked on the agent's own memory); when neither
works :func:`mode` says None and the caller falls back to the guest's
address space order.
Both need the privileges of the page mover (see
:mod:`nova_numa_overhead.compute.privsep`).
"""

import os
import struct

PAGE_IDLE_BITMAP = '/sys/kernel/mm/page_idle/bitmap'
PRESENT = 1 << 63
SOFT_DIRTY = 1 << 55
PFN_MASK = (1 << 55) - 1
PAGE_SIZE = os.sysconf('SC_PAGE_SIZE')
IDLE = 'idle'
SOFT_DIRTY_MODE = 'soft-dirty'


_SOFT_DIRTY_WORKS = None


def soft_dirty_supported() -> bool:
    """Whether writes set the soft-dirty bit (tried on our own page)."""
    global _SOFT_DIRTY_WORKS
    if _SOFT_DIRTY_WORKS is None:
        import ctypes
        import mmap
        buf = mmap.mmap(-1, PAGE_SIZE,
                        flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        try:
            buf[0] = 1
            address = ctypes.addressof(ctypes.c_char.from_buffer(buf))
            with open('/proc/self/clear_refs', 'w') as f:
                f.write('4')
            buf[0] = 2
            entry = pagemap_entries(os.getpid(), [address])[0]
            _SOFT_DIRTY_WORKS = bool(entry & SOFT_DIRTY)
            del address
        except OSError:
            _SOFT_DIRTY_WORKS = False
        finally:
            try:
                buf.close()
            except BufferError:
                pass
    return _SOFT_DIRTY_WORKS


def mode(bitmap: str = PAGE_IDLE_BITMAP, soft_dirty=None) -> str | None:
    """The tracking this kernel offers, None when it cannot tell."""
    if os.path.exists(bitmap):
        return IDLE
    if soft_dirty is None:
        soft_dirty = soft_dirty_supported()
    return SOFT_DIRTY_MODE if soft_dirty else None


def pagemap_entries(pid: int, addresses, proc: str = '/proc') -> list:
    """The raw 64-bit pagemap entry of each address (0 when unreadable)."""
    entries = []
    with open(os.path.join(proc, str(pid), 'pagemap'), 'rb') as f:
        for address in addresses:
            f.seek(address // PAGE_SIZE * 8)
            raw = f.read(8)
            entries.append(struct.unpack('<Q', raw)[0] if len(raw) == 8
                           else 0)
    return entries


def start(pid: int, addresses, proc: str = '/proc',
          bitmap: str = PAGE_IDLE_BITMAP, soft_dirty=None) -> str | None:
    """Start a tracking period for these pages; returns the mode used."""
    used = mode(bitmap, soft_dirty)
    if used is None:
        return None
    if used == IDLE:
        frames = [e & PFN_MASK for e in pagemap_entries(pid, addresses, proc)
                  if e & PRESENT and e & PFN_MASK]
        _set_idle(frames, bitmap)
        return IDLE
    with open(os.path.join(proc, str(pid), 'clear_refs'), 'w') as f:
        f.write('4')
    return SOFT_DIRTY_MODE


def cold(pid: int, addresses, proc: str = '/proc',
         bitmap: str = PAGE_IDLE_BITMAP, soft_dirty=None) -> list | None:
    """The addresses whose pages were not used since :func:`start`.

    Absent pages are not listed: there is nothing to move. None when the
    kernel cannot tell.
    """
    used = mode(bitmap, soft_dirty)
    if used is None:
        return None
    entries = pagemap_entries(pid, addresses, proc)
    if used == IDLE:
        idle = _idle_frames([e & PFN_MASK for e in entries if e & PRESENT],
                            bitmap)
        return [a for a, e in zip(addresses, entries)
                if e & PRESENT and (e & PFN_MASK) in idle]
    return [a for a, e in zip(addresses, entries)
            if e & PRESENT and not e & SOFT_DIRTY]


def _set_idle(frames, bitmap):
    words = {}
    for pfn in frames:
        words[pfn // 64] = words.get(pfn // 64, 0) | 1 << (pfn % 64)
    with open(bitmap, 'r+b') as f:
        for word, bits in sorted(words.items()):
            f.seek(word * 8)
            f.write(struct.pack('<Q', bits))


def _idle_frames(frames, bitmap) -> set:
    idle = set()
    with open(bitmap, 'rb') as f:
        for pfn in frames:
            f.seek(pfn // 64 * 8)
            raw = f.read(8)
            if len(raw) == 8 and struct.unpack('<Q', raw)[0] >> (pfn % 64) & 1:
                idle.add(pfn)
    return idle
