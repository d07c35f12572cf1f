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
cell, in fresh child processes pinned with ``sched_setaffinity`` and
bound with ``set_mempolicy(MPOL_BIND)`` before they allocate anything, so
the agent's own memory and CPU affinity are never touched.

Each cell is measured twice. The latency proxy comes from one child alone
(idle latency). The bandwidth comes from concurrent streams: one child per
CPU of the CPU node that the probe may run on (its cpuset and affinity;
``streams`` limits them), each pinned to one CPU, copying its own arrays
at the same time as the others; the cell's bandwidth is what they move
together (:func:`aggregate_streams`). One
single-threaded copy reaches only a fraction of a node's memory
controller (typically 10-30% on a server socket), and the cost model
takes the diagonal as each controller's capacity and the rest as the
links'. The file records how many streams measured each row
(``bandwidth_streams``) so that a reader can tell a capacity from a
fraction of one.

Row = CPU node, column = memory node, as in
:class:`nova_numa_overhead.overhead.estimator.Topology`. A cell that cannot
be measured (node offline or without memory, ``set_mempolicy`` refused by
seccomp, child killed, one of its streams failed...) is NaN and logged;
:func:`save` writes it as ``null`` and :func:`load` refuses such a file,
so the agent falls back to SLIT rather than use a partial matrix. The one
exception is the row of a node without CPUs (memory-only, CXL): no guest
runs there, so nothing reads from it; :func:`load` accepts it as wholly
``null`` when told which nodes have no CPUs, and keeps it as None.

Only the measuring children need numpy; it is imported there, so loading
and saving matrices work without it.
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
from multiprocessing import connection as mp_connection
import os
import platform
import re
import threading
import time
from typing import Callable

from nova_numa_overhead.compute import numa_stat
from nova_numa_overhead.compute import syscalls

LOG = logging.getLogger(__name__)

# Version 2 added bandwidth_streams; version 1 files (one stream per
# cell) are still read.
FORMAT_VERSION = 2
FORMAT_VERSIONS = (1, 2)
NODE_SYSFS = '/sys/devices/system/node'
CPU_SYSFS = '/sys/devices/system/cpu'

# set_mempolicy(2) syscall numbers by platform.machine().
SYSCALL_NUMBERS = syscalls.NUMBERS['set_mempolicy']
MPOL_BIND = 2

CACHE_LINE = 64         # bytes; the gather touches one element per line
CHILD_TIMEOUT = 600.0   # seconds allowed for one cell (all its children)
# Seconds that children which have answered get to exit before they are
# killed (one answered and hung would otherwise hang the probe).
EXIT_GRACE = 10.0
# The latency proxy is meaningless when the buffer fits in the LLC: warn
# below this multiple of the LLC size.
LLC_FACTOR = 4
# Each concurrent stream's arrays are at least this many MiB (or size_mb
# when smaller): far beyond any core's private caches (L2 is at most a few
# MiB). Memory use stays bounded: a stream copies its array several times
# per round rather than having a larger one (stream_passes).
STREAM_MIN_MB = 16
# The streams of a round start at a time set this far ahead, each spinning
# on its own CPU until then: a spin ends within microseconds of it, where
# the wake-ups from a barrier spread over up to milliseconds.
START_MARGIN = 0.02     # seconds
# Below this share of a round during which every stream was copying, or of
# its copying time a stream had its CPU, the streams did not really run
# together (a busy host): warn.
MIN_OVERLAP = 0.9

_MIB = 1024 * 1024
_ITEM = 8               # float64

# runner(cpu_node, mem_node, cpus, size_mb, repeat, streams)
#     -> (latency_ns, bandwidth_mbps)
Runner = Callable[[int, int, list, int, int, int], tuple]


@dataclasses.dataclass
class Matrix:
    """A measured latency and bandwidth matrix.

    ``latency_ns[a][b]`` and ``bandwidth_mbps[a][b]`` are seen from CPUs of
    node ``nodes[a]`` reading memory of node ``nodes[b]``; NaN where the
    cell could not be measured. ``size_mb`` is the buffer size (MiB).
    ``bandwidth_streams[a]`` is how many concurrent streams (CPUs of node
    ``nodes[a]``) measured row ``a``'s bandwidth, None for a node without
    CPUs; a version 1 file, from before concurrent streams, reads as 1.
    """

    latency_ns: list[list[float]]
    bandwidth_mbps: list[list[float]]
    nodes: list[int]
    measured_at: str
    size_mb: int
    bandwidth_streams: list


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


def allowed_cpus() -> set[int]:
    """The CPUs this process may run on (its cpuset and affinity).

    The measuring children are pinned to CPUs among them only: outside
    its cpuset, ``sched_setaffinity`` fails with EINVAL.
    """
    return set(os.sched_getaffinity(0))


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


def stream_size_mb(size_mb: int, streams: int) -> int:
    """MiB of each of ``streams`` concurrent streams' arrays.

    Their share of ``size_mb``, so that together they cover at least the
    buffer one process used (``size_mb`` is checked against the LLC), but
    no less than :data:`STREAM_MIN_MB` (or ``size_mb`` when smaller).
    The streams then hold about ``2 * max(size_mb, streams *
    STREAM_MIN_MB)`` MiB of the memory node (a source and a destination
    each): :func:`cell_memory_mb`.
    """
    if size_mb < 1 or streams < 1:
        raise ValueError('size_mb and streams must be >= 1, not %r, %r'
                         % (size_mb, streams))
    return max(-(-size_mb // streams), min(size_mb, STREAM_MIN_MB))


def stream_passes(size_mb: int, streams: int) -> int:
    """Copies of its array each stream makes per round: as many as it
    takes to copy ``size_mb`` MiB, as much as one process copied per
    round before there were streams. A round then lasts as long with 64
    streams as with one (a copy of 16 MiB alone takes a few ms: the
    streams' start skew and a descheduled stream would weigh on it).
    """
    return -(-size_mb // stream_size_mb(size_mb, streams))


def cell_memory_mb(size_mb: int, streams: int) -> int:
    """MiB of the memory node a cell takes at most: the streams' arrays,
    all allocated at once. The latency child, alone before them, takes
    ``1.25 * size_mb`` (its array and its index), never more.
    """
    return 2 * streams * stream_size_mb(size_mb, streams)


def node_available_mb(node: int, root: str = NODE_SYSFS) -> int | None:
    """MiB that ``node`` can give a bound allocation, from sysfs; None
    if unknown.

    ``MemFree`` plus half of the page cache (``Active(file)`` and
    ``Inactive(file)``) and of the reclaimable slab: the kernel reclaims
    them for an allocation bound to the node, and its ``MemAvailable``
    (which has no per-node figure) counts at least half of each. MemFree
    alone is a fraction of that on a host that has been up for a while,
    and would fail every cell of a probe that fits.
    """
    try:
        with open(os.path.join(root, 'node%d' % node, 'meminfo')) as f:
            info = numa_stat.parse_node_meminfo(f.read())
    except (OSError, ValueError):
        return None
    if 'MemFree' not in info:
        return None
    reclaimable = (info.get('Active(file)', 0) +
                   info.get('Inactive(file)', 0) +
                   info.get('SReclaimable', 0))
    return (info['MemFree'] + reclaimable // 2) // 1024


def latency_here(size_mb: int, repeat: int) -> float:
    """The latency proxy of memory as this process allocates it, in ns.

    The best of ``repeat`` ``np.take`` gathers of one float64 per cache
    line of a ``size_mb`` MiB array, every line once, in random order, in
    ns per access. vTRMS times a reader with RDTSC; numpy cannot follow a
    dependent pointer chain without paying ~100 ns of interpreter per
    step, which would drown a DRAM latency of the same order, so a true
    load-to-use latency is out of reach. The gather instead runs in
    numpy's C loop (about 1 ns per element when cached): the random order
    defeats the prefetchers and each access misses the caches once the
    array is well beyond the LLC, so a single core is limited by how many
    misses it keeps in flight. By Little's law its time per access is then
    the memory latency divided by that fixed number of miss buffers:
    absolute values are a fraction of what lmbench reports, but the
    ratios between cells, which is what ``Topology.remote_ratio`` uses,
    follow the latency.
    """
    import numpy as np

    count = size_mb * _MIB // _ITEM
    stride = CACHE_LINE // _ITEM
    src = np.ones(count)        # writes every page: faulted in here
    index = np.random.default_rng().permutation(count // stride) * stride
    out = np.empty(len(index))
    # mode='clip' skips the buffered bounds check of the default mode.
    gather_s = _best_of(lambda: np.take(src, index, out=out, mode='clip'),
                        repeat)
    return gather_s / len(index) * 1e9


def stream_here(size_mb: int, repeat: int, passes: int, barrier,
                start_at) -> tuple[int, list]:
    """One of a cell's concurrent streams: (bytes per round, rounds).

    STREAM's Copy, as in the paper's Table II: ``np.copyto`` of a
    ``size_mb`` MiB float64 array, counting the bytes read and written.
    Both arrays are faulted in first. Then, ``repeat`` times, the streams
    meet at ``barrier``; the first one through sets ``start_at`` (a
    shared double) :data:`START_MARGIN` ahead, all meet again and spin
    until then, and copy ``passes`` times. Each round is returned as its
    (start, end) on ``time.monotonic()``, which is CLOCK_MONOTONIC, one
    clock for every process of the host, so that
    :func:`aggregate_streams` can compare them, and the CPU time the
    stream had meanwhile (``time.thread_time()``; a copy stalled on
    memory still counts): less than the wall time when other work shared
    its CPU.
    """
    import numpy as np

    count = size_mb * _MIB // _ITEM
    src = np.ones(count)
    dst = np.empty(count)
    dst.fill(0.0)
    rounds = []
    for _ in range(repeat):
        if barrier.wait() == 0:
            start_at.value = time.monotonic() + START_MARGIN
        barrier.wait()
        begin = start_at.value
        while time.monotonic() < begin:
            pass
        start = time.monotonic()
        cpu = time.thread_time()
        for _ in range(passes):
            np.copyto(dst, src)
        cpu = time.thread_time() - cpu
        # The wall interval brackets the CPU one.
        rounds.append((start, time.monotonic(), cpu))
    return 2 * src.nbytes * passes, rounds


def aggregate_streams(results) -> tuple[float, float, float]:
    """(MB/s, overlap, on CPU) of concurrent streams, from their rounds.

    ``results`` holds one ``(bytes per round, [(start, end, cpu), ...])``
    per stream, round ``r`` of every stream started together
    (:func:`stream_here`). As STREAM times its threads, a round's
    bandwidth is the bytes all streams copied divided by the wall time
    from the first start to the last end, and the best round is kept, in
    MB/s (10^6 bytes). That time includes any start skew and the tail of
    the slowest stream, so the figure can only understate what the
    streams moved together, never add up rates of copies that did not
    overlap. ``overlap`` is the share of that round's wall time during
    which every stream was copying (1.0: they ran together throughout;
    0.0: never all at once); ``on CPU`` is the smallest share of its own
    copying time that a stream of that round had its CPU (below 1.0:
    other work ran on it; the streams then overlap in time but not in
    what they move).
    """
    if not results:
        raise ValueError('no streams')
    best = None
    for rounds in zip(*(r[1] for r in results)):
        span = (max(r[1] for r in rounds) - min(r[0] for r in rounds))
        if span <= 0:
            continue
        together = min(r[1] for r in rounds) - max(r[0] for r in rounds)
        on_cpu = min(min(r[2] / (r[1] - r[0]), 1.0) if r[1] > r[0] else 1.0
                     for r in rounds)
        rate = sum(r[0] for r in results) / span / 1e6
        if best is None or rate > best[0]:
            best = (rate, max(together, 0.0) / span, on_cpu)
    if best is None:
        raise ValueError('no round with a positive duration')
    return best


def _pin(cpus):
    try:
        os.sched_setaffinity(0, cpus)
    except OSError as e:
        raise OSError(e.errno, 'sched_setaffinity(%s) failed: %s'
                      % (cpus, e.strerror))


def _child_main(conn, mem_node, cpus, size_mb, repeat, barrier=None,
                start_at=None, passes=1):
    """Body of a measuring child: pin, bind, measure, send the result.

    Without ``barrier``, the latency proxy (``('ok', ns)``); with it, one
    of a cell's concurrent streams (``('ok', bytes, rounds)``). A stream
    that fails sends its error first, then breaks the barrier, so that
    the others stop waiting for it and the parent reads the cause before
    their ``'broken'`` answers.
    """
    try:
        _pin(cpus)
        bind_memory(mem_node)
        if barrier is None:
            result = ('ok', latency_here(size_mb, repeat))
        else:
            result = ('ok',) + stream_here(size_mb, repeat, passes,
                                           barrier, start_at)
    except threading.BrokenBarrierError:
        result = ('broken', None, 'another stream of the cell failed')
    except OSError as e:
        result = ('error', e.errno, e.strerror or str(e))
    except Exception as e:  # MemoryError, numpy missing...
        result = ('error', None, '%s: %s' % (type(e).__name__, e))
    conn.send(result)
    conn.close()
    if barrier is not None and result[0] != 'ok':
        barrier.abort()


def _context():
    ctx = multiprocessing.get_context('forkserver')
    ctx.set_forkserver_preload([__name__, 'numpy'])
    return ctx


def run_children(ctx, target, name: str, arglists: list, labels: list,
                 deadline: float) -> list:
    """Start one child per ``arglists`` entry, all at once; their answers.

    Child ``i`` runs ``target(conn, *arglists[i])`` and sends one tuple on
    ``conn``: ``('ok', ...)``, ``('error', errno or None, text)`` or
    ``('broken', None, text)`` (it stopped because another one failed).
    Returns the ``'ok'`` tuples without their tag, in order. On the first
    failure, a child dying without answering (e.g. killed by the OOM
    killer when the node is out of memory), or ``deadline``
    (``time.monotonic()``) passing, the others are killed and OSError is
    raised, prefixed with ``labels[i]``: a child's own failure rather than
    another's ``'broken'``. A child still there :data:`EXIT_GRACE`
    seconds after every one answered is killed (logged). Every pipe is
    closed and every child reaped before this returns or raises.
    """
    procs, readers = [], []
    results = [None] * len(arglists)
    error = None
    done = False
    try:
        for i, args in enumerate(arglists):
            reader, writer = ctx.Pipe(duplex=False)
            readers.append(reader)
            try:
                proc = ctx.Process(target=target,
                                   args=(writer,) + tuple(args),
                                   name='%s-%d' % (name, i), daemon=True)
                proc.start()
                procs.append(proc)
            finally:
                # The child has its own copy; ours, left open, would also
                # hide the child's death (no EOF).
                writer.close()
        pending = dict(zip(readers, range(len(readers))))
        while pending and error is None:
            remaining = deadline - time.monotonic()
            ready = (mp_connection.wait(list(pending), remaining)
                     if remaining > 0 else [])
            if not ready:
                error = OSError(errno.ETIMEDOUT, 'probe child timed out '
                                '(%.0f s allowed for a cell)'
                                % CHILD_TIMEOUT)
                break
            for reader in ready:
                i = pending.pop(reader)
                results[i] = _receive(reader, procs[i])
            if any(r is not None and r[0] != 'ok' for r in results):
                # A 'broken' answer means that another child failed
                # first, and that one sent its cause before breaking the
                # barrier: read whatever is already there.
                for reader, i in list(pending.items()):
                    if reader.poll(0):
                        del pending[reader]
                        results[i] = _receive(reader, procs[i])
                error = _failure(results, labels)
        done = error is None
    finally:
        if not done:
            # A failure, or an exception here (a child that could not
            # start, ^C): the others would wait at their barrier.
            for proc in procs:
                proc.kill()
        for reader in readers:
            reader.close()
        _reap(procs, labels)
    if error is not None:
        raise error
    return [r[1:] for r in results]


def _reap(procs, labels):
    """Wait for ``procs`` to exit, killing any still there after
    :data:`EXIT_GRACE` seconds.
    """
    end = time.monotonic() + EXIT_GRACE
    for i, proc in enumerate(procs):
        proc.join(max(end - time.monotonic(), 0.0))
        if proc.exitcode is None:
            LOG.warning('NUMA probe: %s did not exit %.0f s after its '
                        'answer: killed', labels[i], EXIT_GRACE)
            proc.kill()
            proc.join()
        proc.close()


def _receive(reader, proc):
    try:
        return reader.recv()
    except EOFError:
        proc.join()
        return ('died', None, proc.exitcode)


def _failure(results, labels) -> OSError:
    """The error of the first child that failed on its own, else of the
    first that stopped because another did.
    """
    failed = [i for i, r in enumerate(results)
              if r is not None and r[0] != 'ok']
    own = [i for i in failed if results[i][0] != 'broken']
    i = (own or failed)[0]
    tag, number, text = results[i]
    if tag == 'died':
        return OSError('%s exited with code %s without a result'
                       % (labels[i], text))
    text = '%s: %s' % (labels[i], text)
    return OSError(number, text) if number is not None else OSError(text)


def run_cell(cpu_node: int, mem_node: int, cpus: list[int], size_mb: int,
             repeat: int, streams: int = 1) -> tuple[float, float]:
    """Measure one cell in fresh child processes: (latency_ns, MB/s).

    First the latency proxy, by one child pinned to ``cpus`` (the CPU
    node's that this process may run on) and alone on the host's memory
    system as far as the probe goes. Then the bandwidth: ``streams``
    children started together, each pinned to one of the first
    ``streams`` of ``cpus`` and bound to ``mem_node``, each copying
    arrays of :func:`stream_size_mb` :func:`stream_passes` times per
    round; the cell's bandwidth is their sum as
    :func:`aggregate_streams` takes it (a warning when they did not all
    copy together, or did not have their CPUs, for :data:`MIN_OVERLAP`
    of the round).

    The children are forked from multiprocessing's fork server, a fresh
    interpreter started once with this module and numpy loaded, not from
    the caller: they inherit no lock held by another thread of the agent
    and no memory of the parent that could sit on the wrong node, and a
    cell does not pay an interpreter start and a numpy import (seconds on
    a slow host, a minute under emulation). Raises OSError when
    ``mem_node`` has less memory available (:func:`node_available_mb`)
    than the cell needs
    (:func:`cell_memory_mb`, ENOMEM, before any child starts), when a
    child reports a failure or dies without answering (the cell's other
    children are then killed), or when the cell exceeds
    :data:`CHILD_TIMEOUT`.
    """
    cpus = list(cpus)
    if not 1 <= streams <= len(cpus):
        raise ValueError('streams must be from 1 to %d (the CPUs given), '
                         'not %r' % (len(cpus), streams))
    per_stream = stream_size_mb(size_mb, streams)
    needed = cell_memory_mb(size_mb, streams)
    available = node_available_mb(mem_node)
    if available is not None and available < needed:
        raise OSError(errno.ENOMEM, 'memory node %d has %d MiB available '
                      'but the cell needs %d MiB (%d streams x 2 x %d '
                      'MiB): use fewer streams or a smaller size'
                      % (mem_node, available, needed, streams, per_stream))
    deadline = time.monotonic() + CHILD_TIMEOUT
    ctx = _context()
    name = 'numa-probe-%d-%d' % (cpu_node, mem_node)
    [(latency,)] = run_children(
        ctx, _child_main, name, [(mem_node, cpus, size_mb, repeat)],
        ['latency child'], deadline)
    barrier = ctx.Barrier(streams, timeout=CHILD_TIMEOUT)
    start_at = ctx.RawValue('d', 0.0)
    chosen = cpus[:streams]
    results = run_children(
        ctx, _child_main, name,
        [(mem_node, [cpu], per_stream, repeat, barrier, start_at,
          stream_passes(size_mb, streams)) for cpu in chosen],
        ['stream on CPU %d' % cpu for cpu in chosen], deadline)
    mbps, overlap, on_cpu = aggregate_streams(results)
    if min(overlap, on_cpu) < MIN_OVERLAP:
        LOG.warning('NUMA probe: CPU node %d -> memory node %d: in the best '
                    'round the %d streams all copied together for %.0f%% '
                    'of the time and had their CPUs for %.0f%% of theirs '
                    '(other work on the host?): its %.0f MB/s understate '
                    'them', cpu_node, mem_node, streams, 100 * overlap,
                    100 * on_cpu, mbps)
    return float(latency), float(mbps)


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
            runner: Runner | None = None,
            streams: int | None = None) -> Matrix:
    """Measure every (CPU node, memory node) cell, one after the other.

    ``nodes`` maps node id -> CPU ids (see :func:`host_nodes`); the matrix
    follows the sorted node ids. Only the CPUs of a node that this process
    may run on (:func:`allowed_cpus`) measure its row: a child cannot pin
    itself outside its cpuset. The bandwidth of a row is measured by as
    many concurrent streams as there are such CPUs, at most ``streams``
    (None: all of them), on the lowest-numbered ones; the count is kept
    in ``Matrix.bandwidth_streams`` (fewer than the node's CPUs: logged,
    and the cost model then takes the bandwidth as ratios only). A node
    none of whose CPUs is allowed has a NaN row, logged.
    ``runner(cpu_node, mem_node, cpus, size_mb, repeat, streams)``
    returns ``(latency_ns, bandwidth_mbps)`` for one cell,
    :func:`run_cell` by default. A cell whose runner fails
    or returns a non-positive value is NaN and logged: one bad cell never
    stops the others. Cells run one at a time so that they do not compete
    for the interconnect; guests running meanwhile still disturb them.
    """
    if size_mb < 1:
        raise ValueError('size_mb must be >= 1, not %r' % size_mb)
    if repeat < 1:
        raise ValueError('repeat must be >= 1, not %r' % repeat)
    if streams is not None and streams < 1:
        raise ValueError('streams must be >= 1, not %r' % streams)
    if runner is None:
        runner = run_cell
        _warn_if_cached(nodes, size_mb)
    ids = sorted(nodes)
    latency = [[math.nan] * len(ids) for _ in ids]
    bandwidth = [[math.nan] * len(ids) for _ in ids]
    counts = [None] * len(ids)
    allowed = allowed_cpus()
    for a, cpu_node in enumerate(ids):
        node_cpus = sorted(nodes[cpu_node])
        if not node_cpus:
            LOG.warning('NUMA probe: node %d has no CPUs: its row is NaN',
                        cpu_node)
            continue
        cpus = [cpu for cpu in node_cpus if cpu in allowed]
        if not cpus:
            LOG.warning('NUMA probe: none of the CPUs of node %d (%s) is '
                        'in the CPU affinity of the probe (%s; cpuset or '
                        'taskset): its row is NaN', cpu_node,
                        numa_stat.format_cpulist(node_cpus),
                        numa_stat.format_cpulist(allowed))
            continue
        if len(cpus) < len(node_cpus):
            LOG.warning('NUMA probe: CPU node %d: only %d of its %d CPUs '
                        '(%s) are in the CPU affinity of the probe (cpuset '
                        'or taskset): its bandwidth is measured by at most '
                        '%d streams, which the cost model takes as ratios '
                        'only', cpu_node, len(cpus), len(node_cpus),
                        numa_stat.format_cpulist(cpus), len(cpus))
        count = len(cpus) if streams is None else min(streams, len(cpus))
        counts[a] = count
        LOG.debug('NUMA probe: CPU node %d: bandwidth by %d concurrent '
                  'streams of %d MiB', cpu_node, count,
                  stream_size_mb(size_mb, count))
        for b, mem_node in enumerate(ids):
            try:
                lat, bw = runner(cpu_node, mem_node, cpus, size_mb, repeat,
                                 count)
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
                      '%.0f MB/s (%d streams)', cpu_node, mem_node, lat, bw,
                      count)
    now = datetime.datetime.now(datetime.timezone.utc)
    return Matrix(latency_ns=latency, bandwidth_mbps=bandwidth, nodes=ids,
                  measured_at=now.isoformat(timespec='seconds'),
                  size_mb=size_mb, bandwidth_streams=counts)


def _positive(value):
    return (isinstance(value, (int, float)) and
            not isinstance(value, bool) and
            math.isfinite(value) and value > 0)


# -- files -------------------------------------------------------------------

def save(matrix: Matrix, path: str) -> None:
    """Write ``matrix`` as JSON (NaN cells as null), atomically.

    Format :data:`FORMAT_VERSION`: with the matrices, ``bandwidth_streams``
    (one entry per node, in the order of ``nodes``: the concurrent streams
    that measured its row, null for a node without CPUs). The file is
    written next to ``path`` and renamed over it, so an agent reading it
    meanwhile sees the old or the new matrix, never half.
    """
    def cells(rows):
        return [[v if math.isfinite(v) else None for v in row]
                for row in rows]

    data = {
        'version': FORMAT_VERSION,
        'measured_at': matrix.measured_at,
        'size_mb': matrix.size_mb,
        'nodes': list(matrix.nodes),
        'bandwidth_streams': list(matrix.bandwidth_streams),
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


def _check_streams(streams, rows, nodes):
    """Raise ValueError unless ``streams`` has a positive integer for
    every measured row of ``rows`` (null where the row is wholly null).
    """
    n = len(nodes)
    if not isinstance(streams, list) or len(streams) != n:
        raise ValueError('bandwidth_streams must be a list of %d entries '
                         '(one per node), not %r' % (n, streams))
    for a, count in enumerate(streams):
        if count is None and _empty_row(rows[a], n):
            continue
        if type(count) is not int or count < 1:
            raise ValueError('bandwidth_streams[%d] (CPU node %s) must be a '
                             'positive integer, not %r'
                             % (a, nodes[a], count))


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
    is missing, NaN or not positive, a stream count that is not a
    positive integer. The agent then keeps SLIT rather than trust part of
    a measurement. Rows of the nodes in ``cpu_less`` (the host's nodes
    without CPUs) may be wholly ``null``: they are None in the matrix.
    When ``nodes`` is given, the matrix comes back in its order (rows,
    columns and stream counts), whatever the file's order.

    A version 1 file (written before the probe measured with concurrent
    streams) is read with a warning, its ``bandwidth_streams`` as 1 for
    every measured row: one child copied alone in each cell.
    """
    data = _read_json(path)
    if data is _NO_FILE:
        LOG.debug('NUMA probe: no measured matrix at %s', path)
        return None
    if not isinstance(data, dict):
        raise ValueError('%s: expected a JSON object' % path)
    version = data.get('version')
    if type(version) is not int or version not in FORMAT_VERSIONS:
        raise ValueError('%s: unsupported version %r (expected %s)'
                         % (path, version, ' or '.join(
                             str(v) for v in FORMAT_VERSIONS)))
    required = ['nodes', 'latency_ns', 'bandwidth_mbps', 'measured_at',
                'size_mb'] + (['bandwidth_streams'] if version >= 2 else [])
    missing = [k for k in required if k not in data]
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
    bandwidth = _rows(data['bandwidth_mbps'])
    matrix = Matrix(
        latency_ns=_rows(data['latency_ns']), bandwidth_mbps=bandwidth,
        nodes=list(ids), measured_at=data['measured_at'], size_mb=size_mb,
        bandwidth_streams=_streams_of(path, data, version, bandwidth))
    if nodes is not None and list(nodes) != ids:
        matrix = _in_order(matrix, list(nodes))
    return matrix


def _in_order(matrix: Matrix, nodes: list) -> Matrix:
    """``matrix`` with its rows and columns in the order of ``nodes``.

    Its users index by position (see :func:`as_topology_args`).
    """
    index = [matrix.nodes.index(node) for node in nodes]

    def rows(matrix_rows):
        return [None if matrix_rows[a] is None
                else [matrix_rows[a][b] for b in index] for a in index]
    return dataclasses.replace(
        matrix, nodes=list(nodes), latency_ns=rows(matrix.latency_ns),
        bandwidth_mbps=rows(matrix.bandwidth_mbps),
        bandwidth_streams=[matrix.bandwidth_streams[a] for a in index])


_NO_FILE = object()


def _read_json(path):
    """The JSON value in ``path``, ``_NO_FILE`` if there is no such file;
    a ValueError naming it for text that is not JSON (or not UTF-8).
    """
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return _NO_FILE
    except UnicodeDecodeError as e:
        raise ValueError('%s: not valid JSON: %s' % (path, e))
    try:
        return json.loads(text)
    except ValueError as e:
        raise ValueError('%s: not valid JSON: %s' % (path, e))
    except RecursionError:
        raise ValueError('%s: not valid JSON: nested too deeply' % path)


def _streams_of(path, data, version, bandwidth) -> list:
    """The concurrent streams of each row of a file read by :func:`load`;
    1 for every measured row of a version 1 file, with a warning.
    """
    if version >= 2:
        try:
            _check_streams(data['bandwidth_streams'],
                           data['bandwidth_mbps'], data['nodes'])
        except ValueError as e:
            raise ValueError('%s: %s' % (path, e))
        return [None if row is None else count for row, count in
                zip(bandwidth, data['bandwidth_streams'])]
    if 'bandwidth_streams' in data:
        raise ValueError('%s: bandwidth_streams in a version %d file (it '
                         'came with version 2)' % (path, version))
    LOG.warning('NUMA probe: %s is a version %d file: its bandwidth was '
                'measured by one stream per cell, a fraction of what a '
                "node's CPUs move together; run nova-numa-overhead probe "
                'again', path, version)
    return [None if row is None else 1 for row in bandwidth]


def as_topology_args(matrix: Matrix, cpu_less=()) -> dict:
    """``latency_ns`` and ``bandwidth_mbps`` as tuples of tuples, with
    ``bandwidth_streams`` as a tuple.

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
            'bandwidth_mbps': rows(matrix.bandwidth_mbps),
            'bandwidth_streams': tuple(matrix.bandwidth_streams)}
