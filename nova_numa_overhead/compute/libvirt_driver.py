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
"""The libvirt backend of :class:`~.hypervisor.Hypervisor`.

This is the only module of the project that imports ``libvirt``. Importing
it without libvirt-python works; constructing :class:`LibvirtHypervisor`
then fails with a clear :class:`~.hypervisor.HypervisorError`.

Connection handling: the connection is opened on first use. A call that
fails because the connection is down (or an open that fails) raises
:class:`~.hypervisor.HypervisorUnavailable`, drops the connection and
schedules the next attempt one backoff step later. Until then calls fail
fast with HypervisorUnavailable; the first call after it opens the
connection again, once. :meth:`LibvirtHypervisor.reconnect` (what the agent
calls after its own backoff sleep) sleeps only what is left of the step,
then opens once. Nothing loops inside a call.

Domains are looked up by libvirt uuid on every call, so a
:class:`~.hypervisor.DomainInfo` survives reconnects; one that vanished
(undefined, or stopped since it was listed) raises
:class:`~.hypervisor.DomainGone`.
"""

import contextlib
import dataclasses
import errno
import functools
import os
import re
import sys
import threading
import time
import urllib.parse
from xml.etree import ElementTree

from oslo_log import log as logging

try:
    import libvirt
except ImportError:
    libvirt = None

from nova_numa_overhead.compute import hypervisor
from nova_numa_overhead.compute import kernel as kernel_mod
from nova_numa_overhead.compute import numa_stat

LOG = logging.getLogger(__name__)

#: The namespace of Nova's ``<nova:instance>`` domain metadata
#: (``nova.virt.libvirt.config.NOVA_NS``).
NOVA_NS = 'http://openstack.org/xmlns/libvirt/nova/1.1'

#: The namespace (and its prefix) of the agent's own live metadata
#: (:class:`~.hypervisor.Recorded`).
AGENT_NS = 'http://openstack.org/xmlns/nova-numa-overhead/1.0'
AGENT_PREFIX = 'numa-overhead'

#: Where libvirt's QEMU driver keeps ``<domain name>.pid``, by URI path.
QEMU_PID_DIRS = {'/system': '/run/libvirt/qemu'}

#: Extra specs with which Nova gives a guest its own NUMA placement.
PINNING_EXTRA_SPECS = ('hw:mem_page_size', 'hw:numa_nodes')

#: Perf events the agent reads: libvirt typed-parameter names (the values
#: of ``libvirt.VIR_PERF_PARAM_*``) and the stats keys they produce.
PERF_EVENTS = hypervisor.PERF_EVENTS
#: The subset tried when the host refuses the full set.
CORE_PERF_EVENTS = hypervisor.CORE_PERF_EVENTS


@functools.lru_cache(maxsize=None)
def _constants(*names) -> frozenset:
    """The values of those libvirt constants this libvirt has (some are
    newer than the oldest libvirt Nova runs on); looked up once (the
    domain listing asks for each guest, every cycle).
    """
    return frozenset(getattr(libvirt, name) for name in names
                     if hasattr(libvirt, name))


# vcpu.<n>.time: CPU time of a vCPU thread (ns), in the VCPU stats.
_VCPU_TIME = re.compile(r'vcpu\.\d+\.time')

_DERIVED = object()
_MIB = 1024 * 1024
_UNITS_KIB = {
    'b': 1 / 1024, 'bytes': 1 / 1024,
    'kb': 1000 / 1024, 'k': 1, 'kib': 1,
    'mb': 1000 ** 2 / 1024, 'm': 1024, 'mib': 1024,
    'gb': 1000 ** 3 / 1024, 'g': 1024 ** 2, 'gib': 1024 ** 2,
    'tb': 1000 ** 4 / 1024, 't': 1024 ** 3, 'tib': 1024 ** 3,
}

# An L3 cache bank smaller than this is taken for a misreading.
MIN_LLC_KIB = 256

_event_loop_lock = threading.Lock()
_event_loop_thread = None


def parse_set(text: str) -> tuple:
    """Parse a libvirt bitmap string ('0-3,^2,8') into sorted ids."""
    ids = set()
    excluded = set()
    for part in (text or '').split(','):
        part = part.strip()
        if not part:
            continue
        target = ids
        if part.startswith('^'):
            target, part = excluded, part[1:]
        first, sep, last = part.partition('-')
        lo, hi = int(first), int(last) if sep else int(first)
        if lo < 0 or hi < lo:
            raise ValueError('bad range %r' % part)
        target.update(range(lo, hi + 1))
    return tuple(sorted(ids - excluded))


def format_set(ids) -> str:
    """Format ids as a compact libvirt bitmap string (1,2,3,5 -> '1-3,5')."""
    return numa_stat.format_cpulist(ids)


def _kib(element, default_unit='KiB') -> int:
    """An element's size (text + ``unit`` attribute) in KiB."""
    unit = (element.get('unit') or default_unit).lower()
    if unit not in _UNITS_KIB:
        raise ValueError('unknown unit %r' % unit)
    return int(int(element.text) * _UNITS_KIB[unit])


def parse_capabilities(xml: str, fallback_cpus: int = 0,
                       fallback_memory_mb: int = 0
                       ) -> hypervisor.HostTopology:
    """Build the host topology from ``virConnectGetCapabilities`` XML.

    Cells without ``<distances>`` get the SLIT defaults (10 local, 20
    remote). Gaps in the cell ids are filled with empty nodes so that the
    index of a node is its id. A host without cells is one node holding
    ``fallback_cpus`` CPUs and ``fallback_memory_mb``. A node's
    last-level cache is the sum of the L3 cache banks of its CPUs
    (:func:`llc_per_node`), None where the capabilities list none.
    """
    root = ElementTree.fromstring(xml)
    cells = root.findall('./host/topology/cells/cell')
    if not cells:
        node = hypervisor.NodeInfo(0, tuple(range(fallback_cpus)),
                                   fallback_memory_mb)
        return hypervisor.HostTopology(nodes=(node,), distances=((10,),))
    nodes = {}
    siblings = {}
    for cell in cells:
        cell_id = int(cell.get('id'))
        memory = cell.find('memory')
        memory_mb = _kib(memory) // 1024 if memory is not None else 0
        elements = cell.findall('./cpus/cpu')
        cpus = tuple(sorted(int(cpu.get('id')) for cpu in elements))
        # Hardware threads of one core list the same siblings.
        cores = len({cpu.get('siblings') for cpu in elements
                     if cpu.get('siblings')}) or None
        nodes[cell_id] = hypervisor.NodeInfo(cell_id, cpus, memory_mb,
                                             cores=cores)
        siblings[cell_id] = {
            int(s.get('id')): int(s.get('value'))
            for s in cell.findall('./distances/sibling')}
    size = max(nodes) + 1
    if len(nodes) != size:
        LOG.warning('NUMA cell ids %s are not contiguous: filling the gaps '
                    'with empty nodes', sorted(nodes))
    ordered = tuple(nodes.get(i) or hypervisor.NodeInfo(i, (), 0)
                    for i in range(size))
    distances = tuple(
        tuple(siblings.get(i, {}).get(j, 10 if i == j else 20)
              for j in range(size))
        for i in range(size))
    llc = llc_per_node(root, {cpu: node.id for node in ordered
                              for cpu in node.cpus})
    ordered = tuple(dataclasses.replace(node, llc_mb=llc[node.id])
                    if node.id in llc else node for node in ordered)
    return hypervisor.HostTopology(nodes=ordered, distances=distances)


def llc_per_node(root: ElementTree.Element, node_of_cpu: dict) -> dict:
    """Node id -> MiB of L3 cache, from the capabilities' ``<cache>``
    banks (``<bank id='0' level='3' size='30' unit='MiB' cpus='0-11'/>``;
    libvirt reads them from sysfs, resctrl or not).

    A bank shared by CPUs of several nodes (sub-NUMA clustering) is split
    by their CPU counts. A node with several banks (AMD's CCXs) gets their
    sum, although a working set only uses its own CCX's: the room the cost
    model sees there is an upper bound. A bank listed twice counts once;
    banks that cannot be read, of less than MIN_LLC_KIB or whose CPUs are
    in no cell are left out (logged at debug level).
    """
    out = {}
    seen = set()
    for bank in root.findall('./host/cache/bank'):
        if bank.get('level') != '3':
            continue
        key = (bank.get('id'), bank.get('type'))
        try:
            unit = (bank.get('unit') or 'KiB').lower()
            if unit not in _UNITS_KIB:
                raise ValueError('unknown unit %r' % unit)
            kib = float(int(bank.get('size')) * _UNITS_KIB[unit])
            cpus = parse_set(bank.get('cpus', ''))
        except (OverflowError, TypeError, ValueError) as e:
            LOG.debug('Ignoring unreadable L3 cache bank %(bank)s: %(e)s',
                      {'bank': bank.attrib, 'e': e})
            continue
        nodes = [node_of_cpu[cpu] for cpu in cpus if cpu in node_of_cpu]
        if kib < MIN_LLC_KIB or not nodes or key in seen:
            LOG.debug('Ignoring L3 cache bank %s: %s', bank.attrib,
                      'listed twice' if key in seen else
                      'its CPUs are in no cell' if not nodes else
                      'smaller than %d KiB' % MIN_LLC_KIB)
            continue
        seen.add(key)
        for node in set(nodes):
            out[node] = out.get(node, 0.0) + kib / 1024.0 * nodes.count(
                node) / len(nodes)
    return out


def parse_l3_banks(xml: str) -> dict:
    """L3 cache id -> host CPU ids, from the capabilities XML.

    A resctrl monitoring domain (``mon_L3_<id>``, the ``node.<M>.id`` of
    libvirt's memory-bandwidth stats) is an L3 cache, not a NUMA node: on
    an AMD EPYC every CCX has its own. Banks that cannot be read are left
    out.
    """
    banks = {}
    for bank in ElementTree.fromstring(xml).findall('./host/cache/bank'):
        if bank.get('level') != '3':
            continue
        try:
            banks[int(bank.get('id'))] = parse_set(bank.get('cpus', ''))
        except (TypeError, ValueError):
            LOG.debug('Ignoring unreadable L3 cache bank %s', bank.attrib)
    return banks


def monitor_nodes(banks: dict, topology: hypervisor.HostTopology) -> dict:
    """resctrl monitoring domain -> NUMA node, from the L3 cache banks.

    None for a cache whose CPUs are on several nodes (Intel's sub-NUMA
    clustering): its traffic cannot be told apart by node. Without banks
    (older libvirt), a domain id is taken for the node id, as on the
    common host with one L3 cache per socket and one node per socket.
    """
    if not banks:
        return {node.id: node.id for node in topology.nodes}
    node_of_cpu = topology.node_of_cpu()
    result = {}
    for bank, cpus in banks.items():
        nodes = {node_of_cpu.get(cpu) for cpu in cpus}
        result[bank] = nodes.pop() if len(nodes) == 1 else None
    return result


def _stat_count(values: dict, key: str) -> int:
    """A non-negative integer stat; ValueError naming the key otherwise."""
    if key not in values:
        raise ValueError('%s is missing' % key)
    value = values[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError('%s is %r, not a non-negative integer'
                         % (key, value))
    return value


def parse_memory_bandwidth(values: dict) -> dict:
    """{monitoring domain: (local, total bytes)} of one domain's stats.

    ``values`` is a domain's ``VIR_DOMAIN_STATS_MEMORY`` answer (libvirt
    >= 6.0): one ``memory.bandwidth.monitor.<N>`` per ``<monitor>`` of the
    domain's ``<memorytune>``, each with cumulative ``bytes.local`` and
    ``bytes.total`` per monitoring domain (``node.<M>.id``); the monitors
    are summed. No ``memory.bandwidth.monitor.count`` (no monitor, or a
    host without resctrl monitoring): ``{}``.

    :raises ValueError: on a missing key or a value that is not a
        non-negative integer, naming the key.
    """
    if 'memory.bandwidth.monitor.count' not in values:
        return {}
    result = {}
    for i in range(_stat_count(values, 'memory.bandwidth.monitor.count')):
        prefix = 'memory.bandwidth.monitor.%d.node.' % i
        for j in range(_stat_count(values, prefix + 'count')):
            key = '%s%d.' % (prefix, j)
            ident = _stat_count(values, key + 'id')
            local = _stat_count(values, key + 'bytes.local')
            total = _stat_count(values, key + 'bytes.total')
            old_local, old_total = result.get(ident, (0, 0))
            result[ident] = (old_local + local, old_total + total)
    return result


def _positive_int(text, what: str) -> int:
    try:
        value = int((text or '').strip())
    except ValueError:
        value = 0
    if value <= 0:
        raise ValueError('%s is not a positive integer: %r' % (what, text))
    return value


def _nova_flavor(instance) -> dict:
    """Extra specs from a ``<nova:instance>``; ValueError if it is odd.

    ``nova:extraSpecs`` is only written by newer Nova releases: without it
    the extra specs are empty and pinning is detected from the domain XML
    alone.
    """
    ns = '{%s}' % NOVA_NS
    flavor = instance.find(ns + 'flavor')
    if flavor is None:
        raise ValueError('nova:instance has no nova:flavor')
    for field in ('memory', 'vcpus'):
        element = flavor.find(ns + field)
        if element is not None:
            _positive_int(element.text, 'nova:flavor/nova:' + field)
    extra_specs = {}
    specs = flavor.find(ns + 'extraSpecs')
    if specs is not None:
        for spec in specs.findall(ns + 'extraSpec'):
            key = spec.get('name')
            if not key:
                raise ValueError('nova:extraSpec without a name')
            extra_specs[key] = (spec.text or '').strip()
    return extra_specs


def pinned_reason(root, extra_specs: dict) -> str:
    """Why Nova placed this guest itself ('' if it did not).

    Such guests are reported but never touched: strict numatune with
    ``<memnode>`` cells, dedicated CPUs, hugepages, or the flavor asking
    for a NUMA topology or a page size. Also file-backed memory (Nova's
    ``[libvirt] file_backed_memory``): its RAM is page cache, which the
    agent neither measures per node nor moves.
    """
    numatune = root.find('numatune')
    if numatune is not None:
        memory = numatune.find('memory')
        if (memory is not None and
                memory.get('mode', 'strict') == 'strict' and
                memory.get('nodeset') and
                numatune.find('memnode') is not None):
            return 'strict numatune with memnodes'
    policy = extra_specs.get('hw:cpu_policy', '').lower()
    if policy in ('dedicated', 'mixed'):
        if root.find('./cputune/vcpupin') is not None:
            return 'hw:cpu_policy=%s with vcpupin' % policy
        return 'hw:cpu_policy=%s' % policy
    if root.find('./memoryBacking/hugepages') is not None:
        return 'hugepages'
    if root.find("./memoryBacking/source[@type='file']") is not None:
        return 'file-backed memory'
    for key in PINNING_EXTRA_SPECS:
        if key in extra_specs:
            return '%s=%s' % (key, extra_specs[key])
    return ''


def hugepage_memory(root) -> tuple:
    """``((node, MiB), ...)``: where a hugepage-backed guest's memory lies,
    from its XML (its guest cells' memory on the host nodes of their
    strict ``<memnode>``, or all of it on a strict ``<memory>`` nodeset,
    split evenly over several nodes); () for a guest without hugepages or
    whose XML does not say. Hugepages are in no cgroup's
    ``memory.numa_stat``, and Nova binds them strictly.
    """
    if root.find('./memoryBacking/hugepages') is None:
        return ()
    numatune = root.find('numatune')
    if numatune is None:
        return ()
    per_node = {}

    def spread(mb, nodeset):
        nodes = parse_set(nodeset or '')
        for i, node in enumerate(nodes):
            share, extra = divmod(mb, len(nodes))
            per_node[node] = per_node.get(node, 0) + share + (i < extra)
    memnodes = {m.get('cellid'): m.get('nodeset')
                for m in numatune.findall('memnode')
                if m.get('mode', 'strict') == 'strict'}
    cells = root.findall('./cpu/numa/cell')
    if memnodes and cells:
        for cell in cells:
            unit = (cell.get('unit') or 'KiB').lower()
            if unit not in _UNITS_KIB or cell.get('id') not in memnodes:
                return ()
            spread(int(int(cell.get('memory')) * _UNITS_KIB[unit]) // 1024,
                   memnodes[cell.get('id')])
        return tuple(sorted(per_node.items()))
    memory = numatune.find('memory')
    if memory is None or memory.get('mode', 'strict') != 'strict' or \
            root.find('memory') is None:
        return ()
    spread(_kib(root.find('memory')) // 1024, memory.get('nodeset'))
    return tuple(sorted(per_node.items()))


def format_recorded(recorded: hypervisor.Recorded) -> str:
    """The agent's metadata element (namespace :data:`AGENT_NS`)."""
    def sets(tag, nodes, cpus):
        element = ElementTree.SubElement(root, tag)
        element.set('nodes', format_set(nodes))
        element.set('cpus', format_set(cpus))
    root = ElementTree.Element('agent', {'host': recorded.host})
    sets('nova', recorded.nova_nodes, recorded.nova_cpus)
    sets('restriction', recorded.nodes, recorded.cpus)
    ElementTree.SubElement(root, 'last', {'action': recorded.action,
                                          'outcome': recorded.outcome,
                                          'at': recorded.at})
    if recorded.moved or recorded.kept or recorded.undone:
        ElementTree.SubElement(root, 'optimizer', {
            'moved': str(recorded.moved), 'kept': str(recorded.kept),
            'undone': str(recorded.undone)})
    if recorded.backoff_undos or recorded.backoff_until:
        ElementTree.SubElement(root, 'backoff', {
            'undos': str(recorded.backoff_undos),
            'until': recorded.backoff_until})
    return ElementTree.tostring(root, encoding='unicode')


def _count(attrib, key) -> int:
    """A count from the agent's metadata (0 when missing or unreadable:
    the counts are an account, not state the agent acts on).
    """
    try:
        return max(int(attrib.get(key, 0)), 0)
    except (TypeError, ValueError):
        return 0


def parse_recorded(element) -> hypervisor.Recorded | None:
    """The agent's metadata from its element; None if it is unreadable."""
    ns = '{%s}' % AGENT_NS

    def sets(tag):
        child = element.find(ns + tag)
        if child is None:
            return (), ()
        return (parse_set(child.get('nodes', '')),
                parse_set(child.get('cpus', '')))
    try:
        nova_nodes, nova_cpus = sets('nova')
        nodes, cpus = sets('restriction')
    except ValueError as e:
        LOG.debug('Ignoring unreadable agent metadata: %s', e)
        return None
    host = element.get('host')
    if not host:
        return None
    last = element.find(ns + 'last')
    last = last.attrib if last is not None else {}
    counts = element.find(ns + 'optimizer')
    counts = counts.attrib if counts is not None else {}
    backoff = element.find(ns + 'backoff')
    backoff = backoff.attrib if backoff is not None else {}
    until = backoff.get('until', '')
    if until and hypervisor.parse_utc(until) is None:
        LOG.debug('Ignoring an unreadable backoff time: %r', until)
        until = ''
    return hypervisor.Recorded(
        host=host, nova_nodes=nova_nodes, nova_cpus=nova_cpus, nodes=nodes,
        cpus=cpus, action=last.get('action', ''),
        outcome=last.get('outcome', ''), at=last.get('at', ''),
        moved=_count(counts, 'moved'), kept=_count(counts, 'kept'),
        undone=_count(counts, 'undone'),
        backoff_undos=_count(backoff, 'undos'), backoff_until=until)


def _no_cgroup(error) -> bool:
    """Whether a cgroup helper's failure says the guest's threads have
    no cpuset cgroup to write (rather than a write refused).
    """
    cause = error.__cause__
    return isinstance(cause, OSError) and (
        cause.errno == errno.ENOENT or 'no vCPU cgroup' in str(cause) or
        'no cpuset cgroup' in str(cause))


def parse_domain(xml: str, name: str = '', uuid: str = '',
                 pid: int | None = None) -> hypervisor.DomainInfo:
    """Build a :class:`DomainInfo` from domain XML; never raises.

    ``name`` and ``uuid`` (from the domain object) are used when the XML
    cannot be read; anything odd ends up in ``metadata_error``.
    """
    try:
        root = ElementTree.fromstring(xml)
    except ElementTree.ParseError as e:
        return hypervisor.DomainInfo(
            name=name, uuid=uuid, memory_mb=0, vcpus=0, extra_specs={},
            nova=NOVA_NS in (xml or ''), pid=pid,
            metadata_error='unparseable domain XML: %s' % e)
    name = root.findtext('name') or name
    uuid = root.findtext('uuid') or uuid
    memory_mb = vcpus = 0
    allowed = cpuset = ()
    extra_specs = {}
    errors = []
    try:
        memory = root.find('memory')
        memory_mb = _kib(memory) // 1024 if memory is not None else 0
        vcpu = root.find('vcpu')
        if vcpu is not None:
            vcpus = int(vcpu.get('current') or vcpu.text)
            cpuset = parse_set(vcpu.get('cpuset', ''))
        nodeset = root.find('./numatune/memory')
        if nodeset is not None and nodeset.get('nodeset'):
            allowed = parse_set(nodeset.get('nodeset'))
    except (TypeError, ValueError) as e:
        errors.append('domain XML: %s' % e)
    recorded = root.find('./metadata/{%s}agent' % AGENT_NS)
    if recorded is not None:
        recorded = parse_recorded(recorded)
    instance = root.find('./metadata/{%s}instance' % NOVA_NS)
    if instance is not None:
        try:
            extra_specs = _nova_flavor(instance)
        except ValueError as e:
            errors.append(str(e))
    reason = pinned_reason(root, extra_specs)
    try:
        hugepages = hugepage_memory(root)
    except (TypeError, ValueError) as e:
        hugepages = ()
        LOG.debug('Hugepage memory of %s unknown: %s', name, e)
    return hypervisor.DomainInfo(
        name=name, uuid=uuid, memory_mb=memory_mb, vcpus=vcpus,
        extra_specs=extra_specs, pinned=bool(reason), pinned_reason=reason,
        nova=instance is not None, metadata_error='; '.join(errors),
        pid=pid, allowed_nodes=allowed, nova_nodes=allowed,
        nova_cpus=cpuset, recorded=recorded, hugepage_mb=hugepages,
        run=root.get('id', '') if root.get('id', '') != '-1' else '')


def live_numatune_mode(xml: str) -> str | None:
    """The memory mode of a domain's numatune; None without one."""
    try:
        root = ElementTree.fromstring(xml)
    except ElementTree.ParseError as e:
        raise hypervisor.HypervisorError('unparseable domain XML: %s' % e)
    memory = root.find('./numatune/memory')
    if memory is None:
        return None
    return memory.get('mode', 'strict')


def _run_event_loop() -> None:
    while True:
        try:
            libvirt.virEventRunDefaultImpl()
        except Exception:
            LOG.exception('libvirt event loop iteration failed')
            time.sleep(1)


def _native_thread_class():
    """threading.Thread, the native one even in an eventlet-patched process.

    virEventRunDefaultImpl blocks in C: in a green thread it would stop
    every other green thread (the agent runs on native threads; this only
    matters when the driver is used inside an eventlet program).
    """
    if 'eventlet' in sys.modules:
        from eventlet import patcher
        if patcher.is_monkey_patched('thread'):
            return patcher.original('threading').Thread
    return threading.Thread


def _ensure_event_loop() -> None:
    """Register libvirt's default event loop and run it in a thread.

    libvirt needs the implementation registered before a connection is
    opened for that connection to deliver events (and keepalives), so
    every open goes through here. Done once per process.
    """
    global _event_loop_thread
    with _event_loop_lock:
        if _event_loop_thread is not None:
            return
        # Errors arrive as exceptions: do not also print them on stderr.
        libvirt.registerErrorHandler(lambda ctx, err: None, None)
        libvirt.virEventRegisterDefaultImpl()
        _event_loop_thread = _native_thread_class()(
            target=_run_event_loop, name='libvirt-events', daemon=True)
        _event_loop_thread.start()


class LibvirtHypervisor(hypervisor.Hypervisor):
    """A host reached through libvirt (normally QEMU/KVM).

    ``mover((name, uuid), moves, max_pages) -> MoveResult`` moves a
    domain's pages, ``memory_nodes((name, uuid), nodes)`` restricts its
    QEMU's cpuset cgroups to memory nodes and ``vcpu_cpus((name, uuid),
    cpus)`` its vCPU threads' cgroups to CPUs (all need privileges the
    agent does not have; by default they go through the privsep
    helpers).
    ``pid_dir`` is where ``<name>.pid`` files of QEMU are read; by default
    it is derived from a local ``qemu:///system`` URI, else pids are
    unknown. ``reconnect_backoff`` are the seconds between connection
    attempts after consecutive failures (the last one repeats).
    """

    #: Where the host's /proc is (tests point it elsewhere).
    proc = '/proc'

    def __init__(self, uri: str = 'qemu:///system',
                 reconnect_backoff=(1, 2, 4, 8, 30), sleep=time.sleep,
                 mover=None, pid_dir=_DERIVED, clock=time.monotonic,
                 memory_nodes=None, vcpu_cpus=None):
        if libvirt is None:
            raise hypervisor.HypervisorError(
                'the libvirt backend needs libvirt-python (import libvirt '
                'failed)')
        if not reconnect_backoff:
            raise ValueError('reconnect_backoff must not be empty')
        self.uri = uri
        self._backoff = tuple(reconnect_backoff)
        self._sleep = sleep
        self._clock = clock
        self._mover = mover
        self._memory_nodes = memory_nodes
        self._vcpu_cpus = vcpu_cpus
        self._pid_dir = (self._derive_pid_dir(uri) if pid_dir is _DERIVED
                         else pid_dir)
        self._lock = threading.RLock()
        self._conn = None
        self._failures = 0
        self._retry_at = 0.0
        self._topology = None
        self._l3_banks = {}
        self._callbacks = []
        self._callback_ids = []
        # Domains whose memory-bandwidth stats were malformed (warned once).
        self._bandwidth_warned = set()

    @staticmethod
    def _local_qemu(uri: str) -> bool:
        """Whether ``uri`` reaches QEMU on this very host."""
        parsed = urllib.parse.urlsplit(uri)
        driver, _sep, transport = parsed.scheme.partition('+')
        return driver == 'qemu' and not parsed.hostname and \
            transport in ('', 'unix')

    @classmethod
    def _derive_pid_dir(cls, uri: str) -> str | None:
        if not cls._local_qemu(uri):
            return None
        return QEMU_PID_DIRS.get(urllib.parse.urlsplit(uri).path)

    def kernel_state(self):
        """This host's NUMA balancing and numad (``/proc``), for a local
        QEMU; None (unknown) for any other URI: its kernel is another
        host's, or none (the test driver).
        """
        if not self._local_qemu(self.uri):
            return None
        return kernel_mod.read(self.proc)

    # -- connection --------------------------------------------------------

    def _open(self) -> None:
        _ensure_event_loop()
        try:
            conn = libvirt.open(self.uri)
        except libvirt.libvirtError as e:
            self._failed()
            raise hypervisor.HypervisorUnavailable(
                'cannot connect to %s: %s' % (self.uri, e)) from e
        self._conn = conn
        self._failures = 0
        if self._callbacks:
            self._register_events(conn)
        LOG.info('Connected to %s', self.uri)

    def _failed(self) -> None:
        """Count a failure and schedule the next connection attempt."""
        self._failures += 1
        delay = self._backoff[min(self._failures, len(self._backoff)) - 1]
        self._retry_at = self._clock() + delay

    def reconnect(self) -> None:
        """Drop the connection, wait out the backoff step, open it once.

        The wait holds no lock: other threads' calls fail fast meanwhile.
        A connection another thread opened in the meantime is kept.
        Raises HypervisorUnavailable when the open fails.
        """
        with self._lock:
            if self._conn is not None and self._alive(self._conn):
                return
            self._drop()
            wait = self._retry_at - self._clock() if self._failures else 0
        if wait > 0:
            LOG.debug('Reconnecting to %s in %.1f s', self.uri, wait)
            self._sleep(wait)
        with self._lock:
            if self._conn is None:
                self._open()

    def _connection(self):
        """The open connection, opened if due; else HypervisorUnavailable."""
        with self._lock:
            if self._conn is None:
                wait = self._retry_at - self._clock()
                if self._failures and wait > 0:
                    raise hypervisor.HypervisorUnavailable(
                        '%s: not connected, next attempt in %.1f s'
                        % (self.uri, wait))
                self._open()
            elif not self._alive(self._conn):
                self._lost('connection is not alive')
            return self._conn

    @staticmethod
    def _alive(conn) -> bool:
        try:
            return bool(conn.isAlive())
        except libvirt.libvirtError:
            return False

    def _lost(self, why: str):
        """Forget the connection and raise HypervisorUnavailable."""
        with self._lock:
            self._drop()
            self._failed()
        raise hypervisor.HypervisorUnavailable('%s: %s' % (self.uri, why))

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        callback_ids, self._callback_ids = self._callback_ids, []
        if conn is None:
            return
        for callback_id in callback_ids:
            # Each one: a failure leaves the others (and their hold on
            # the connection) registered otherwise.
            try:
                conn.domainEventDeregisterAny(callback_id)
            except libvirt.libvirtError as e:
                LOG.debug('Deregistering events of a dropped connection: '
                          '%s', e)
        try:
            conn.close()
        except libvirt.libvirtError as e:
            LOG.debug('Closing a dropped connection: %s', e)

    def close(self) -> None:
        """Release the connection (a later call opens it again)."""
        with self._lock:
            self._drop()
            self._failures = 0

    def _is_connection_error(self, error) -> bool:
        code = error.get_error_code()
        if code in (libvirt.VIR_ERR_INVALID_CONN, libvirt.VIR_ERR_NO_CONNECT,
                    libvirt.VIR_ERR_RPC):
            return True
        if error.get_error_domain() in (libvirt.VIR_FROM_RPC,
                                        libvirt.VIR_FROM_REMOTE):
            return True
        if code in (libvirt.VIR_ERR_SYSTEM_ERROR,
                    libvirt.VIR_ERR_INTERNAL_ERROR):
            conn = self._conn
            return conn is None or not self._alive(conn)
        return False

    @contextlib.contextmanager
    def _errors(self, what: str, dom=None):
        """Translate libvirt errors of ``what`` into hypervisor errors."""
        try:
            yield
        except libvirt.libvirtError as e:
            if e.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
                raise hypervisor.DomainGone('%s: %s' % (what, e)) from e
            if self._is_connection_error(e):
                self._lost('%s: %s' % (what, e))
            if (dom is not None and
                    e.get_error_code() == libvirt.VIR_ERR_OPERATION_INVALID and
                    not self._active(dom)):
                raise hypervisor.DomainGone(
                    '%s: domain is not running' % what) from e
            raise hypervisor.HypervisorError('%s: %s' % (what, e)) from e

    @staticmethod
    def _active(dom) -> bool:
        try:
            return bool(dom.isActive())
        except libvirt.libvirtError:
            return False

    def _lookup(self, domain: hypervisor.DomainInfo):
        conn = self._connection()
        with self._errors('lookup of %s' % domain.name):
            return conn.lookupByUUIDString(domain.uuid)

    # -- host --------------------------------------------------------------

    def topology(self) -> hypervisor.HostTopology:
        """The host's NUMA cells from the capabilities XML (cached)."""
        if self._topology is None:
            conn = self._connection()
            with self._errors('capabilities'):
                xml = conn.getCapabilities()
                info = conn.getInfo()
            try:
                topology = parse_capabilities(
                    xml, fallback_cpus=info[2], fallback_memory_mb=info[1])
                self._l3_banks = parse_l3_banks(xml)
            except (ElementTree.ParseError, TypeError, ValueError) as e:
                raise hypervisor.HypervisorError(
                    'unreadable capabilities XML: %s' % e) from e
            self._topology = topology
        return self._topology

    def free_memory_mb(self) -> list:
        """Free memory per cell (``getCellsFreeMemory`` bytes -> MiB)."""
        size = self.topology().size
        conn = self._connection()
        with self._errors('free memory'):
            free = conn.getCellsFreeMemory(0, size)
        return [int(b) // _MIB for b in free]

    # -- domains -----------------------------------------------------------

    def _read_pid(self, name: str) -> int | None:
        if not self._pid_dir:
            return None
        try:
            with open(os.path.join(self._pid_dir, name + '.pid')) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    def domains(self) -> list:
        """Running domains; one undefined while being read is skipped."""
        conn = self._connection()
        with self._errors('list domains'):
            doms = conn.listAllDomains(
                libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE)
        result = []
        for dom in doms:
            try:
                with self._errors('domain XML'):
                    if self._migration_job_holds(dom):
                        continue
                    xml = dom.XMLDesc(0)
                    name, uuid = dom.name(), dom.UUIDString()
            except hypervisor.DomainGone:
                continue
            domain = parse_domain(xml, name, uuid, self._read_pid(name))
            result.append(self._with_cgroup_nodes(domain, xml))
        return result

    def _with_cgroup_nodes(self, domain, xml):
        """The domain with the nodes its cpuset cgroups allow.

        A guest without numatune that the agent restricted through its
        cgroups (see :meth:`set_nodeset`) shows it nowhere in its XML.
        """
        if (domain.allowed_nodes or domain.pid is None or
                '<numatune' in xml):
            return domain
        from nova_numa_overhead.compute import cgroups
        try:
            nodes = cgroups.memory_nodes(domain.pid)
        except (OSError, ValueError) as e:
            LOG.debug('cpuset of %s (pid %s) unreadable: %s', domain.name,
                      domain.pid, e)
            return domain
        if not nodes or set(nodes) >= set(self.topology().memory_nodes()):
            return domain
        return dataclasses.replace(domain, allowed_nodes=nodes)

    @staticmethod
    def _migration_job_holds(dom) -> bool:
        """Whether a live migration's job holds the domain, refusing any
        change until it ends (each call would wait 30 s for it): the
        destination before the end (paused, or running in post-copy), the
        source past its switchover, and the destination of a post-copy
        migration that failed (its job kept for a recovery). Listed again
        once it runs here.
        """
        state, reason = dom.state()
        if state == libvirt.VIR_DOMAIN_PAUSED:
            return reason in _constants(
                'VIR_DOMAIN_PAUSED_MIGRATION', 'VIR_DOMAIN_PAUSED_POSTCOPY',
                'VIR_DOMAIN_PAUSED_POSTCOPY_FAILED')
        return state == libvirt.VIR_DOMAIN_RUNNING and reason in _constants(
            'VIR_DOMAIN_RUNNING_POSTCOPY',
            'VIR_DOMAIN_RUNNING_POSTCOPY_FAILED')

    def enable_counters(self, domain: hypervisor.DomainInfo) -> bool:
        """Enable the perf events; falls back to those without stalls."""
        dom = self._lookup(domain)
        for events in (PERF_EVENTS, CORE_PERF_EVENTS):
            try:
                with self._errors('perf events of %s' % domain.name, dom):
                    dom.setPerfEvents(dict.fromkeys(events, True),
                                      libvirt.VIR_DOMAIN_AFFECT_LIVE)
                return True
            except (hypervisor.DomainGone, hypervisor.HypervisorUnavailable):
                raise
            except hypervisor.HypervisorError as e:
                self.counters_error = str(e)
                LOG.debug('Cannot enable perf events %s: %s', events, e)
        return False

    def counters_enabled(self, domain: hypervisor.DomainInfo) -> bool:
        """True when instructions and cycles are counted already."""
        dom = self._lookup(domain)
        with self._errors('perf events of %s' % domain.name, dom):
            events = dom.perfEvents()
        return all(events.get(e) for e in ('instructions', 'cpu_cycles'))

    def disable_counters(self, domain: hypervisor.DomainInfo) -> None:
        """Turn off the agent's perf events that are on."""
        dom = self._lookup(domain)
        with self._errors('perf events of %s' % domain.name, dom):
            on = [e for e, enabled in dom.perfEvents().items()
                  if enabled and e in PERF_EVENTS]
            if on:
                dom.setPerfEvents(dict.fromkeys(on, False),
                                  libvirt.VIR_DOMAIN_AFFECT_LIVE)

    def _lookup_all(self, domains) -> list:
        """The libvirt domains of ``domains``, those gone left out."""
        doms = []
        for domain in domains:
            try:
                doms.append(self._lookup(domain))
            except hypervisor.DomainGone:
                continue
        return doms

    def counters(self, domains) -> dict:
        """Perf counters of the domains that have them.

        Needs ``perf.instructions`` and ``perf.cpu_cycles``; an event the
        host does not support (often stalled cycles) reads as 0.
        """
        conn = self._connection()
        doms = self._lookup_all(domains)
        if not doms:
            return {}
        with self._errors('domain stats'):
            # NOWAIT: the vCPU stats would otherwise wait for a job on
            # each guest (30 s behind a Nova operation); their times come
            # from /proc without one.
            stats = conn.domainListGetStats(
                doms, libvirt.VIR_DOMAIN_STATS_PERF |
                libvirt.VIR_DOMAIN_STATS_VCPU,
                getattr(libvirt, 'VIR_CONNECT_GET_ALL_DOMAINS_STATS_NOWAIT',
                        0))
        result = {}
        for dom, values in stats:
            if ('perf.instructions' not in values or
                    'perf.cpu_cycles' not in values):
                continue
            result[dom.name()] = hypervisor.DomainCounters(
                instructions=int(values['perf.instructions']),
                cycles=int(values['perf.cpu_cycles']),
                cache_references=int(values.get('perf.cache_references', 0)),
                cache_misses=int(values.get('perf.cache_misses', 0)),
                stalled_cycles=int(
                    values.get('perf.stalled_cycles_backend', 0)),
                vcpu_ns=sum(int(value) for key, value in values.items()
                            if _VCPU_TIME.fullmatch(key)))
        return result

    def memory_bandwidth(self, domains) -> dict:
        """Cumulative (local, total) bytes per node of monitored domains.

        From libvirt's ``VIR_DOMAIN_STATS_MEMORY`` (libvirt >= 6.0 with
        resctrl monitoring on the host: Intel RDT MBM, AMD PQoS). Only a
        domain whose XML has a monitor is counted:

        .. code-block:: xml

            <cputune>
              <memorytune vcpus='0-3'>
                <monitor vcpus='0-3'/>
              </memorytune>
            </cputune>

        The agent never adds one: Nova owns the domain XML (and rewrites
        it on hard reboot, resize and migration). Operators add it to the
        guests they want measured; without it a guest is simply absent.

        libvirt counts per L3 cache (resctrl monitoring domain); the
        caches are mapped to NUMA nodes with the host capabilities'
        ``<cache>`` banks and summed per node. A cache spanning several
        nodes (sub-NUMA clustering) cannot be attributed and is left out.
        A domain whose stats are malformed is logged (once) and left out;
        none of that raises.

        :returns: domain name -> {node: (local bytes, total bytes)};
            ``{}`` where libvirt-python or libvirt has no such stats.
        :raises HypervisorError: when libvirt refuses the stats call.
        """
        flag = getattr(libvirt, 'VIR_DOMAIN_STATS_MEMORY', None)
        if flag is None:
            return {}
        topology = self.topology()
        nodes = monitor_nodes(self._l3_banks, topology)
        conn = self._connection()
        doms = self._lookup_all(domains)
        if not doms:
            return {}
        with self._errors('memory bandwidth stats'):
            stats = conn.domainListGetStats(doms, flag)
        result = {}
        try:
            answers = [(dom.name(), values) for dom, values in stats]
        except (TypeError, ValueError, libvirt.libvirtError) as e:
            LOG.warning('Ignoring an unreadable memory bandwidth answer of '
                        'libvirt: %s', e)
            return {}
        self._bandwidth_warned &= {name for name, _values in answers}
        for name, values in answers:
            try:
                per_domain = parse_memory_bandwidth(values)
            except (TypeError, ValueError, AttributeError) as e:
                self._bad_bandwidth(name, e)
                continue
            per_node = {}
            for ident, (local, total) in per_domain.items():
                node = nodes.get(ident)
                if node is None:
                    LOG.debug('Memory bandwidth of %(name)s on L3 cache '
                              '%(id)d: not one NUMA node, left out',
                              {'name': name, 'id': ident})
                    continue
                old_local, old_total = per_node.get(node, (0, 0))
                per_node[node] = (old_local + local, old_total + total)
            if per_node:
                result[name] = per_node
                self._bandwidth_warned.discard(name)
        return result

    def _bad_bandwidth(self, name: str, error) -> None:
        """One warning per domain and malformation spell, then debug."""
        log = LOG.debug if name in self._bandwidth_warned else LOG.warning
        self._bandwidth_warned.add(name)
        log('Ignoring malformed memory bandwidth stats of %(name)s: '
            '%(error)s', {'name': name, 'error': error})

    def vcpu_cpus(self, domain: hypervisor.DomainInfo) -> list:
        """Host CPU of each vCPU, by vCPU number (-1 when unknown)."""
        dom = self._lookup(domain)
        with self._errors('vcpus of %s' % domain.name, dom):
            info, _maps = dom.vcpus()
        return [cpu for _n, _state, _time, cpu in sorted(info)]

    def vcpu_affinity(self, domain: hypervisor.DomainInfo) -> tuple | None:
        """Host CPUs any vCPU may run on, from the affinity maps libvirt
        gives with ``virDomainGetVcpus``; None when it gives none.
        """
        dom = self._lookup(domain)
        with self._errors('vCPU affinity of %s' % domain.name, dom):
            _info, maps = dom.vcpus()
        cpus = set()
        for cpumap in maps or ():
            cpus.update(i for i, usable in enumerate(cpumap) if usable)
        return tuple(sorted(cpus)) or None

    def memory_per_node(self, domain: hypervisor.DomainInfo) -> dict:
        """MiB of the domain per node, measured from the QEMU process.

        Reads the cgroup's ``memory.numa_stat``, else the process's
        ``numa_maps`` (each returns None when it cannot tell). Without a
        pid (remote or non-QEMU URIs), or when neither can be read, it is
        an ESTIMATE: the current memory split evenly over the numatune
        nodeset (or all nodes).
        """
        pid = domain.pid if domain.pid is not None else self._read_pid(
            domain.name)
        if domain.hugepage_mb:
            # Its hugepages from the XML (no cgroup counts them), QEMU's
            # own memory from the cgroup (numa_maps would count both).
            usage = self._read_usage(pid, hugepages=True) or {}
            for node, mb in domain.hugepage_mb:
                usage[node] = usage.get(node, 0) + mb
            return usage
        return self._read_usage(pid) or self._estimate_memory(domain)

    @staticmethod
    def _read_usage(pid, hugepages=False) -> dict | None:
        if pid is None:
            return None
        # Lazy: only this path needs it (and its procfs readers).
        from nova_numa_overhead.compute import numa_stat
        readers = (numa_stat.read_cgroup_numa_stat,) if hugepages else (
            numa_stat.read_cgroup_numa_stat, numa_stat.read_numa_maps)
        for reader in readers:
            try:
                usage = reader(pid)
            except (OSError, ValueError, LookupError) as e:
                LOG.debug('%s(%s) failed: %s', reader.__name__, pid, e)
                continue
            if usage:
                return {int(node): int(mb) for node, mb in usage.items()}
        return None

    def _estimate_memory(self, domain: hypervisor.DomainInfo) -> dict:
        topology = self.topology()
        dom = self._lookup(domain)
        with self._errors('numa parameters of %s' % domain.name, dom):
            params = dom.numaParameters()
            current_kib = dom.info()[2]
        try:
            nodes = parse_set(params.get(libvirt.VIR_DOMAIN_NUMA_NODESET))
        except ValueError:
            nodes = ()
        nodes = [n for n in nodes if n < topology.size] or list(
            range(topology.size))
        total = int(current_kib) // 1024
        share, extra = divmod(total, len(nodes))
        return {node: share + (1 if i < extra else 0)
                for i, node in enumerate(nodes)}

    # -- actions -----------------------------------------------------------

    @staticmethod
    def _refuse_pinned(domain: hypervisor.DomainInfo, what: str) -> None:
        if domain.pinned:
            raise hypervisor.HypervisorError(
                'refusing to %s %s: Nova pinned it (%s)'
                % (what, domain.name, domain.pinned_reason))

    def set_nodeset(self, domain: hypervisor.DomainInfo, nodes) -> None:
        """Restrict the running guest's memory to ``nodes``, repeatably.

        How depends on the live numatune (libvirt 9.0, kernel 6.1, cgroup
        v2, measured in tests/numa):

        * none, as Nova writes a floating guest: the cpuset cgroups of the
          QEMU process's threads (``memory_nodes``, privileged). libvirt's
          own live change would succeed once and turn the live XML into
          ``mode='strict'``, refusing every later change. The kernel moves
          the pages outside ``nodes`` during the write;
        * ``mode='restrictive'``: libvirt's live numatune change, which it
          allows every time and applies through the same cgroups;
        * ``strict``, ``preferred``, ``interleave``: refused. libvirt
          refuses live changes there, and the agent does not override a
          placement that was written for the guest.

        Without a local QEMU pid (remote URIs, the test driver) libvirt's
        live change is the only way, and libvirt decides.
        """
        self._refuse_pinned(domain, 'change the nodeset of')
        nodes = sorted(set(int(n) for n in nodes))
        size = self.topology().size
        if not nodes or nodes[0] < 0 or nodes[-1] >= size:
            raise hypervisor.HypervisorError(
                'nodeset %s is not within the %d host nodes' % (nodes, size))
        dom = self._lookup(domain)
        mode = self._numatune_mode(domain, dom)
        pid = self._cgroup_pid(domain)
        if mode is None and pid is not None:
            self._set_cgroup_nodes(domain, nodes)
            return
        if mode not in (None, 'restrictive') and pid is not None:
            raise hypervisor.HypervisorError(
                'refusing to change the nodeset of %s live: its numatune '
                'mode is %r (libvirt changes only restrictive ones, and the '
                'agent does not override one written for the guest)'
                % (domain.name, mode))
        with self._errors('nodeset of %s' % domain.name, dom):
            dom.setNumaParameters(
                {libvirt.VIR_DOMAIN_NUMA_NODESET: format_set(nodes)},
                libvirt.VIR_DOMAIN_AFFECT_LIVE)

    def restore(self, domain: hypervisor.DomainInfo, nodes=None,
                cpus=None) -> None:
        """As :meth:`Hypervisor.restore`; a local QEMU given every node
        (nodes ``()``, no numatune) or its vCPUs every CPU (cpus ``()``)
        get what their parent cgroup allows, not every node or CPU of the
        host written out (a parent restricting them, systemd's
        ``AllowedMemoryNodes`` or ``AllowedCPUs`` say, would refuse that,
        and the guest would stay confined).
        """
        local = self._cgroup_pid(domain) is not None
        if nodes is not None and not nodes and local and \
                self._numatune_mode(domain) is None:
            self._refuse_pinned(domain, 'change the nodeset of')
            self._set_cgroup_nodes(domain, [])
            nodes = None
        if cpus is not None and not cpus and local and self._vcpu_cgroups:
            self._refuse_pinned(domain, 'pin the vCPUs of')
            if nodes is not None:
                super().restore(domain, nodes, None)
            self._set_cgroup_cpus(domain, [])
            return
        super().restore(domain, nodes, cpus)

    def _numatune_mode(self, domain, dom=None) -> str | None:
        dom = dom if dom is not None else self._lookup(domain)
        with self._errors('numatune of %s' % domain.name, dom):
            return live_numatune_mode(dom.XMLDesc(0))

    #: Whether libvirt gives vCPU threads cpuset cgroups of their own
    #: (until a write finds none).
    _vcpu_cgroups = True

    def _cgroup_pid(self, domain) -> int | None:
        """The QEMU pid of a local guest, else None."""
        return domain.pid if domain.pid is not None else self._read_pid(
            domain.name)

    def _set_cgroup_cpus(self, domain, cpus) -> None:
        self._privileged(domain, 'vCPUs\' CPUs', self._vcpu_cpus,
                         'set_vcpu_cpus', list(cpus))

    def _set_cgroup_nodes(self, domain, nodes) -> None:
        self._privileged(domain, 'nodeset', self._memory_nodes,
                         'set_memory_nodes', list(nodes))

    def _privileged(self, domain, what, call, helper, value) -> None:
        """``call((name, uuid), value)`` (None: the cgroup helper's
        entrypoint ``helper``), its failures as HypervisorError.
        """
        if call is None:
            from nova_numa_overhead.compute import privsep

            def call(identity, value):
                return getattr(privsep, helper)(*identity, value)
        try:
            call((domain.name, domain.uuid), value)
        except hypervisor.HypervisorError:
            raise
        except (OSError, ValueError) as e:
            raise hypervisor.HypervisorError(
                '%s of %s through its cgroups: %s' % (what, domain.name, e)
            ) from e
        except Exception as e:
            if not hypervisor.helper_not_started(e):
                raise
            raise hypervisor.HypervisorError(
                '%s of %s through its cgroups: the privileged helper '
                '[numa_overhead_cgroups] did not start (%s); check its '
                'helper_command and the sudoers or rootwrap rule (see the '
                'deployment guide)' % (what, domain.name, e)) from e

    def move_pages(self, domain: hypervisor.DomainInfo, moves,
                   max_pages: int) -> hypervisor.MoveResult:
        """Move pages of the domain's QEMU through the ``mover`` seam.

        The mover gets the domain's identity, ``(name, uuid)``, never a
        pid: the privileged helper finds and checks the process itself.
        """
        self._refuse_pinned(domain, 'move pages of')
        if self._mover is None:
            raise hypervisor.HypervisorError(
                'page moves need the privsep helper')
        return self._mover((domain.name, domain.uuid), moves, max_pages)

    def pin_vcpus(self, domain: hypervisor.DomainInfo, cpus) -> None:
        """Set every vCPU's live affinity to ``cpus``.

        A local QEMU's through the ``cpuset.cpus`` of its vCPU threads'
        cgroups (``vcpu_cpus``, privileged), as its memory nodes are:
        ``virDomainPinVcpu`` writes a ``<vcpupin>`` into the live XML,
        which Nova copies into a live migration's destination (and its
        persistent definition), and each call needs a libvirt job, which
        a migration's holds. Without a local QEMU pid (remote URIs, the
        test driver), ``virDomainPinVcpu``: the live state only, i.e.
        ``pinVcpuFlags(..., AFFECT_LIVE)``; the test driver rejects that
        flag but accepts this call.
        """
        self._refuse_pinned(domain, 'pin the vCPUs of')
        cpus = set(int(c) for c in cpus)
        known = self.topology().node_of_cpu()
        unknown = sorted(cpus - set(known))
        if not cpus or unknown:
            raise hypervisor.HypervisorError(
                'cannot pin %s to CPUs %s (unknown: %s)'
                % (domain.name, sorted(cpus), unknown))
        if self._cgroup_pid(domain) is not None and self._vcpu_cgroups:
            error = None
            try:
                self._set_cgroup_cpus(domain, sorted(cpus))
                return
            except hypervisor.HypervisorError as e:
                error = e
            if not _no_cgroup(error):
                raise error
            # libvirt made no cpuset cgroup for the vCPU threads (its
            # cgroup_controllers, a container): its own call, whose pins
            # live in the XML.
            self._vcpu_cgroups = False
            LOG.warning('%s: vCPUs are pinned through libvirt from now on '
                        '(their pins then travel with a live migration; '
                        'the destination agent gives Nova\'s back)', error)
        cpumap = tuple(i in cpus for i in range(max(known) + 1))
        dom = self._lookup(domain)
        with self._errors('pinning vCPUs of %s' % domain.name, dom):
            for vcpu in range(dom.info()[3]):
                dom.pinVcpu(vcpu, cpumap)

    def migration_running(self, domain: hypervisor.DomainInfo
                          ) -> bool | None:
        """Whether libvirt has a job running on the domain
        (virDomainGetJobInfo: a bounded or unbounded job); None where the
        driver has no job information.

        Any job counts: an outgoing migration is the one the agent waits
        for, and a guest being dumped or saved is no better to place.
        """
        dom = self._lookup(domain)
        error = None
        try:
            kind = dom.jobInfo()[0]
        except libvirt.libvirtError as e:
            error = e
        if error is None:
            return kind in (libvirt.VIR_DOMAIN_JOB_BOUNDED,
                            libvirt.VIR_DOMAIN_JOB_UNBOUNDED)
        if error.get_error_code() == libvirt.VIR_ERR_NO_SUPPORT:
            return None
        with self._errors('job of %s' % domain.name, dom):
            raise error

    # -- events ------------------------------------------------------------

    def register_lifecycle(self, callback) -> None:
        """Call ``callback(event, name)`` on the guests' events.

        'started' (STARTED, but for the destination of a live migration),
        'resumed' (RESUMED at the end of a migration: on the destination,
        or on the source when it failed), 'migrating' (the
        first MIGRATION_ITERATION, or SUSPENDED for a migration: the guest
        is leaving) and 'stopped' (STOPPED, CRASHED, SHUTDOWN; QEMU reports
        a guest shutdown as SHUTDOWN then STOPPED, so it may come twice).
        Callbacks run on libvirt's event thread (they must return at once)
        and survive reconnects. If libvirt is down the registration is
        kept and takes effect when the connection opens.
        """
        with self._lock:
            self._callbacks.append(callback)
            try:
                if self._conn is None:
                    self._connection()      # registers the callbacks
                elif not self._callback_ids:
                    self._register_events(self._conn)
            except hypervisor.HypervisorUnavailable as e:
                LOG.warning('Lifecycle events wait for libvirt: %s', e)

    def _register_events(self, conn) -> None:
        with self._errors('lifecycle events'):
            self._callback_ids = [
                conn.domainEventRegisterAny(
                    None, libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE,
                    self._on_lifecycle, None),
                conn.domainEventRegisterAny(
                    None, libvirt.VIR_DOMAIN_EVENT_ID_MIGRATION_ITERATION,
                    self._on_migration_iteration, None)]

    @staticmethod
    def event_name(event: int, detail: int) -> str | None:
        """The agent's name for a libvirt lifecycle event; None: ignored.

        A guest arriving by live migration starts (STARTED_MIGRATED) and,
        in post-copy, runs (RESUMED_POSTCOPY) while the migration job
        refuses every change: it is placed at RESUMED_MIGRATED, which
        libvirt sends at the very end of either kind.
        """
        if event == libvirt.VIR_DOMAIN_EVENT_STARTED:
            if detail == libvirt.VIR_DOMAIN_EVENT_STARTED_MIGRATED:
                return None
            return 'started'
        if event == libvirt.VIR_DOMAIN_EVENT_RESUMED and \
                detail in _constants('VIR_DOMAIN_EVENT_RESUMED_MIGRATED',
                                     'VIR_DOMAIN_EVENT_RESUMED_POSTCOPY_'
                                     'FAILED'):
            return 'resumed'
        if event == libvirt.VIR_DOMAIN_EVENT_SUSPENDED and \
                detail in _constants('VIR_DOMAIN_EVENT_SUSPENDED_MIGRATED',
                                     'VIR_DOMAIN_EVENT_SUSPENDED_POSTCOPY'):
            return 'migrating'
        if event in (libvirt.VIR_DOMAIN_EVENT_STOPPED,
                     libvirt.VIR_DOMAIN_EVENT_CRASHED,
                     libvirt.VIR_DOMAIN_EVENT_SHUTDOWN):
            return 'stopped'
        return None

    def _on_lifecycle(self, conn, dom, event, detail, opaque) -> None:
        name = self.event_name(event, detail)
        if name is not None:
            self._dispatch(name, dom)

    def _on_migration_iteration(self, conn, dom, iteration, opaque) -> None:
        # The first pass over the guest's memory: a migration began.
        if iteration == 1:
            self._dispatch('migrating', dom)

    def _dispatch(self, name: str, dom) -> None:
        domain_name = dom.name()
        for callback in list(self._callbacks):
            try:
                callback(name, domain_name)
            except Exception:
                LOG.exception('Lifecycle callback for %s %s failed',
                              domain_name, name)

    # -- the agent's record ------------------------------------------------

    def record(self, domain: hypervisor.DomainInfo,
               recorded: hypervisor.Recorded) -> None:
        """Keep ``recorded`` in the domain's live metadata.

        Under the plugin's namespace (:data:`AGENT_NS`), live only: Nova's
        persistent definition is left alone, and a hard reboot (which
        rewrites the XML) starts from Nova's placement again.
        """
        dom = self._lookup(domain)
        with self._errors('metadata of %s' % domain.name, dom):
            dom.setMetadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT,
                            format_recorded(recorded), AGENT_PREFIX,
                            AGENT_NS, libvirt.VIR_DOMAIN_AFFECT_LIVE)
