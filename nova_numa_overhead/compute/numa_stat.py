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
"""Where a process's memory lives, per NUMA node, from procfs and cgroupfs.

The ``parse_*`` functions and :func:`numa_maps_ranges` are pure: they take
the text of a kernel file and never touch the file system, so they can be
tested with fixtures and reused on text read by a privileged helper. The
``read_*`` functions and :func:`host_free_memory_mb` are the thin readers
around them; they return None (or an empty result) when the file is not
there rather than raising, because the agent runs on many kernels.

Malformed lines are skipped, never raised on: these files grow new keys
with kernel releases and a parser that breaks on them would blind the agent.

Which cgroup keys count as guest memory
---------------------------------------
A QEMU guest's RAM is either private anonymous memory (the default
``memory-backend-ram``) or, with shared or file-backed memory
(``memory-backend-memfd``/``-file`` on tmpfs, vhost-user), shmem. In cgroup
v2 (Documentation/admin-guide/cgroup-v2.rst) ``anon`` is "memory used in
anonymous mappings such as brk(), sbrk(), and mmap(MAP_ANONYMOUS)" and
``shmem`` is "cached filesystem data that is swap-backed, such as tmpfs, shm
segments, shared anonymous mmap()s"; ``anon_thp``/``shmem_thp`` are already
included in them. ``file`` is NOT used: it includes shmem (so adding both
would count it twice) and also the page cache of disk images and of the
QEMU binary and libraries, which is not guest RAM. The guest's memory is
therefore ``anon + shmem``. Hugetlbfs pages appear in neither (they are
charged to the hugetlb controller); such guests are pinned by Nova and the
agent leaves them alone anyway.

cgroup v1 (hybrid hosts keep the memory controller there) reports pages
rather than bytes, in ``key=total N0=...`` lines, and puts shmem on the anon
LRU, so there the guest's memory is ``anon + unevictable`` (unevictable
holds mlock()ed guest RAM, ``<locked/>`` in libvirt), taking the
``hierarchical_`` variants when present.
"""

import dataclasses
import glob
import os
import re

MIB = 1024 * 1024

# cgroup v2 numa_stat keys that are guest RAM (bytes); see module docstring.
V2_GUEST_KEYS = ('anon', 'shmem')
# cgroup v1 numa_stat keys that are guest RAM (pages).
V1_GUEST_KEYS = ('anon', 'unevictable')

_NODE_RE = re.compile(r'^N(\d+)=(\d+)$')
# A numa_maps token that ends the memory policy: a "key=<number>" counter,
# the backing file, or one of the bare markers.
_NUMA_MAPS_FIELD_RE = re.compile(r'^(?:file=.*|heap|stack|huge|'
                                 r'[A-Za-z_][A-Za-z0-9_]*=\d+)$')
# libvirt's per-thread sub-cgroups below the machine scope (the emulator
# and vCPU threads of one guest are split across them).
_LIBVIRT_THREAD_CGROUP_RE = re.compile(
    r'(?:/libvirt)?(?:/(?:emulator|vcpu\d+|iothread\d+))$')


def format_cpulist(ids) -> str:
    """Ids as the kernel's (and libvirt's) compact list syntax:
    ``{0, 1, 2, 3, 8}`` -> ``'0-3,8'``.
    """
    ranges = []
    for i in sorted(set(ids)):
        if ranges and i == ranges[-1][1] + 1:
            ranges[-1][1] = i
        else:
            ranges.append([i, i])
    return ','.join('%d' % a if a == b else '%d-%d' % (a, b)
                    for a, b in ranges)


def _to_mib(num_bytes: int) -> int:
    """Bytes to MiB, rounded to the nearest MiB."""
    return (num_bytes + MIB // 2) // MIB


def _node_values(tokens) -> dict | None:
    """``N<node>=<value>`` tokens to {node: value}; None if any is bad."""
    values = {}
    for token in tokens:
        match = _NODE_RE.match(token)
        if match is None:
            return None
        values[int(match.group(1))] = int(match.group(2))
    return values


def parse_cgroup_numa_stat(text: str, page_size: int = 4096
                           ) -> dict[int, int]:
    """``memory.numa_stat`` text -> {node id: MiB of guest memory}.

    Understands both formats: cgroup v2 (``anon N0=<bytes> N1=<bytes>``)
    and cgroup v1 (``anon=<pages> N0=<pages>``, converted with
    ``page_size``). Every node the file lists is in the result, with 0
    when the guest has nothing there. See the module docstring for the
    keys that count as guest memory.
    """
    v2 = {}
    v1 = {}
    for line in text.splitlines():
        tokens = line.split()
        if len(tokens) < 2:
            continue
        head = tokens[0]
        if '=' in head:
            key, _, total = head.partition('=')
            if not total.isdigit():
                continue
            values = _node_values(tokens[1:])
            if values is not None:
                v1[key] = values
        else:
            values = _node_values(tokens[1:])
            if values is not None:
                v2[head] = values

    if v2:
        per_node = _sum_keys(v2, V2_GUEST_KEYS, 1)
    elif v1:
        keys = V1_GUEST_KEYS
        if all('hierarchical_' + key in v1 for key in keys):
            keys = tuple('hierarchical_' + key for key in keys)
        per_node = _sum_keys(v1, keys, page_size)
    else:
        return {}
    return {node: _to_mib(num_bytes)
            for node, num_bytes in sorted(per_node.items())}


def _sum_keys(stats: dict, keys, unit: int) -> dict:
    """Sum ``keys`` of {key: {node: value}} into {node: value * unit}."""
    per_node = {}
    for values in stats.values():
        for node in values:
            per_node.setdefault(node, 0)
    for key in keys:
        for node, value in stats.get(key, {}).items():
            per_node[node] += value * unit
    return per_node


@dataclasses.dataclass(frozen=True)
class Range:
    """One mapping (VMA) of a process as ``numa_maps`` describes it.

    ``pages`` counts resident pages per node in units of ``page_size``
    bytes (the mapping's kernel page size: 2 MiB or 1 GiB for hugetlbfs,
    the base page size otherwise, transparent huge pages included).
    ``anon`` is true for mappings without a backing file (anonymous
    memory, heap, stack): where a default QEMU guest keeps its RAM.
    ``end`` is unknown from ``numa_maps`` alone; :func:`with_extents` fills
    it in from ``/proc/<pid>/maps``.
    """

    start: int
    policy: str
    pages: dict
    page_size: int
    anon: bool
    file: str | None = None
    huge: bool = False
    end: int | None = None

    @property
    def resident_pages(self) -> int:
        """Pages present in memory, all nodes together."""
        return sum(self.pages.values())

    @property
    def resident_bytes(self) -> int:
        """Bytes present in memory, all nodes together."""
        return self.resident_pages * self.page_size

    def addresses(self) -> list[int]:
        """Every page address of the mapping, as move_pages(2) wants them.

        Needs ``end`` (see :func:`with_extents`).
        """
        if self.end is None:
            raise ValueError('extent of the mapping at %#x is unknown' %
                             self.start)
        return list(range(self.start, self.end, self.page_size))


def _parse_numa_maps_line(line: str, page_size: int) -> Range | None:
    """One ``numa_maps`` line to a :class:`Range`; None if malformed."""
    tokens = line.split()
    if len(tokens) < 2:
        return None
    try:
        start = int(tokens[0], 16)
    except ValueError:
        return None
    # The policy may contain spaces ("prefer (many)", "weighted
    # interleave"), so it runs up to the first field.
    index = 1
    while index < len(tokens) and not _NUMA_MAPS_FIELD_RE.match(tokens[index]):
        index += 1
    policy = ' '.join(tokens[1:index])
    if not policy:
        return None
    pages = {}
    file_name = None
    huge = False
    line_page_size = page_size
    for token in tokens[index:]:
        key, sep, value = token.partition('=')
        if not sep:
            huge = huge or key == 'huge'
            continue
        if key == 'file':
            file_name = value
            continue
        if not value.isdigit():
            continue
        match = _NODE_RE.match(token)
        if match is not None:
            pages[int(match.group(1))] = int(match.group(2))
        elif key == 'kernelpagesize_kB':
            line_page_size = int(value) * 1024
    if line_page_size <= 0:
        return None
    return Range(start=start, policy=policy, pages=pages,
                 page_size=line_page_size, anon=file_name is None,
                 file=file_name, huge=huge)


def numa_maps_ranges(text: str, page_size: int = 4096) -> list[Range]:
    """``/proc/<pid>/numa_maps`` text -> one :class:`Range` per mapping.

    ``page_size`` is used for lines without ``kernelpagesize_kB`` (kernels
    older than 2.6.39 did not print it).
    """
    ranges = []
    for line in text.splitlines():
        parsed = _parse_numa_maps_line(line, page_size)
        if parsed is not None:
            ranges.append(parsed)
    return ranges


def parse_numa_maps(text: str, page_size: int = 4096) -> dict[int, int]:
    """``/proc/<pid>/numa_maps`` text -> {node id: MiB resident there}.

    Counts every mapping of the process (its whole resident memory, as
    the kernel places it), each at its own page size so that hugepage
    mappings weigh what they should.
    """
    per_node = {}
    for mapping in numa_maps_ranges(text, page_size):
        for node, count in mapping.pages.items():
            per_node[node] = (per_node.get(node, 0) +
                              count * mapping.page_size)
    return {node: _to_mib(num_bytes)
            for node, num_bytes in sorted(per_node.items())}


def parse_maps_extents(text: str) -> dict[int, int]:
    """``/proc/<pid>/maps`` text -> {start address: end address}."""
    extents = {}
    for line in text.splitlines():
        span = line.split(None, 1)[0] if line.strip() else ''
        start, sep, end = span.partition('-')
        if not sep:
            continue
        try:
            extents[int(start, 16)] = int(end, 16)
        except ValueError:
            continue
    return extents


def with_extents(ranges: list, maps_text: str) -> list[Range]:
    """Fill in each range's ``end`` from ``/proc/<pid>/maps`` text.

    Ranges whose start is not in the maps (the process changed its
    mappings between the two reads) are dropped.
    """
    extents = parse_maps_extents(maps_text)
    return [dataclasses.replace(r, end=extents[r.start])
            for r in ranges if r.start in extents]


def _shared_anonymous(path: str | None) -> bool:
    # Shared anonymous memory (QEMU with share=on, memfd backends): shmem
    # without a real file behind it.
    return bool(path) and (path.startswith('/dev/zero') or
                           path.startswith('/memfd:'))


def guest_ram_ranges(ranges: list, min_mb: int = 64) -> list[Range]:
    """The anonymous mappings of at least ``min_mb`` resident, largest first.

    In a QEMU process these are the guest's RAM (its other anonymous
    mappings, heap and thread stacks, are far smaller): the candidates
    whose pages are worth moving.
    """
    big = [r for r in ranges
           if (r.anon or _shared_anonymous(r.file)) and not r.huge and
           r.resident_bytes >= min_mb * MIB]
    return sorted(big, key=lambda r: r.resident_bytes, reverse=True)


def parse_node_meminfo(text: str) -> dict[str, int]:
    """``/sys/devices/system/node/nodeN/meminfo`` text -> {key: kB}.

    Lines look like ``Node 0 MemFree:  3938120 kB``; the HugePages_ lines
    have no unit and are returned as counts.
    """
    info = {}
    for line in text.splitlines():
        tokens = line.split()
        if len(tokens) < 4 or tokens[0] != 'Node' or \
                not tokens[2].endswith(':'):
            continue
        try:
            info[tokens[2][:-1]] = int(tokens[3])
        except ValueError:
            continue
    return info


def _read(path: str) -> str | None:
    """A file's text, or None when it cannot be read."""
    try:
        with open(path, encoding='utf-8', errors='replace') as f:
            return f.read()
    except OSError:
        return None


def domain_cgroup(path: str) -> str:
    """The guest-wide cgroup of a QEMU thread's cgroup path.

    libvirt puts the emulator, vCPU and I/O threads in sub-cgroups of the
    machine scope (``.../libvirt/vcpu0``); the guest's memory is charged
    to whichever thread touched it first, so only the scope, whose
    numa_stat includes its children, has all of it.
    """
    return _LIBVIRT_THREAD_CGROUP_RE.sub('', path) or '/'


def cgroup_numa_stat_paths(cgroup_text: str,
                           root: str = '/sys/fs/cgroup') -> list[str]:
    """Candidate ``memory.numa_stat`` files for ``/proc/<pid>/cgroup`` text.

    cgroup v2 first (``0::/path``, mounted at ``root`` or, on hybrid hosts,
    ``root/unified``), then the v1 memory controller.
    """
    v2 = []
    v1 = []
    for line in cgroup_text.splitlines():
        parts = line.split(':', 2)
        if len(parts) != 3:
            continue
        hier, controllers, path = parts
        path = domain_cgroup(path).lstrip('/')
        if hier == '0' and controllers == '':
            for mount in (root, os.path.join(root, 'unified')):
                v2.append(os.path.join(mount, path, 'memory.numa_stat'))
        elif 'memory' in controllers.split(','):
            v1.append(os.path.join(root, 'memory', path, 'memory.numa_stat'))
    return [os.path.normpath(p) for p in v2 + v1]


def read_cgroup_numa_stat(pid: int, proc: str = '/proc',
                          root: str = '/sys/fs/cgroup'
                          ) -> dict[int, int] | None:
    """Node id -> MiB of guest memory from the pid's memory cgroup.

    None when the process is gone or its cgroup has no ``memory.numa_stat``
    (no memory controller, or a cgroup namespace hiding the path).
    """
    cgroup_text = _read(os.path.join(proc, str(pid), 'cgroup'))
    if cgroup_text is None:
        return None
    for path in cgroup_numa_stat_paths(cgroup_text, root):
        text = _read(path)
        if text is not None:
            parsed = parse_cgroup_numa_stat(text, os.sysconf('SC_PAGE_SIZE'))
            if parsed:
                return parsed
    return None


def read_numa_maps(pid: int, proc: str = '/proc') -> dict[int, int] | None:
    """Node id -> MiB resident, from ``/proc/<pid>/numa_maps``.

    None when the process is gone or the kernel has no NUMA support.
    """
    text = _read(os.path.join(proc, str(pid), 'numa_maps'))
    if text is None:
        return None
    return parse_numa_maps(text, os.sysconf('SC_PAGE_SIZE'))


def read_ranges(pid: int, proc: str = '/proc') -> list[Range] | None:
    """The pid's mappings with their extents; None if not readable."""
    numa_maps = _read(os.path.join(proc, str(pid), 'numa_maps'))
    maps = _read(os.path.join(proc, str(pid), 'maps'))
    if numa_maps is None or maps is None:
        return None
    return with_extents(
        numa_maps_ranges(numa_maps, os.sysconf('SC_PAGE_SIZE')), maps)


def host_free_memory_mb(sysfs: str = '/sys/devices/system/node'
                        ) -> dict[int, int]:
    """Node id -> free MiB (``MemFree``) of every node of the host.

    A kernel without NUMA support has no node directories: the whole
    host's free memory (``/proc/meminfo``) is then reported as node 0.
    """
    free = {}
    for path in glob.glob(os.path.join(sysfs, 'node[0-9]*', 'meminfo')):
        node_dir = os.path.basename(os.path.dirname(path))
        text = _read(path)
        if text is None or not node_dir[4:].isdigit():
            continue
        kb = parse_node_meminfo(text).get('MemFree')
        if kb is not None:
            free[int(node_dir[4:])] = kb // 1024
    if not free and not os.path.isdir(sysfs):
        text = _read('/proc/meminfo') or ''
        for line in text.splitlines():
            tokens = line.split()
            if len(tokens) >= 2 and tokens[0] == 'MemFree:' and \
                    tokens[1].isdigit():
                free[0] = int(tokens[1]) // 1024
    return dict(sorted(free.items()))
