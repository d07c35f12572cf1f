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
"""The agent's view of a hypervisor: one interface, several backends.

The libvirt backend (:mod:`nova_numa_overhead.compute.libvirt_driver`, the
only module that imports libvirt) implements it for real hosts, the
simulator (:mod:`nova_numa_overhead.sim`) for modelled ones, and tests use
fakes. Everything above this interface (collector, estimator, placer,
rebalancer, agent service) is backend-agnostic.

Errors: a backend raises :class:`DomainGone` when a domain vanished
mid-operation (the agent skips it), :class:`HypervisorUnavailable` when the
connection is down (the agent reconnects with backoff) and
:class:`HypervisorError` for anything else it could not do.
"""

import abc
import calendar
import dataclasses
import time


class HypervisorError(Exception):
    """An operation failed; the message says what and why."""


class HypervisorUnavailable(HypervisorError):
    """The connection to the hypervisor is down."""


class DomainGone(HypervisorError):
    """The domain disappeared between listing and acting."""


@dataclasses.dataclass(frozen=True)
class NodeInfo:
    """One NUMA node (cell) of the host."""

    id: int
    cpus: tuple          # host CPU ids of the node
    memory_mb: int       # total memory of the node
    cores: int | None = None   # physical cores (threads share one), if known
    llc_mb: float | None = None   # last-level cache of its CPUs, if known


@dataclasses.dataclass(frozen=True)
class HostTopology:
    """The host's NUMA nodes and their SLIT distances (10 = local)."""

    nodes: tuple                   # of NodeInfo, index = node id
    distances: tuple               # N x N
    latency_ns: tuple | None = None       # measured (vTRMS), optional
    bandwidth_mbps: tuple | None = None   # measured (vTRMS), optional
    # Concurrent streams that measured each row of bandwidth_mbps; None:
    # one each (the cost model then takes it as ratios only).
    bandwidth_streams: tuple | None = None

    @property
    def size(self) -> int:
        return len(self.nodes)

    def node_of_cpu(self) -> dict:
        """Host CPU id -> node id."""
        return {cpu: node.id for node in self.nodes for cpu in node.cpus}

    def memory_nodes(self) -> tuple:
        """The ids of the nodes with memory: every node a guest may be
        given (a memoryless node, or a gap in the node ids filled in, can
        be in no cpuset.mems).
        """
        return tuple(node.id for node in self.nodes if node.memory_mb > 0)


@dataclasses.dataclass(frozen=True)
class Recorded:
    """What the agent keeps in a guest's own live metadata.

    So that it survives an agent restart and shows in ``nova-numa-overhead
    status``: what Nova allowed the guest, recorded before the agent
    changed anything (``nova_nodes``, ``nova_cpus``; () = every node or
    CPU), the agent's restriction now (``nodes``, ``cpus``; () = none),
    its last action with its outcome and time (ISO 8601, UTC), the
    optimizer's moves of it and their verdicts (``moved``, ``kept``,
    ``undone``: counts since it came to this host), its backoff, and the
    host it wrote
    this on: a guest that came by live migration carries its source's
    record.
    """

    host: str
    nova_nodes: tuple = ()
    nova_cpus: tuple = ()
    nodes: tuple = ()
    cpus: tuple = ()
    action: str = ''
    outcome: str = ''
    at: str = ''
    moved: int = 0
    kept: int = 0
    undone: int = 0
    # The optimizer leaves the guest alone: the undos its backoff counts
    # (each doubles the next wait) and until when (ISO 8601, UTC; '' =
    # no wait now), so that an agent restart does not move it again at
    # once.
    backoff_undos: int = 0
    backoff_until: str = ''


UTC_FORMAT = '%Y-%m-%dT%H:%M:%SZ'


def format_utc(seconds: float) -> str:
    """Seconds since the epoch as the agent records times (ISO 8601,
    UTC, to the second).
    """
    return time.strftime(UTC_FORMAT, time.gmtime(seconds))


def parse_utc(text: str) -> float | None:
    """Seconds since the epoch of a time :func:`format_utc` wrote; None
    if ``text`` is not one.
    """
    try:
        return float(calendar.timegm(time.strptime(text, UTC_FORMAT)))
    except (TypeError, ValueError, OverflowError):
        return None


@dataclasses.dataclass(frozen=True, slots=True)
class DomainInfo:
    """A running guest as the agent needs to know it.

    ``pinned`` is set for guests Nova placed itself (strict numatune
    memnodes, dedicated CPUs, hugepages): they are reported, never touched.
    ``metadata_error`` says why the Nova metadata could not be read (the
    guest is then left alone).
    """

    name: str
    uuid: str                      # Nova instance uuid, else libvirt uuid
    memory_mb: int
    vcpus: int
    extra_specs: dict
    pinned: bool = False
    pinned_reason: str = ''
    nova: bool = True              # has Nova metadata
    metadata_error: str = ''
    pid: int | None = None         # QEMU process, where known
    allowed_nodes: tuple = ()      # nodes the guest may use; () = all
    nova_nodes: tuple = ()         # numatune nodeset in the XML; () = all
    nova_cpus: tuple = ()          # <vcpu cpuset> in the XML; () = all
    recorded: Recorded | None = None   # the agent's metadata, if any
    # ((node, MiB), ...) of a hugepage-backed guest, from its XML.
    hugepage_mb: tuple = ()
    # This run of the guest (libvirt's domain id, new at every start);
    # '' = unknown.
    run: str = ''


#: The perf events the agent reads (libvirt's names, those of nova.conf's
#: ``[libvirt] enabled_perf_events``).
PERF_EVENTS = ('cpu_cycles', 'instructions', 'cache_references',
               'cache_misses', 'stalled_cycles_backend')
#: The subset every x86 and arm64 PMU has (Intel CPUs have no
#: stalled-cycles-backend event).
CORE_PERF_EVENTS = PERF_EVENTS[:4]


@dataclasses.dataclass(frozen=True, slots=True)
class DomainCounters:
    """Cumulative hardware counters of a domain (all vCPUs): the collector
    keeps the last read of every guest, so no ``__dict__`` each.
    """

    instructions: int
    cycles: int
    cache_references: int
    cache_misses: int
    stalled_cycles: int
    # CPU time of the vCPU threads, ns (0: unknown): tells counters that
    # miss those threads (see Collector.update).
    vcpu_ns: int = 0


@dataclasses.dataclass(frozen=True)
class MoveResult:
    """What a page move did: pages moved, and failures per errno name."""

    requested: int
    moved: int
    failed: dict = dataclasses.field(default_factory=dict)


class Hypervisor(metaclass=abc.ABCMeta):
    """What the agent needs from a hypervisor."""

    #: Why the last :meth:`enable_counters` returned False, if known.
    counters_error = None

    @abc.abstractmethod
    def topology(self) -> HostTopology:
        """The host's NUMA nodes, CPUs, memory and distances."""

    @abc.abstractmethod
    def free_memory_mb(self) -> list:
        """Free memory per node, in MiB."""

    @abc.abstractmethod
    def domains(self) -> list:
        """Running domains, as :class:`DomainInfo`."""

    @abc.abstractmethod
    def enable_counters(self, domain: DomainInfo) -> bool:
        """Turn on the perf events the agent reads; False if unsupported."""

    def counters_enabled(self, domain: DomainInfo) -> bool | None:
        """Whether the perf events the agent reads are on (None: unknown).
        """
        return None

    def disable_counters(self, domain: DomainInfo) -> None:
        """Turn the perf events off again (what ``status`` enabled)."""

    @abc.abstractmethod
    def counters(self, domains) -> dict:
        """Domain name -> :class:`DomainCounters` (absent if unknown)."""

    def memory_bandwidth(self, domains) -> dict:
        """Cumulative memory traffic per node of the monitored domains.

        Domain name -> {node id: (local bytes, total bytes)}, from resctrl
        memory-bandwidth monitoring (Intel RDT MBM, AMD PQoS) where the
        host has it and the domain has a monitor. The node is where the
        vCPUs ran; ``total`` counts their bytes to and from memory on any
        node, ``local`` those of that node's own memory, so ``total -
        local`` is their remote traffic, measured rather than inferred.

        Optional: ``{}`` (this default) means the host has no such
        source; callers treat an error the same way.
        """
        return {}

    @abc.abstractmethod
    def vcpu_cpus(self, domain: DomainInfo) -> list:
        """Host CPU each vCPU last ran on (-1 when unknown)."""

    def vcpu_affinity(self, domain: DomainInfo) -> tuple | None:
        """Host CPUs the domain's vCPUs may run on (the union of their
        affinities), sorted; None when unknown.

        Optional: this default says unknown.
        """
        return None

    @abc.abstractmethod
    def memory_per_node(self, domain: DomainInfo) -> dict:
        """Node id -> MiB of the domain's memory on that node."""

    @abc.abstractmethod
    def set_nodeset(self, domain: DomainInfo, nodes) -> None:
        """Restrict the domain's memory to these nodes (live numatune)."""

    @abc.abstractmethod
    def move_pages(self, domain: DomainInfo, moves, max_pages: int
                   ) -> MoveResult:
        """Move guest pages: ``moves`` is a list of (from, to, MiB).

        At most ``max_pages`` base pages in this call. A page that cannot
        move stays where it was and is counted by errno.
        """

    @abc.abstractmethod
    def pin_vcpus(self, domain: DomainInfo, cpus) -> None:
        """Narrow every vCPU's affinity to these host CPUs."""

    def restore(self, domain: DomainInfo, nodes=None, cpus=None) -> None:
        """Give a guest back the placement Nova wrote for it.

        Memory on ``nodes`` and vCPUs on ``cpus`` (() = every node or CPU
        of the host; None = leave that one as it is).
        """
        topology = self.topology()
        if nodes is not None:
            self.set_nodeset(domain, nodes or topology.memory_nodes())
        if cpus is not None:
            self.pin_vcpus(domain, cpus or sorted(topology.node_of_cpu()))

    def migration_running(self, domain: DomainInfo) -> bool | None:
        """Whether a job (a live migration away, say) still runs on the
        domain; None when the backend cannot tell.

        The agent asks it of a guest it saw start leaving: a migration
        that fails before the switchover while the guest runs raises no
        lifecycle event, and the guest would stay unmanaged.

        Optional: this default says unknown.
        """
        return None

    def record(self, domain: DomainInfo, recorded: Recorded) -> None:
        """Keep ``recorded`` with the guest (libvirt: its live metadata).

        Backends that cannot need not implement it: the agent then knows
        Nova's intent only from the guest's XML after a restart.
        """

    def register_lifecycle(self, callback) -> None:
        """Call ``callback(event, domain_name)`` on the guest's events.

        ``event`` is 'started', 'resumed' (after a live migration, on
        either host), 'migrating' (a live migration of the guest away from
        this host began) or 'stopped'. Backends without events need not
        implement it: the agent also notices guests appearing and
        disappearing when it samples.
        """

    def kernel_state(self):
        """The host kernel's own placement besides the agent
        (:class:`nova_numa_overhead.compute.kernel.KernelState`): NUMA
        balancing, numad.

        Optional: None (this default) means unknown (a remote or
        simulated host).
        """
        return None

    def close(self) -> None:
        """Release the connection."""


def helper_not_started(exc: BaseException) -> bool:
    """Whether ``exc`` says an oslo.privsep helper could not start.

    Matched by name: importing oslo_privsep.daemon would load eventlet
    into every process that imports this module.
    """
    cls = type(exc)
    return (cls.__name__ == 'FailedToDropPrivileges' and
            cls.__module__.startswith('oslo_privsep'))
