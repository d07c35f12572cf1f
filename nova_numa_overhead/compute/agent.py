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
"""The compute agent: measure, report, place, rebalance.

One :class:`Agent` per compute host, driven by the service in
:mod:`nova_numa_overhead.cmd.agent` (oslo.service, threading backend):

* every ``sample_interval``: list the guests, read their counters, vCPU and
  memory placement, estimate the per-node levels (Figure 4), place guests
  that started, and report when a guest started or stopped, a level
  changed, ``report_interval`` passed or ``heartbeat_interval`` is due;
* every ``rebalance_interval``: the swap FIFO pass of
  :mod:`nova_numa_overhead.compute.rebalancer`;
* on a libvirt "started" event: place the guest at once;
* on a scheduler's sync request: report at once.

A hypervisor that drops its connection is reconnected with backoff; a
guest that vanishes mid-operation is skipped; nothing a guest does stops
the loops.
"""

import collections
import dataclasses
import threading
import time
import uuid

from oslo_log import log as logging

from nova_numa_overhead.compute import collector as collector_mod
from nova_numa_overhead.compute import hypervisor as hv_mod
from nova_numa_overhead.compute import placer as placer_mod
from nova_numa_overhead.compute import rebalancer
from nova_numa_overhead.conf import agent as agent_conf
from nova_numa_overhead.overhead import estimator
from nova_numa_overhead.overhead import planner
from nova_numa_overhead import report as report_mod

LOG = logging.getLogger(__name__)
VERSION = '0.1.0'
PAGES_PER_MB = 256
MAX_DECISIONS = 64
BACKOFF = (1, 2, 4, 8, 16, 30)


class RateLimit:
    """A token bucket in MiB: the agent-wide page move rate."""

    def __init__(self, mb_per_s: float, clock=time.monotonic):
        self.rate = mb_per_s
        self.clock = clock
        self.tokens = mb_per_s
        self.stamp = clock()

    def take(self, mb: float) -> float:
        """MiB allowed now, up to ``mb`` (all of it when unlimited)."""
        if self.rate <= 0:
            return mb
        now = self.clock()
        self.tokens = min(self.rate, self.tokens +
                          (now - self.stamp) * self.rate)
        self.stamp = now
        granted = max(0.0, min(mb, self.tokens))
        self.tokens -= granted
        return granted


class Agent:
    """Measures one host, reports it and places its guests' memory."""

    def __init__(self, conf, hypervisor: hv_mod.Hypervisor, publisher,
                 host: str, notifier=None, clock=time.monotonic,
                 sleep=time.sleep):
        self.conf = conf
        self.opts = conf.numa_overhead_agent
        self.hv = hypervisor
        self.publisher = publisher
        self.host = host
        self.notifier = notifier
        self.clock = clock
        self.sleep = sleep
        self.agent_id = uuid.uuid4().hex
        self.seq = 0
        self.thresholds = agent_conf.thresholds(conf)
        self.collector = collector_mod.Collector(self.opts.window_size)
        self.rate = RateLimit(self.opts.migrate_rate_mb_per_s, clock)
        self.placer = placer_mod.Placer(
            hypervisor, self.opts.enforcement, self.opts.reserve_mb,
            managed=self.opts.managed_guests,
            default_policy=conf.numa_overhead.default_policy,
            default_max_nodes=conf.numa_overhead.default_max_nodes,
            page_budget=self._pages_allowed,
            colocate_cpus=self._colocation_cpus if self.opts.colocate_vcpus
            else None)
        self.domains: dict = {}
        self.pending: set = set()
        self.nova_allowed: dict = {}
        # The latest decisions (for logs, status and tests), bounded.
        self.decisions = collections.OrderedDict()
        self.last_report = None
        self.last_levels = None
        self.dirty = True
        self.failures = {}
        self._lock = threading.RLock()
        self._topology = None
        self.levels = None
        self.free_mb = []
        self._backoff = 0

    # -- topology ---------------------------------------------------------

    @property
    def topology(self) -> hv_mod.HostTopology:
        if self._topology is None:
            self._topology = self.hv.topology()
            self.estimator_topology = estimator.Topology(
                distances=self._topology.distances,
                **self._measured_matrix(self._topology))
            self.node_of_cpu = self._topology.node_of_cpu()
            self.levels = estimator.static_levels(self.estimator_topology,
                                                  self.thresholds)
        return self._topology

    def _colocation_cpus(self) -> dict:
        return {n.id: n.cpus for n in self.topology.nodes if n.cpus}

    def _measured_matrix(self, topology) -> dict:
        """The probe's latency/bandwidth matrix (vTRMS), if configured."""
        if topology.latency_ns or topology.bandwidth_mbps:
            return {'latency_ns': topology.latency_ns,
                    'bandwidth_mbps': topology.bandwidth_mbps}
        path = self.opts.topology_file
        if not path:
            return {}
        from nova_numa_overhead.compute import probe
        try:
            matrix = probe.load(path, nodes=[n.id for n in topology.nodes])
            if matrix is None:
                LOG.warning('topology_file %s does not exist; using SLIT '
                            'distances', path)
                return {}
            args = probe.as_topology_args(matrix)
        except (OSError, ValueError) as exc:
            LOG.warning('Ignoring topology_file %(path)s, using SLIT '
                        'distances: %(exc)s', {'path': path, 'exc': exc})
            return {}
        LOG.info('Remote-access latency levels from the matrix measured '
                 'at %(when)s (%(path)s)', {'when': matrix.measured_at,
                                            'path': path})
        return args

    # -- the sampling cycle -------------------------------------------------

    def cycle(self) -> bool:
        """One sample: measure, estimate, place starters, maybe report.

        :returns: False when the hypervisor was unreachable.
        """
        with self._lock:
            try:
                self._cycle()
            except hv_mod.HypervisorUnavailable as exc:
                self._reconnect(exc)
                return False
            self._backoff = 0
            return True

    def _reconnect(self, exc) -> None:
        delay = BACKOFF[min(self._backoff, len(BACKOFF) - 1)]
        self._backoff += 1
        LOG.warning('Hypervisor unavailable (%(exc)s); reconnecting in '
                    '%(delay)d s', {'exc': exc, 'delay': delay})
        self.sleep(delay)
        reconnect = getattr(self.hv, 'reconnect', None)
        if reconnect is not None:
            try:
                reconnect()
            except hv_mod.HypervisorError as again:
                LOG.warning('Reconnect failed: %s', again)

    def _cycle(self) -> None:
        # Loads the topology, the estimator's topology and the CPU map.
        self.topology
        now = self.clock()
        listed = self.hv.domains()
        current = {d.name: d for d in listed}
        started = [d for name, d in current.items()
                   if name not in self.domains or name in self.pending]
        stopped = [name for name in self.domains if name not in current]
        for domain in started:
            # The nodes Nova allows (numatune it wrote, or every node):
            # the agent's own nodeset restrictions are not limits to it.
            self.nova_allowed[domain.name] = tuple(domain.allowed_nodes)
            if not domain.pinned and not domain.metadata_error:
                self._guarded(domain, self.hv.enable_counters, domain)
        for name in self._measure(listed, now):
            current.pop(name, None)
        self.domains = current
        self.collector.retain(current)
        for name in [n for n in self.nova_allowed if n not in current]:
            del self.nova_allowed[name]
        self.free_mb = self.hv.free_memory_mb()
        self.levels = estimator.estimate(self.collector.observations(),
                                         self.estimator_topology,
                                         self.thresholds)
        levels = self.levels.to_dict()
        changed = levels != self.last_levels
        self.last_levels = levels
        for domain in started:
            if domain.name in current:
                self.place(domain)
        self.pending.clear()
        if started or stopped or changed:
            self.dirty = True
        self.maybe_report(now)

    def _measure(self, listed, now) -> set:
        """Read counters and placement; returns the guests that vanished."""
        try:
            counters = self.hv.counters(listed)
        except hv_mod.HypervisorUnavailable:
            raise
        except hv_mod.HypervisorError as exc:
            LOG.warning('Could not read counters: %s', exc)
            counters = {}
        gone = set()
        for domain in listed:
            try:
                cpus = self.hv.vcpu_cpus(domain)
                memory = self.hv.memory_per_node(domain)
            except hv_mod.DomainGone:
                gone.add(domain.name)
                continue
            except hv_mod.HypervisorUnavailable:
                raise
            except hv_mod.HypervisorError as exc:
                LOG.debug('Skipping %s this cycle: %s', domain.name, exc)
                continue
            self.collector.place(
                domain.name,
                collector_mod.cpu_fractions(cpus, self.node_of_cpu), memory)
            self.collector.update(domain.name, counters.get(domain.name),
                                  now)
        return gone

    def _guarded(self, domain, func, *args):
        try:
            return func(*args)
        except hv_mod.DomainGone:
            LOG.debug('Domain %s vanished', domain.name)
        except hv_mod.HypervisorUnavailable:
            raise
        except hv_mod.HypervisorError as exc:
            LOG.debug('%s on %s failed: %s', func.__name__, domain.name, exc)
        return None

    # -- reporting ----------------------------------------------------------

    def guests_per_node(self) -> list:
        counts = [0] * self.topology.size
        for name in self.domains:
            state = self.collector.guests.get(name)
            for node, mb in (state.memory_mb if state else {}).items():
                if mb >= 1 and 0 <= node < len(counts):
                    counts[node] += 1
        return counts

    def build_report(self) -> report_mod.Report:
        topology = self.topology
        free = self.free_mb or self.hv.free_memory_mb()
        total = [node.memory_mb for node in topology.nodes]
        return report_mod.build(
            self.host, self.agent_id, VERSION, self.seq, self.levels,
            total_mb=total,
            free_mb=[max(0, min(int(f), t)) for f, t in zip(free, total)],
            guests=self.guests_per_node(),
            cpus=[len(node.cpus) for node in topology.nodes],
            distances=topology.distances)

    def report(self) -> bool:
        """Send a report now."""
        with self._lock:
            self.seq += 1
            try:
                report = self.build_report()
            except (report_mod.InvalidReport, hv_mod.HypervisorError) as e:
                LOG.warning('Could not build a report: %s', e)
                return False
            sent = self.publisher.publish(report)
            if sent:
                self.last_report = self.clock()
                self.dirty = False
            return sent

    def maybe_report(self, now=None) -> bool:
        now = self.clock() if now is None else now
        period = min(self.opts.report_interval,
                     self.opts.heartbeat_interval)
        due = self.last_report is None or now - self.last_report >= period
        if self.dirty or due:
            return self.report()
        return False

    def sync(self) -> None:
        """A scheduler asked for a fresh report."""
        self.report()

    # -- placement ----------------------------------------------------------

    def host_view(self, without: str | None = None) -> planner.HostView:
        """The planner's view of this host, from the agent's measures.

        ``without``: a guest whose own memory counts as free (it is the
        one being placed).
        """
        topology = self.topology
        free = list(self.free_mb or self.hv.free_memory_mb())
        guests = self.guests_per_node()
        if without is not None:
            state = self.collector.guests.get(without)
            for node, mb in (state.memory_mb if state else {}).items():
                if 0 <= node < len(free):
                    free[node] += int(mb)
                    if mb >= 1:
                        guests[node] = max(0, guests[node] - 1)
        return planner.HostView(
            free_mb=free, total_mb=[n.memory_mb for n in topology.nodes],
            guests=guests, overhead=self.levels.overhead_matrix(),
            distances=[list(r) for r in topology.distances],
            local_nodes=tuple(n.id for n in topology.nodes if n.cpus))

    def on_lifecycle(self, event: str, name: str) -> None:
        """libvirt lifecycle callback: place starters, report changes."""
        with self._lock:
            if event == 'started':
                self.pending.add(name)
            self.dirty = True
        if event == 'started':
            self.cycle()

    def as_nova_placed(self, domain: hv_mod.DomainInfo):
        """The domain with the nodes Nova allows it, not the agent's."""
        allowed = self.nova_allowed.get(domain.name)
        if allowed is None or allowed == tuple(domain.allowed_nodes):
            return domain
        return dataclasses.replace(domain, allowed_nodes=allowed)

    def place(self, domain: hv_mod.DomainInfo) -> placer_mod.Decision:
        state = self.collector.guests.get(domain.name)
        domain = self.as_nova_placed(domain)
        try:
            decision = self.placer.place(
                domain, self.host_view(without=domain.name),
                state.cpu if state else {},
                dict(state.memory_mb) if state else {})
        except hv_mod.DomainGone:
            return None
        except hv_mod.HypervisorUnavailable:
            raise
        except hv_mod.HypervisorError as exc:
            decision = placer_mod.Decision(domain.name, 'failed', str(exc))
        self.decisions.pop(domain.name, None)
        self.decisions[domain.name] = decision
        while len(self.decisions) > MAX_DECISIONS:
            self.decisions.popitem(last=False)
        self._count_failures(decision.failed)
        if decision.action != 'skipped' or LOG.isEnabledFor(10):
            LOG.info('Placement of %(guest)s: %(action)s, %(reason)s; '
                     'memory %(before)s MiB -> plan %(plan)s MiB, moves '
                     '%(moves)s, overhead %(overhead)s',
                     {'guest': domain.name, 'action': decision.action,
                      'reason': decision.reason, 'before': decision.before,
                      'plan': decision.plan, 'moves': decision.moves,
                      'overhead': decision.overhead})
        if decision.action != 'skipped':
            self._notify('numa_overhead.placement', decision.payload())
        return decision

    def _pages_allowed(self, mb: float) -> int:
        return int(self.rate.take(mb) * PAGES_PER_MB)

    def _count_failures(self, failed: dict) -> None:
        for name, count in (failed or {}).items():
            self.failures[name] = self.failures.get(name, 0) + count

    def _notify(self, event_type: str, payload: dict) -> None:
        if self.notifier is None:
            return
        try:
            self.notifier.info({}, event_type, dict(payload, host=self.host))
        except Exception as exc:
            LOG.debug('Notification %s not sent: %s', event_type, exc)

    # -- rebalancing --------------------------------------------------------

    def managed_guests(self) -> list:
        views = []
        for name, domain in self.domains.items():
            policy, _ = placer_mod.guest_policy(
                domain, self.opts.managed_guests,
                self.conf.numa_overhead.default_policy,
                self.conf.numa_overhead.default_max_nodes)
            if policy is None or not policy.rebalance:
                continue
            state = self.collector.guests.get(name)
            if state is None or not state.memory_mb:
                continue
            kind = self.collector.classify(
                name, available_mbps=self.opts.node_bandwidth_mbps,
                low=self.opts.llc_low_bound, high=self.opts.llc_high_bound)
            # Refilled each period from where the guest's memory is; the
            # pages themselves are picked cold first by the backend.
            fifo = rebalancer.SwapFifo(self.opts.fifo_entries)
            fifo.refill(state.memory_mb)
            views.append(rebalancer.GuestView(
                name=name, memory_mb=dict(state.memory_mb),
                local=placer_mod.local_node(state.cpu),
                action=kind.action if kind else 'leave', fifo=fifo))
        return views

    def rebalance(self) -> list:
        """One rebalancing period; returns the moves made (or advised)."""
        with self._lock:
            if self.levels is None or self.opts.enforcement == 'off':
                return []
            guests = self.managed_guests()
            moves = rebalancer.plan_moves(
                guests, self.levels.overhead_matrix(), self.free_mb,
                self.opts.rebalance_threshold,
                self.opts.max_move_mb_per_period, self.opts.reserve_mb)
            for move in moves:
                self._apply(move)
            return moves

    def _apply(self, move: rebalancer.Move) -> None:
        domain = self.domains.get(move.guest)
        payload = {'guest': move.guest, 'from': move.src, 'to': move.dst,
                   'mb': move.mb, 'reason': move.reason}
        if domain is None:
            return
        if self.opts.enforcement == 'pages':
            pages = self._pages_allowed(move.mb)
            try:
                domain = self._widen(domain, move.dst)
                result = self.hv.move_pages(domain,
                                            [(move.src, move.dst, move.mb)],
                                            pages)
            except hv_mod.DomainGone:
                return
            except hv_mod.HypervisorError as exc:
                LOG.warning('Rebalance of %(guest)s failed: %(exc)s',
                            {'guest': move.guest, 'exc': exc})
                return
            payload['moved_pages'] = result.moved
            payload['failed'] = dict(result.failed)
            self._count_failures(result.failed)
            action = 'moved'
        else:
            action = 'would move (enforcement=%s)' % self.opts.enforcement
        LOG.info('Rebalance %(action)s %(mb)d MiB of %(guest)s from node '
                 '%(src)d to node %(dst)d: %(reason)s',
                 {'action': action, 'mb': move.mb, 'guest': move.guest,
                  'src': move.src, 'dst': move.dst, 'reason': move.reason})
        self._notify('numa_overhead.rebalance', payload)

    def _widen(self, domain, node):
        """Add ``node`` to a nodeset the agent narrowed, so pages can go
        there; never beyond what Nova allows.
        """
        current = tuple(domain.allowed_nodes)
        nova = self.nova_allowed.get(domain.name, ())
        if not current or node in current or (nova and node not in nova):
            return domain
        nodes = tuple(sorted(set(current) | {node}))
        self.hv.set_nodeset(domain, nodes)
        return dataclasses.replace(domain, allowed_nodes=nodes)

    def colocate(self) -> list:
        """Move memory-intensive guests, vCPUs and memory, to a better
        node (opt-in: ``colocate_vcpus``).

        A guest moves when another local node is at least a level better
        than where its vCPUs run now (vTRMS/vDARM's co-location, driven by
        the measured levels); one guest per period, so that the levels can
        follow. Returns the names of the guests moved.
        """
        if not self.opts.colocate_vcpus or self.opts.enforcement in (
                'off', 'advisory'):
            return []
        with self._lock:
            for guest in self.managed_guests():
                domain = self.domains.get(guest.name)
                if domain is None or guest.action == 'leave':
                    continue
                state = self.collector.guests.get(guest.name)
                view = self.host_view(without=guest.name)
                if self.placer.better_home(self.as_nova_placed(domain), view,
                                           state.cpu) is None:
                    continue
                decision = self.place(domain)
                if decision is not None and decision.action != 'skipped':
                    return [guest.name]
        return []
