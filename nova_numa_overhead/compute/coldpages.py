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

Idle tracking is used where the kernel has it and this process can use it
(the bitmap is root's, the frame numbers need CAP_SYS_ADMIN), soft-dirty
where the kernel has CONFIG_MEM_SOFT_DIRTY (checked on this process's own
memory); when neither works :func:`mode` says None and the caller falls
back to the guest's address space order.

The target's ``pagemap`` (mode 0400) and ``clear_refs`` (0200) belong to
its owner: the privileged helper, run as QEMU's user, opens them with no
capability at all (see :mod:`nova_numa_overhead.compute.privsep`); run as
root without CAP_DAC_OVERRIDE it gets EACCES, which the functions here
raise for the caller to handle. Files of the target are opened through
``opener(name, mode)``: the helper's held ``/proc/<pid>`` directory, or
:func:`proc_opener`.
"""

import ctypes
import errno
import mmap
import os
import struct

PAGE_IDLE_BITMAP = '/sys/kernel/mm/page_idle/bitmap'
PRESENT = 1 << 63
SOFT_DIRTY = 1 << 55
PFN_MASK = (1 << 55) - 1
PAGE_SIZE = os.sysconf('SC_PAGE_SIZE')
IDLE = 'idle'
#: Pagemap entries read at once (32 KiB) while idle tracking starts.
CHUNK_PAGES = 4096
SOFT_DIRTY_MODE = 'soft-dirty'


_SOFT_DIRTY_WORKS = None


def proc_opener(pid, proc: str = '/proc'):
    """``opener(name, mode)`` of the files ``<proc>/<pid>/<name>``."""
    def opener(name, mode='r'):
        return open(os.path.join(proc, str(pid), name), mode)
    return opener


def _own_page_entry(write_between: bool) -> int:
    """The pagemap entry of a fresh page of this process."""
    buf = mmap.mmap(-1, PAGE_SIZE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        buf[0] = 1
        address = ctypes.addressof(ctypes.c_char.from_buffer(buf))
        try:
            if write_between:
                with open('/proc/self/clear_refs', 'w') as f:
                    f.write('4')
                buf[0] = 2
            return pagemap_entries(proc_opener('self'), [address])[0]
        finally:
            del address
    finally:
        try:
            buf.close()
        except BufferError:
            pass


def soft_dirty_supported() -> bool:
    """Whether writes set the soft-dirty bit (tried on our own page).

    A process that changed its user (the privileged helper run as QEMU's
    user) is not dumpable: its own ``clear_refs`` is root's and the trial
    cannot run. The answer is then yes: on a kernel without soft-dirty
    bits every present page reads as cold, which is address order.
    """
    global _SOFT_DIRTY_WORKS
    if _SOFT_DIRTY_WORKS is None:
        try:
            _SOFT_DIRTY_WORKS = bool(_own_page_entry(True) & SOFT_DIRTY)
        except PermissionError:
            _SOFT_DIRTY_WORKS = True
        except OSError:
            _SOFT_DIRTY_WORKS = False
    return _SOFT_DIRTY_WORKS


def frames_visible() -> bool:
    """Whether pagemap shows this process frame numbers (CAP_SYS_ADMIN)."""
    try:
        return bool(_own_page_entry(False) & PFN_MASK)
    except OSError:
        return False


def mode(bitmap: str = PAGE_IDLE_BITMAP, soft_dirty=None,
         frames=None) -> str | None:
    """The tracking this kernel offers this process; None when none.

    ``soft_dirty`` and ``frames`` stand for the checks of this process's
    own memory when given (tests).
    """
    if os.access(bitmap, os.R_OK | os.W_OK) and (
            frames_visible() if frames is None else frames):
        return IDLE
    if soft_dirty is None:
        soft_dirty = soft_dirty_supported()
    return SOFT_DIRTY_MODE if soft_dirty else None


def why(exc: OSError) -> str:
    """One line on why a tracking file could not be used."""
    code = errno.errorcode.get(exc.errno, str(exc.errno))
    what = os.path.basename(str(exc.filename)) if exc.filename else 'tracking'
    return '%s: %s (%s)' % (what, exc.strerror or exc, code)


def pagemap_entries(opener, addresses) -> list:
    """The raw 64-bit pagemap entry of each address (0 when unreadable)."""
    with opener('pagemap', 'rb') as f:
        return pagemap_entries_of(f, addresses)


def pagemap_entries_of(f, addresses) -> list:
    """:func:`pagemap_entries` from an open ``pagemap``, a seek each."""
    entries = []
    for address in addresses:
        f.seek(address // PAGE_SIZE * 8)
        raw = f.read(8)
        entries.append(struct.unpack('<Q', raw)[0] if len(raw) == 8 else 0)
    return entries


def start(opener, extents, bitmap: str = PAGE_IDLE_BITMAP,
          soft_dirty=None, frames=None) -> str | None:
    """Start a tracking period for the pages of these extents.

    :param extents: ``(start, end, page_size)`` of each range of the
        guest's RAM. Soft-dirty bits are cleared for the whole process at
        once and never look at them; idle tracking walks their pages a
        chunk at a time, so memory grows with the bitmap words it sets,
        not with the guest.
    :returns: the mode used, None when the kernel cannot tell.
    :raises OSError: a file of the process could not be used.
    """
    used = mode(bitmap, soft_dirty, frames)
    if used is None:
        return None
    if used == IDLE:
        words = {}
        with opener('pagemap', 'rb') as f:
            for first, end, page_size in extents:
                for entries in _extent_entries(f, first, end, page_size):
                    _add_frames(words, entries)
        _set_idle(words, bitmap)
        return IDLE
    with opener('clear_refs', 'w') as f:
        f.write('4')
    return SOFT_DIRTY_MODE


def cold(opener, addresses, bitmap: str = PAGE_IDLE_BITMAP,
         soft_dirty=None, frames=None) -> list | None:
    """The addresses whose pages were not used since :func:`start`.

    Absent pages are not listed: there is nothing to move. None when the
    kernel cannot tell.

    :raises OSError: a file of the process could not be used.
    """
    used = mode(bitmap, soft_dirty, frames)
    if used is None:
        return None
    entries = pagemap_entries(opener, addresses)
    if used == IDLE:
        idle = _idle_frames([e & PFN_MASK for e in entries if e & PRESENT],
                            bitmap)
        return [a for a, e in zip(addresses, entries)
                if e & PRESENT and (e & PFN_MASK) in idle]
    return [a for a, e in zip(addresses, entries)
            if e & PRESENT and not e & SOFT_DIRTY]


def _extent_entries(f, first: int, end: int, page_size: int):
    """Chunks of the pagemap entries of the pages ``first``..``end``.

    One entry per page of ``page_size`` (a huge page's is that of its
    first base page), as :func:`pagemap_entries` reads them but without
    the ones past the end of the file: base pages a read per
    :data:`CHUNK_PAGES` entries, huge pages a read each (a chunk would
    read the entries of their tail pages too).
    """
    pages = range(first, end, page_size)
    for i in range(0, len(pages), CHUNK_PAGES):
        chunk = pages[i:i + CHUNK_PAGES]
        if page_size != PAGE_SIZE:
            yield pagemap_entries_of(f, chunk)
            continue
        f.seek(chunk.start // PAGE_SIZE * 8)
        raw = f.read(len(chunk) * 8)
        whole = len(raw) // 8
        yield struct.unpack('<%dQ' % whole, raw[:whole * 8])


def _add_frames(words: dict, entries) -> None:
    """Set the idle bit of the frame of each present page in ``words``."""
    for entry in entries:
        pfn = entry & PFN_MASK
        if entry & PRESENT and pfn:
            words[pfn // 64] = words.get(pfn // 64, 0) | 1 << (pfn % 64)


def _set_idle(words: dict, bitmap: str) -> None:
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
