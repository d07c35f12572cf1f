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
"""Measured node-to-node memory latency and bandwidth (vTRMS's Avglat).

SLIT distances are symmetric and coarse, while the interconnect of e.g. an
8-node AMD Opteron 6376 host is not: a CPU on node 0 reads node 7 at 3.7
GB/s but a CPU on node 7 reads node 0 at 2.0 GB/s (Qian et al., vTRMS,
Table II). vTRMS therefore measures the matrix once at start-up: a reader
pinned to a CPU of node ``i`` times reads of a buffer allocated on node
``j``. :func:`measure` does the same for every (CPU node, memory node)
cell, each in a fresh child process pinned with ``sched_setaffinity`` and
bound with ``set_mempolicy(MPOL_BIND)`` before it allocates anything, so
the agent's own memory and CPU affinity are never touched.

Row = CPU node, column = memory node, as in
:class:`nova_numa_overhead.overhead.estimator.Topology`. A cell that cannot
be measured (node offline or without memory, ``set_mempolicy`` refused by
seccomp, child killed...) is NaN and logged; :func:`save` writes it as
``null`` and :func:`load` refuses such a file, so the agent falls back to
SLIT rather than use a partial matrix. The one exception is the row of a
node without CPUs (memory-only, CXL): no guest runs there, so nothing
reads from it; :func:`load` accepts it as wholly ``null`` when told which
nodes have no CPUs, and keeps it as None.

Only the measuring child needs numpy; it is imported there, so loading and
saving matrices work without it.
"""

import ctypes
import dataclasses
import datetime
import errno
import glob
import json
import logging
import math
import multiprocessing
import os
import platform
import re
import time
from typing import Callable

from nova_numa_overhead.compute import syscalls

LOG = logging.getLogger(__name__)

FORMAT_VERSION = 1
NODE_SYSFS = '/sys/devices/system/node'
CPU_SYSFS = '/sys/devices/system/cpu'

# set_mempolicy(2) syscall numbers by platform.machine().
SYSCALL_NUMBERS = syscalls.NUMBERS['set_mempolicy']
MPOL_BIND = 2

CACHE_LINE = 64         # bytes; the gather touches one element per line
CHILD_TIMEOUT = 600.0   # seconds allowed for one cell
# The latency proxy is meaningless when the buffer fits in the LLC: warn
# below this multiple of the LLC size.
LLC_FACTOR = 4

_MIB = 1024 * 1024
_ITEM = 8               # float64

Runner = Callable[[int, int, list, int, int], tuple]


@dataclasses.dataclass
class Matrix:
    """A measured latency and bandwidth matrix.

    ``latency_ns[a][b]`` and ``bandwidth_mbps[a][b]`` are seen from CPUs of
    node ``nodes[a]`` reading memory of node ``nodes[b]``; NaN where the
    cell could not be measured. ``size_mb`` is the buffer size (MiB).
    """

    latency_ns: list[list[float]]
    bandwidth_mbps: list[list[float]]
    nodes: list[int]
    measured_at: str
    size_mb: int


# -- host topology ---------------------------------------------------------

def parse_cpulist(text: str) -> list[int]:
    """CPU ids of a sysfs cpulist such as ``0-3,8-11`` (empty: none)."""
    cpus = []
    for part in text.strip().split(','):
        part = part.strip()
        if not part:
            continue
        m = re.fullmatch(r'(\d+)(?:-(\d+))?', part)
        if m is None:
            raise ValueError('bad cpulist item %r in %r' % (part, text))
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) is not None else first
        if last < first:
            raise ValueError('bad cpulist range %r in %r' % (part, text))
        cpus.extend(range(first, last + 1))
    return sorted(set(cpus))


def host_nodes(root: str = NODE_SYSFS) -> dict[int, list[int]]:
    """Online NUMA node id -> its CPU ids, from sysfs.

    A memory-only node (CXL, HBM) maps to an empty list; a host without
    NUMA support in the kernel (no ``root``) gives an empty dict.
    """
    nodes = {}
    for path in glob.glob(os.path.join(root, 'node[0-9]*')):
        m = re.fullmatch(r'node(\d+)', os.path.basename(path))
        if m is None:
            continue
        try:
            with open(os.path.join(path, 'cpulist')) as f:
                text = f.read()
        except FileNotFoundError:
            text = ''
        nodes[int(m.group(1))] = parse_cpulist(text)
    return dict(sorted(nodes.items()))


def llc_bytes(cpu: int, root: str = CPU_SYSFS) -> int | None:
    """Size of the last-level cache of ``cpu`` in bytes, None if unknown."""
    best = None
    for index in glob.glob(os.path.join(root, 'cpu%d' % cpu, 'cache',
                                        'index[0-9]*')):
        try:
            with open(os.path.join(index, 'level')) as f:
                level = int(f.read())
            with open(os.path.join(index, 'size')) as f:
                size = _parse_size(f.read())
        except (OSError, ValueError):
            continue
        if best is None or level > best[0]:
            best = (level, size)
    return best[1] if best else None


def _parse_size(text: str) -> int:
    m = re.fullmatch(r'(\d+)\s*([KMG]?)', text.strip())
    if m is None:
        raise ValueError('bad cache size %r' % text)
    return int(m.group(1)) * {'': 1, 'K': 1024, 'M': _MIB,
                              'G': 1024 * _MIB}[m.group(2)]


# -- binding and measuring in the child ------------------------------------

def syscall_number(machine: str | None = None) -> int:
    """set_mempolicy(2)'s number on this (or the given) architecture."""
    return syscalls.number('set_mempolicy', machine or platform.machine())


def _syscall():
    return syscalls.libc_syscall()


def bind_memory(node: int) -> None:
    """Bind the calling thread's future allocations to ``node`` only.

    ``set_mempolicy(MPOL_BIND)`` through ctypes, so no libnuma is needed.
    Pages already faulted in stay where they are: call it before
    allocating. Raises OSError (EINVAL for a node that is offline, has no
    memory or is outside the cpuset; EPERM or ENOSYS under seccomp).
    """
    if node < 0:
        raise ValueError('bad node %d' % node)
    bits = ctypes.sizeof(ctypes.c_ulong) * 8
    words = node // bits + 1
    mask = (ctypes.c_ulong * words)()
    mask[node // bits] = 1 << (node % bits)
    # The kernel reads maxnode - 1 bits (a historical off-by-one that
    # libnuma also compensates for).
    ret = _syscall()(ctypes.c_long(syscall_number()),
                     ctypes.c_int(MPOL_BIND), mask,
                     ctypes.c_ulong(words * bits + 1))
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, 'set_mempolicy(MPOL_BIND, node %d) failed: %s'
                      % (node, os.strerror(err)))


def _best_of(func, repeat):
    best = math.inf
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        best = min(best, time.perf_counter() - start)
    return best


def measure_here(size_mb: int, repeat: int) -> tuple[float, float]:
    """(latency_ns, bandwidth_mbps) of memory as this process allocates it.

    Bandwidth is STREAM's Copy, as in the paper's Table II: the best of
    ``repeat`` ``np.copyto`` of a ``size_mb`` MiB float64 array, counting
    the bytes read and written, in MB/s (10^6 bytes).

    Latency is a proxy, in ns per access: the best of ``repeat``
    ``np.take`` gathers of one float64 per cache line of the same array,
    every line once, in random order. vTRMS times a reader with RDTSC;
    numpy cannot follow a dependent pointer chain without paying ~100 ns
    of interpreter per step, which would drown a DRAM latency of the same
    order, so a true load-to-use latency is out of reach. The gather
    instead runs in numpy's C loop (about 1 ns per element when cached):
    the random order defeats the prefetchers and each access misses the
    caches once the array is well beyond the LLC, so a single core is
    limited by how many misses it keeps in flight. By Little's law its
    time per access is then the memory latency divided by that fixed
    number of miss buffers: absolute values are a fraction of what
    lmbench reports, but the ratios between cells, which is what
    ``Topology.remote_ratio`` uses, follow the latency.
    """
    import numpy as np

    count = size_mb * _MIB // _ITEM
    stride = CACHE_LINE // _ITEM
    src = np.ones(count)        # writes every page: faulted in here
    dst = np.empty(count)
    dst.fill(0.0)
    index = np.random.default_rng().permutation(count // stride) * stride
    out = np.empty(len(index))
    copy_s = _best_of(lambda: np.copyto(dst, src), repeat)
    # mode='clip' skips the buffered bounds check of the default mode.
    gather_s = _best_of(lambda: np.take(src, index, out=out, mode='clip'),
                        repeat)
    return gather_s / len(index) * 1e9, 2 * src.nbytes / copy_s / 1e6


def _child_main(conn, mem_node, cpus, size_mb, repeat):
    """Body of the measuring child: pin, bind, measure, send the result."""
    try:
        try:
            os.sched_setaffinity(0, cpus)
        except OSError as e:
            raise OSError(e.errno, 'sched_setaffinity(%s) failed: %s'
                          % (cpus, e.strerror))
        bind_memory(mem_node)
        result = ('ok',) + measure_here(size_mb, repeat)
    except OSError as e:
        result = ('error', e.errno, e.strerror or str(e))
    except Exception as e:  # MemoryError, numpy missing...
        result = ('error', None, '%s: %s' % (type(e).__name__, e))
    conn.send(result)
    conn.close()


def run_cell(cpu_node: int, mem_node: int, cpus: list[int], size_mb: int,
             repeat: int) -> tuple[float, float]:
    """Measure one cell in a fresh child process: (latency_ns, MB/s).

    The child is forked from multiprocessing's fork server, a fresh
    interpreter started once with this module and numpy loaded, not from
    the caller: it inherits no lock held by another thread of the agent
    and no memory of the parent that could sit on the wrong node, and a
    cell does not pay an interpreter start and a numpy import (seconds on
    a slow host, a minute under emulation). Raises OSError when the child
    reports a failure, dies without answering (e.g. killed by the OOM
    killer when the node is out of memory) or exceeds
    :data:`CHILD_TIMEOUT`.
    """
    ctx = multiprocessing.get_context('forkserver')
    ctx.set_forkserver_preload([__name__, 'numpy'])
    reader, writer = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child_main,
                       args=(writer, mem_node, list(cpus), size_mb, repeat),
                       name='numa-probe-%d-%d' % (cpu_node, mem_node),
                       daemon=True)
    proc.start()
    writer.close()
    result = None
    try:
        if reader.poll(CHILD_TIMEOUT):
            try:
                result = reader.recv()
            except EOFError:
                pass
        else:
            proc.kill()
            raise OSError(errno.ETIMEDOUT, 'probe child timed out after '
                          '%.0f s' % CHILD_TIMEOUT)
    finally:
        reader.close()
        proc.join()
    if result is None:
        raise OSError('probe child exited with code %s without a result'
                      % proc.exitcode)
    if result[0] != 'ok':
        if result[1] is None:
            raise OSError(result[2])
        raise OSError(result[1], result[2])
    return float(result[1]), float(result[2])


# -- the matrix --------------------------------------------------------------

def largest_llc_bytes(nodes) -> int | None:
    """The largest last-level cache of the nodes' CPUs, None if unknown."""
    sizes = [llc_bytes(cpus[0]) for cpus in nodes.values() if cpus]
    return max((s for s in sizes if s), default=None)


def min_size_mb(nodes) -> int | None:
    """Smallest buffer (MiB) that is ``LLC_FACTOR`` times the LLC."""
    llc = largest_llc_bytes(nodes)
    return -(-LLC_FACTOR * llc // _MIB) if llc else None


def check_output(path: str) -> None:
    """Raise ValueError now if ``path`` cannot be written later.

    Measuring takes minutes: a missing directory or a read-only one
    should stop the probe before it starts, not after.
    """
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise ValueError('%s is a directory, not a file' % path)
    if not os.path.isdir(directory):
        raise ValueError('directory %s does not exist' % directory)
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ValueError('cannot write in directory %s' % directory)


def _warn_if_cached(nodes, size_mb):
    llc = largest_llc_bytes(nodes)
    if llc and size_mb * _MIB < LLC_FACTOR * llc:
        LOG.warning('NUMA probe: a %d MiB buffer is not much larger than '
                    'the %d MiB LLC: the latency proxy will be partly '
                    'cache hits', size_mb, llc // _MIB)


def measure(nodes: dict[int, list[int]], size_mb: int = 64, repeat: int = 3,
            runner: Runner | None = None) -> Matrix:
    """Measure every (CPU node, memory node) cell, one after the other.

    ``nodes`` maps node id -> CPU ids (see :func:`host_nodes`); the matrix
    follows the sorted node ids. ``runner(cpu_node, mem_node, cpus,
    size_mb, repeat)`` returns ``(latency_ns, bandwidth_mbps)`` for one
    cell, :func:`run_cell` by default. A cell whose runner fails or
    returns a non-positive value is NaN and logged: one bad cell never
    stops the others. Cells run one at a time so that they do not compete
    for the interconnect; guests running meanwhile still disturb them.
    """
    if size_mb < 1:
        raise ValueError('size_mb must be >= 1, not %r' % size_mb)
    if repeat < 1:
        raise ValueError('repeat must be >= 1, not %r' % repeat)
    if runner is None:
        runner = run_cell
        _warn_if_cached(nodes, size_mb)
    ids = sorted(nodes)
    latency = [[math.nan] * len(ids) for _ in ids]
    bandwidth = [[math.nan] * len(ids) for _ in ids]
    for a, cpu_node in enumerate(ids):
        cpus = sorted(nodes[cpu_node])
        if not cpus:
            LOG.warning('NUMA probe: node %d has no CPUs: its row is NaN',
                        cpu_node)
            continue
        for b, mem_node in enumerate(ids):
            try:
                lat, bw = runner(cpu_node, mem_node, cpus, size_mb, repeat)
                lat, bw = float(lat), float(bw)
            except Exception as e:
                LOG.warning('NUMA probe: CPU node %d -> memory node %d '
                            'failed, recorded as NaN: %s: %s',
                            cpu_node, mem_node, type(e).__name__, e)
                continue
            if not (_positive(lat) and _positive(bw)):
                LOG.warning('NUMA probe: CPU node %d -> memory node %d gave '
                            'latency %r ns, bandwidth %r MB/s; recorded as '
                            'NaN', cpu_node, mem_node, lat, bw)
                continue
            latency[a][b], bandwidth[a][b] = lat, bw
            LOG.debug('NUMA probe: CPU node %d -> memory node %d: %.2f ns, '
                      '%.0f MB/s', cpu_node, mem_node, lat, bw)
    now = datetime.datetime.now(datetime.timezone.utc)
    return Matrix(latency_ns=latency, bandwidth_mbps=bandwidth, nodes=ids,
                  measured_at=now.isoformat(timespec='seconds'),
                  size_mb=size_mb)


def _positive(value):
    return (isinstance(value, (int, float)) and
            not isinstance(value, bool) and
            math.isfinite(value) and value > 0)


# -- files -------------------------------------------------------------------

def save(matrix: Matrix, path: str) -> None:
    """Write ``matrix`` as JSON (NaN cells as null), atomically.

    The file is written next to ``path`` and renamed over it, so an agent
    reading it meanwhile sees the old or the new matrix, never half.
    """
    def cells(rows):
        return [[v if math.isfinite(v) else None for v in row]
                for row in rows]

    data = {
        'version': FORMAT_VERSION,
        'measured_at': matrix.measured_at,
        'size_mb': matrix.size_mb,
        'nodes': list(matrix.nodes),
        'latency_ns': cells(matrix.latency_ns),
        'bandwidth_mbps': cells(matrix.bandwidth_mbps),
    }
    tmp = '%s.%d.tmp' % (path, os.getpid())
    try:
        with open(tmp, 'w') as f:
            json.dump(data, f, indent=2, allow_nan=False)
            f.write('\n')
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            # Name the file asked for, not the temporary one.
            raise OSError(exc.errno, 'cannot write %s: %s'
                          % (path, exc.strerror or exc)) from exc
        raise


def _check_cells(name, rows, nodes, cpu_less=()):
    """Raise ValueError unless ``rows`` is N x N of positive numbers.

    The row of a node in ``cpu_less`` may instead be None or all None.
    """
    n = len(nodes)
    if not isinstance(rows, (list, tuple)) or len(rows) != n:
        raise ValueError('%s: expected %d rows (one per node), got %s'
                         % (name, n, _length(rows)))
    for a, row in enumerate(rows):
        if nodes[a] in cpu_less and _empty_row(row, n):
            continue
        if not isinstance(row, (list, tuple)) or len(row) != n:
            raise ValueError('%s[%d]: expected %d values, got %s'
                             % (name, a, n, _length(row)))
        for b, value in enumerate(row):
            if not _positive(value):
                what = ('missing (the probe failed for this cell)'
                        if value is None else
                        'not a positive number: %r' % (value,))
                raise ValueError('%s[%d][%d] (CPU node %s, memory node %s) '
                                 'is %s' % (name, a, b, nodes[a], nodes[b],
                                            what))


def _empty_row(row, n) -> bool:
    return row is None or (isinstance(row, (list, tuple)) and
                           len(row) == n and all(v is None for v in row))


def _rows(rows):
    """Rows as floats; a row without any value (CPU-less node) as None."""
    return [None if row is None or all(v is None for v in row)
            else [float(v) for v in row] for row in rows]


def _length(value):
    if isinstance(value, (list, tuple)):
        return '%d' % len(value)
    return 'a %s' % type(value).__name__


def load(path: str, nodes: list[int] | None = None,
         cpu_less=()) -> Matrix | None:
    """Read a matrix written by :func:`save`; None if there is no file.

    Raises ValueError naming the problem for anything else than a complete
    matrix: bad JSON, another version, node ids that are not distinct
    non-negative integers (or differ from ``nodes``, the host's node ids,
    when given), a matrix that is not square over the nodes, a cell that
    is missing, NaN or not positive. The agent then keeps SLIT rather than
    trust part of a measurement. Rows of the nodes in ``cpu_less`` (the
    host's nodes without CPUs) may be wholly ``null``: they are None in
    the matrix.
    """
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        LOG.debug('NUMA probe: no measured matrix at %s', path)
        return None
    try:
        data = json.loads(text)
    except ValueError as e:
        raise ValueError('%s: not valid JSON: %s' % (path, e))
    if not isinstance(data, dict):
        raise ValueError('%s: expected a JSON object' % path)
    if data.get('version') != FORMAT_VERSION:
        raise ValueError('%s: unsupported version %r (expected %d)'
                         % (path, data.get('version'), FORMAT_VERSION))
    missing = [k for k in ('nodes', 'latency_ns', 'bandwidth_mbps',
                           'measured_at', 'size_mb') if k not in data]
    if missing:
        raise ValueError('%s: missing %s' % (path, ', '.join(missing)))
    ids = data['nodes']
    if (not isinstance(ids, list) or not ids or
            not all(type(i) is int and i >= 0 for i in ids) or
            len(set(ids)) != len(ids)):
        raise ValueError('%s: nodes must be a non-empty list of distinct '
                         'non-negative integers, not %r' % (path, ids))
    if nodes is not None and sorted(nodes) != sorted(ids):
        raise ValueError('%s: measured on nodes %s but the host has nodes '
                         '%s: run the probe again'
                         % (path, ids, sorted(nodes)))
    size_mb = data['size_mb']
    if type(size_mb) is not int or size_mb < 1:
        raise ValueError('%s: size_mb must be a positive integer, not %r'
                         % (path, size_mb))
    if not isinstance(data['measured_at'], str):
        raise ValueError('%s: measured_at must be a string' % path)
    for name in ('latency_ns', 'bandwidth_mbps'):
        try:
            _check_cells(name, data[name], ids, cpu_less)
        except ValueError as e:
            raise ValueError('%s: %s' % (path, e))
    return Matrix(
        latency_ns=_rows(data['latency_ns']),
        bandwidth_mbps=_rows(data['bandwidth_mbps']),
        nodes=list(ids), measured_at=data['measured_at'], size_mb=size_mb)


def as_topology_args(matrix: Matrix, cpu_less=()) -> dict:
    """``latency_ns`` and ``bandwidth_mbps`` as tuples of tuples.

    For :class:`nova_numa_overhead.compute.hypervisor.HostTopology` and
    :class:`nova_numa_overhead.overhead.estimator.Topology`, which index
    by position: the caller checks that ``matrix.nodes`` are its nodes in
    the same order (``load(path, nodes=...)`` does). Raises ValueError for
    a matrix with a NaN or non-positive cell, which would turn every
    remote-latency level it touches into nonsense; the rows of the nodes
    in ``cpu_less`` may be None (see :func:`load`) and stay None.
    """
    nodes = list(matrix.nodes)
    for name in ('latency_ns', 'bandwidth_mbps'):
        _check_cells(name, getattr(matrix, name), nodes, cpu_less)

    def rows(matrix_rows):
        return tuple(None if row is None else tuple(float(v) for v in row)
                     for row in matrix_rows)
    return {'latency_ns': rows(matrix.latency_ns),
            'bandwidth_mbps': rows(matrix.bandwidth_mbps)}
