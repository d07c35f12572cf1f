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
* on a libvirt event: :meth:`Agent.on_lifecycle` only queues it (it runs
  on libvirt's event thread, which must keep turning); the service's event
  thread calls :meth:`Agent.handle_events`, which places guests that
  started or resumed at once;
* on a scheduler's sync request: report at once.

Threads and locks: the agent's state is guarded by one lock, never held
while sleeping or waiting on the broker. Reports are handed to the
publisher outside it (the service's publisher queues them and sends from
a thread of its own: :mod:`nova_numa_overhead.compute.publisher`); the
backoff sleep after losing the hypervisor happens outside it too.

Failures: a hypervisor that drops its connection is reconnected with
backoff; a guest that vanishes mid-operation is skipped; any other error
of one guest (a libvirt error, an OSError of the privileged helper, a bug)
is contained: that guest is skipped this cycle, the error is logged
(once per guest and kind at WARNING) and counted in :attr:`Agent.errors`,
and the agent goes on with the others.

Interfaces kept narrow for the decision logic that will replace parts of
it: the agent feeds :class:`~nova_numa_overhead.compute.placer.Placer`
(``place(domain, view, cpu, before) -> Decision``,
``better_home(domain, view, cpu)``) and
:func:`~nova_numa_overhead.compute.rebalancer.plan_moves` a
:class:`~nova_numa_overhead.overhead.planner.HostView` in which the guest
being placed counts as free, and applies what they return.
"""

import collections
import dataclasses
import errno
import functools
import threading
import time
import uuid

from oslo_log import log as logging

from nova_numa_overhead.compute import collector as collector_mod
from nova_numa_overhead.compute import hypervisor as hv_mod
from nova_numa_overhead.compute import optimizer as optimizer_mod
from nova_numa_overhead.compute import placer as placer_mod
from nova_numa_overhead.compute import rebalancer
from nova_numa_overhead.conf import agent as agent_conf
from nova_numa_overhead.overhead import cost
from nova_numa_overhead.overhead import estimator
from nova_numa_overhead.overhead import planner
from nova_numa_overhead.overhead import room as room_mod
from nova_numa_overhead import report as report_mod
from nova_numa_overhead import version

LOG = logging.getLogger(__name__)
MAX_DECISIONS = 64
BACKOFF = (1, 2, 4, 8, 16, 30)
KERNEL_CHECK = 60.0      # seconds between reads of the kernel's NUMA state
#: libvirt events (see Hypervisor.register_lifecycle) that (re)place a guest.
PLACING_EVENTS = ('started', 'resumed')


def error_kind(exc: BaseException) -> str:
    """A short name for an error: the errno name of an OSError, else the
    exception class (``EACCES``, ``HypervisorError``, ``KeyError``).
    """
    if isinstance(exc, OSError) and exc.errno:
        return errno.errorcode.get(exc.errno, 'E%d' % exc.errno)
    return type(exc).__name__


@dataclasses.dataclass(frozen=True, slots=True)
class Outcome:
    """The agent's last action on a guest, and how it went."""

    action: str          # restricted | moved | skipped | failed | restored...
    outcome: str         # 'ok: ...', or what went wrong / why not
    at: str              # when, ISO 8601 UTC


def utc_now() -> str:
    return time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())


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

    def give_back(self, mb: float) -> None:
        """Return ``mb`` MiB taken but not used (pages that did not move)."""
        if self.rate > 0 and mb > 0:
            self.tokens = min(self.rate, self.tokens + mb)


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
            page_budget=self.pages_allowed,
            colocate_cpus=self._colocation_cpus if self.opts.colocate_vcpus
            else None, judge=self._judge_placement,
            remote=self.opts.remote_placement)
        self.domains: dict = {}
        # Whether a cycle listed the guests yet: those of the first are
        # the host as the agent found it, not guests starting.
        self._listed = False
        self.pending: set = set()
        # Of those, the guests whose last event was 'started' (a new QEMU,
        # not one resumed after a pause or a migration).
        self.fresh: set = set()
        # What Nova allowed each guest (nodes, CPUs; () = all), and the
        # agent's own restriction in force (nodes, CPUs; () = none).
        self.nova_allowed: dict = {}
        self.nova_cpus: dict = {}
        self.restrictions: dict = {}
        # Guests leaving by live migration: left alone until they are gone
        # or resume here.
        self.migrating: set = set()
        # name -> (source host, nodeset?, vCPUs?) of a guest that came by
        # live migration with the source agent's restriction, not given
        # back yet (tried again every cycle).
        self.unrestored: dict = {}
        # The latest decisions (for logs, status and tests), bounded;
        # oldest first (plain dicts: no OrderedDict links per entry).
        self.decisions: dict = {}
        # The last action on each guest and its outcome, bounded.
        self.outcomes: dict = {}
        self.last_report = None
        self.last_levels = None
        self.dirty = True
        self.failures = {}
        # Per-guest errors contained, by kind (error_kind()).
        self.errors = {}
        self._warned = set()
        self._lock = threading.RLock()
        # libvirt's event thread takes only this one, and only briefly.
        self._events_lock = threading.Lock()
        self._events = collections.OrderedDict()
        self._wakeup = threading.Event()
        self._topology = None
        self.levels = None
        # When the levels and free memory were last measured (the clock's
        # time): a report's age (a sync answered while sampling fails
        # says how old its figures are).
        self.measured_at = None
        self.free_mb = []
        self._backoff = 0
        self.optimizer = optimizer_mod.Optimizer(self)
        # The host kernel's placement besides the agent (KernelState, None:
        # unknown), read every KERNEL_CHECK seconds; why the agent steps
        # back (numad runs: it places and moves nothing), None: it acts.
        self.kernel = None
        self._kernel_at = None
        self.stepped_back = None

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
            self.measured_at = self.clock()
        return self._topology

    def _colocation_cpus(self, domain) -> dict:
        """Node -> the CPUs of it the guest's vCPUs may be pinned to:
        those Nova allows it (its ``<vcpu cpuset>``: the shared set, not
        the dedicated CPUs of pinned guests nor the host's own).
        """
        nova = set(self.nova_cpus.get(domain.name) or domain.nova_cpus)
        out = {}
        for node in self.topology.nodes:
            cpus = tuple(c for c in node.cpus if not nova or c in nova)
            if cpus:
                out[node.id] = cpus
        return out

    def _measured_matrix(self, topology) -> dict:
        """The probe's latency/bandwidth matrix (vTRMS), if configured."""
        if topology.latency_ns or topology.bandwidth_mbps:
            args = {'latency_ns': topology.latency_ns,
                    'bandwidth_mbps': topology.bandwidth_mbps,
                    'bandwidth_streams': topology.bandwidth_streams}
            self._bandwidth_as_ratios(topology, args, 'the hypervisor')
            return args
        path = self.opts.topology_file
        if not path:
            return {}
        from nova_numa_overhead.compute import probe
        error = None
        try:
            # Nodes without CPUs (memory-only) have no row to measure.
            cpu_less = [n.id for n in topology.nodes if not n.cpus]
            matrix = probe.load(path, nodes=[n.id for n in topology.nodes],
                                cpu_less=cpu_less)
            args = (probe.as_topology_args(matrix, cpu_less) if matrix
                    else None)
        except (OSError, ValueError) as exc:
            error = exc
        if error is not None:
            LOG.warning('Ignoring topology_file %(path)s, using SLIT '
                        'distances: %(exc)s', {'path': path, 'exc': error})
            return {}
        if matrix is None:
            LOG.warning('topology_file %s does not exist; using SLIT '
                        'distances', path)
            return {}
        LOG.info('Remote-access latency levels from the matrix measured '
                 'at %(when)s (%(path)s)', {'when': matrix.measured_at,
                                            'path': path})
        self._bandwidth_as_ratios(topology, args, path)
        return args

    def _bandwidth_as_ratios(self, topology, args, source) -> None:
        """Say once (the topology is read once) when the cost model will
        take the matrix's bandwidth as ratios rather than capacities (not
        with the optimizer off: nothing else uses the bandwidth).
        """
        if not args.get('bandwidth_mbps') or not self.opts.optimize:
            return
        cpus = [len(n.cpus) for n in topology.nodes]
        partial = cost.partial_rows(cpus, args['bandwidth_mbps'],
                                    args.get('bandwidth_streams'))
        if not partial:
            return
        streams = args.get('bandwidth_streams')
        LOG.warning(
            'The cost model takes the bandwidth matrix of %(source)s as '
            'ratios, its largest local figure scaled to '
            '[numa_overhead_agent] node_bandwidth_mbps (%(mbps)d MB/s): '
            'CPU nodes %(nodes)s were measured with fewer concurrent '
            'streams than they have CPUs (%(detail)s); run '
            'nova-numa-overhead probe again, without --streams and on '
            'all CPUs (outside any cpuset), to measure capacities',
            {'source': source, 'mbps': self.opts.node_bandwidth_mbps,
             'nodes': ', '.join(str(topology.nodes[i].id) for i in partial),
             'detail': ', '.join(
                 '%d of %d' % (streams[i] if streams and streams[i] else 1,
                               cpus[i]) for i in partial)})

    # -- the sampling cycle -------------------------------------------------

    def cycle(self) -> bool:
        """One sample: measure, estimate, place starters, maybe report.

        :returns: False when the hypervisor was unreachable (after the
            backoff sleep and a reconnect attempt, both outside the lock).
        """
        with self._lock:
            error = None
            try:
                report = self._cycle()
            except hv_mod.HypervisorUnavailable as exc:
                error = exc
            # Logged outside the except clause: oslo.log would repeat the
            # exception's text after the message.
            if error is None:
                if self._backoff:
                    LOG.info('Hypervisor reachable again after %d failed '
                             'attempts', self._backoff)
                self._backoff = 0
            else:
                delay = self._failed_attempt(error)
        if error is not None:
            self._reconnect(delay)
            return False
        self._publish(report)
        return True

    def _failed_attempt(self, exc) -> int:
        """Count a failed attempt, warn once per outage; the next delay."""
        delay = BACKOFF[min(self._backoff, len(BACKOFF) - 1)]
        if self._backoff == 0:
            LOG.warning('Hypervisor unavailable: %(exc)s; retrying every '
                        '%(first)d to %(last)d s (logged again when it is '
                        'back)', {'exc': exc, 'first': BACKOFF[0],
                                  'last': BACKOFF[-1]})
        else:
            LOG.debug('Hypervisor still unavailable (%(exc)s); next '
                      'attempt in %(delay)d s', {'exc': exc, 'delay': delay})
        self._backoff += 1
        return delay

    def _reconnect(self, delay) -> None:
        """Wait a backoff step and reconnect; called holding no lock."""
        self.sleep(delay)
        reconnect = getattr(self.hv, 'reconnect', None)
        if reconnect is None:
            return
        error = None
        try:
            reconnect()
        except hv_mod.HypervisorError as again:
            error = again
        if error is not None:
            LOG.debug('Reconnect failed: %s', error)

    def _cycle(self):
        """The sample under the lock; returns a report to publish, or None."""
        # Loads the topology, the estimator's topology and the CPU map.
        self.topology
        now = self.clock()
        # First: a guest learned or started now is not confined while
        # numad runs.
        self._check_kernel(now)
        listed = self.hv.domains()
        current = {d.name: d for d in listed}
        # Before the events are taken: libvirt lost here loses none.
        ended = self._migrations_ended(current)
        pending, fresh = self._take_pending()
        pending |= ended
        # A new QEMU whose 'started' event was lost (libvirt restarted
        # or unreachable while Nova rebooted the guest): its run changed.
        respawned = self._respawned(current)
        pending |= respawned
        fresh |= respawned
        started = [d for name, d in current.items()
                   if name not in self.domains or name in pending]
        # A new QEMU: a 'started' event, or a guest that appeared since
        # the last listing without one (not one found when the agent
        # started, nor one resumed after a pause or a migration).
        fresh = {d.name for d in started if d.name in fresh or (
            self._listed and d.name not in self.domains and
            d.name not in pending)}
        placed, learned = set(), set()
        try:
            return self._cycle_listed(now, listed, current, started, fresh,
                                      placed, learned)
        except Exception:
            # Libvirt lost (or a call of the host's failing) before every
            # guest that started was placed: placed at the next cycle
            # (their events were taken), a new QEMU not learned yet as one.
            with self._events_lock:
                left = {d.name for d in started} - placed
                self.pending |= left
                self.fresh |= (fresh & left) - learned
            raise

    def _respawned(self, current) -> set:
        """The guests listed again under another run (libvirt's domain
        id) than the one known, where both are known.
        """
        out = set()
        for name, domain in current.items():
            known = self.domains.get(name)
            if known is not None and known.run and domain.run and \
                    known.run != domain.run:
                out.add(name)
        for name in sorted(out):
            LOG.info('%s runs in a new QEMU (its start was not seen): '
                     'learned and placed again', name)
        return out

    def _migrations_ended(self, current) -> set:
        """The guests seen leaving by live migration that still run here
        with no job: the migration failed or was cancelled before the
        switchover, which raises no lifecycle event. No longer leaving,
        they are placed again as after a 'resumed' event. A backend that
        cannot tell (None) leaves them leaving until an event comes.
        """
        ended = set()
        for name in sorted(self.migrating & current.keys()):
            error = None
            try:
                running = self.hv.migration_running(current[name])
            except hv_mod.HypervisorUnavailable:
                raise
            except hv_mod.HypervisorError as exc:
                running, error = None, exc
            if error is not None:
                LOG.debug('Could not tell whether %s is still leaving: %s',
                          name, error)
            if running is False:
                ended.add(name)
        for name in sorted(ended):
            LOG.info('%s still runs here and its live migration is over '
                     '(failed or cancelled before the switchover): placed '
                     'again', name)
        # Those no longer listed left (or wait for the end of their
        # migration, hidden): an event places them if they come back.
        self.migrating &= current.keys() - ended
        return ended

    def _cycle_listed(self, now, listed, current, started, fresh, placed,
                      learned):
        """The rest of the sample, with the guests listed and those that
        started; ``placed`` and ``learned`` get the names of those it has
        placed and learned (Nova's intent read).
        """
        stopped = [name for name in self.domains if name not in current]
        for domain in started:
            if domain.name not in self.domains:
                self._learn(domain)
                learned.add(domain.name)
            else:
                # Started again or resumed: another run to measure.
                self.optimizer.restarted(domain.name, now)
                if domain.name in fresh:
                    # A new QEMU (Nova's hard reboot, a start from the
                    # domain's config): the agent's live nodeset, pins and
                    # record went with the old one; Nova's XML is read
                    # again, and its counters start over.
                    self.collector.restarted(domain.name)
                    self._learn(domain)
                    learned.add(domain.name)
            if not domain.pinned and not domain.metadata_error:
                self.guarded(domain, 'Enabling perf events',
                             self.hv.enable_counters, domain)
        gone = self._measure(listed, now)
        for name in gone:
            current.pop(name, None)
        if (started or stopped or gone) and self._listed:
            # The moves awaiting a verdict are judged on their guest
            # alone; after a start, the next waits for the host to
            # settle.
            self.optimizer.host_changed(now, started=bool(started))
        self._listed = True
        self.domains = current
        self.collector.retain(current)
        self._forget([n for n in self.nova_allowed if n not in current])
        self.free_mb = self.hv.free_memory_mb()
        if self.stepped_back is not None:
            self._hand_back('the agent steps back: %s' % self.stepped_back)
        elif not self.enforcing:
            # Enforcement turned down (advisory or off) since an earlier
            # run confined guests: nothing of it stays in force, and no
            # protection from a filling node is needed then.
            self._hand_back('enforcement is %s' % self.opts.enforcement)
        self.levels = estimator.estimate(self.collector.observations(),
                                         self.estimator_topology,
                                         self.thresholds)
        self.measured_at = now
        levels = self.levels.to_dict()
        changed = levels != self.last_levels
        self.last_levels = levels
        for name, (source, nodes, cpus) in list(self.unrestored.items()):
            # Arrived by live migration, the source's restriction still in
            # force: Nova's placement again (placed after, if it started).
            domain = current.get(name)
            if domain is not None:
                self._restore(domain, nodes, cpus, 'arrived by live '
                              'migration from %s' % source)
        for domain in started:
            if domain.name in current:
                self.place(domain, fresh=domain.name in fresh)
            placed.add(domain.name)
        self.protect()
        self._optimize(now)
        if started or stopped or changed:
            self.dirty = True
        return self._due_report(now)

    def _check_kernel(self, now: float) -> None:
        """Read the kernel's state every KERNEL_CHECK seconds; step back
        while numad runs on a host where the agent enforces (numad binds
        the same QEMU processes' CPUs and memory: the two would undo each
        other's placements), and act again once it has stopped. A
        hypervisor that cannot tell leaves the agent acting.
        """
        if self._kernel_at is not None and \
                now - self._kernel_at < KERNEL_CHECK:
            return
        self._kernel_at = now
        error = None
        try:
            state = self.hv.kernel_state()
        except Exception as exc:
            state, error = None, exc
        if error is not None:
            # Unknown this time: the agent goes on as it was (stepped
            # back or not) until a read succeeds.
            LOG.debug('Reading the kernel\'s NUMA balancing and numad '
                      'failed: %s', error)
            return
        if state != self.kernel and state is not None:
            LOG.info('%s', state.text())
        self.kernel = state
        numad = state.numad if state is not None else ()
        if numad is None:
            # Whether numad runs is unknown: as it was until a read tells.
            return
        if numad and self.enforcing and self.stepped_back is None:
            self.stepped_back = (
                'numad (pid %s) runs on this host and binds guests itself'
                % ', '.join(str(p) for p in numad))
            self.optimizer.step_back()
            LOG.warning('%s: the agent steps back until it stops (gives '
                        'the guests it confined Nova\'s placement back, '
                        'then places and moves nothing; reports go on). '
                        'Stop numad where the agent enforces, or set '
                        '[numa_overhead_agent] enforcement = advisory',
                        self.stepped_back)
        elif not numad and self.stepped_back is not None:
            LOG.info('numad no longer runs on this host: the agent acts '
                     'again, from where the guests are now')
            self.stepped_back = None
            # Where numad left them: no optimizer move until the host
            # settles (its last migrations land, the rates show it).
            self.optimizer.host_changed(now)

    def _hand_back(self, why: str) -> None:
        """Stepped back, or not enforcing: give every guest the agent
        confined or pinned Nova's placement back (its nodeset widened, its
        vCPUs unpinned; no page moves), so that numad places it within
        what Nova allows, and nothing the agent set fences numad in or
        lets a filling node kill a guest. A guest whose restore failed is
        tried again next cycle.
        """
        for name, (nodes, cpus) in list(self.restrictions.items()):
            domain = self.domains.get(name)
            if domain is None or not (nodes or cpus) or \
                    name in self.migrating or domain.pinned:
                continue
            self._restore(domain, nodes, cpus, why)

    def _optimize(self, now: float) -> None:
        """The optimizer's pass: its failure never stops sampling,
        placement or reports (logged once per kind of error).
        """
        error = None
        try:
            if self.stepped_back is not None:
                # Its guests' progress is still measured (a pass after
                # numad stops needs a window of it).
                self.optimizer.observe(now)
            else:
                self.optimizer.step(now)
        except hv_mod.HypervisorUnavailable:
            raise
        except Exception as exc:
            error = exc
        if error is None:
            return
        kind = error_kind(error)
        self.errors[kind] = self.errors.get(kind, 0) + 1
        if ('optimizer', kind) in self._warned:
            LOG.debug('Optimizer pass failed again: %s: %s', kind, error)
            return
        self._warned.add(('optimizer', kind))
        LOG.error('Optimizer pass failed, skipped (%(kind)s: %(error)s); '
                  'sampling, placement and reports go on',
                  {'kind': kind, 'error': error}, exc_info=error)

    def _take_pending(self) -> tuple:
        """(guests to place again, those of them just started)."""
        with self._events_lock:
            pending, self.pending = self.pending, set()
            fresh, self.fresh = self.fresh, set()
        return pending, fresh

    def _forget(self, names) -> None:
        for name in names:
            self.unrestored.pop(name, None)
            self.nova_allowed.pop(name, None)
            self.nova_cpus.pop(name, None)
            self.restrictions.pop(name, None)
            self.migrating.discard(name)
            self._warned = {w for w in self._warned if w[0] != name}

    # -- Nova's intent ------------------------------------------------------

    @property
    def enforcing(self) -> bool:
        """Whether the agent changes guests (nodeset or pages)."""
        return self.opts.enforcement in (placer_mod.NODESET,
                                         placer_mod.PAGES)

    def nova_intent(self, domain: hv_mod.DomainInfo) -> tuple:
        """(nodes, CPUs) Nova allowed the guest; () = every one.

        From the agent's record when this host wrote it (after an agent
        restart the XML may show the agent's own restriction); for a guest
        that came by live migration, "every node" carries over but node
        and CPU ids are the source's, so the rest comes from the XML Nova
        wrote for this host; else from the XML.
        """
        recorded = domain.recorded
        if recorded is not None and recorded.host == self.host:
            return tuple(recorded.nova_nodes), tuple(recorded.nova_cpus)
        if recorded is not None and not recorded.nova_nodes:
            return (), tuple(domain.nova_cpus)
        return tuple(domain.nova_nodes), tuple(domain.nova_cpus)

    def _learn(self, domain: hv_mod.DomainInfo) -> None:
        """A guest seen for the first time (new, or the agent restarted)."""
        name = domain.name
        nodes, cpus = self.nova_intent(domain)
        self.nova_allowed[name] = nodes
        self.nova_cpus[name] = cpus
        recorded = domain.recorded
        restriction = ((), ())
        if recorded is not None and recorded.host == self.host:
            # The agent's own earlier restriction, still in force.
            restriction = (tuple(recorded.nodes), tuple(recorded.cpus))
            if recorded.action:
                self.outcomes[name] = Outcome(recorded.action,
                                              recorded.outcome, recorded.at)
            self.optimizer.resume(name, recorded)
        self.restrictions[name] = restriction
        if domain.pinned or domain.metadata_error:
            return
        if not self.enforcing:
            # An earlier run's restriction of its own is handed back
            # (_hand_back); nothing else is touched.
            return
        if recorded is not None and recorded.host != self.host and (
                recorded.nodes or recorded.cpus):
            # It came by live migration with the source agent's
            # restriction in its XML (a restrictive numatune, vCPU pins):
            # Nova's placement first, then this host's plan; tried again
            # every cycle until it is given back.
            if not self._restore(domain, recorded.nodes, recorded.cpus,
                                 'arrived by live migration from %s'
                                 % recorded.host):
                self.unrestored[name] = (recorded.host,
                                         bool(recorded.nodes),
                                         bool(recorded.cpus))
        elif recorded is None or recorded.host != self.host:
            self.write_record(domain)

    def _restore(self, domain, nodes, cpus, why: str) -> bool:
        """Give back what Nova allowed where the agent had restricted."""
        name = domain.name
        nova_nodes = self.nova_allowed.get(name, ())
        nova_cpus = self.nova_cpus.get(name, ())
        done = self.guarded(domain, "Restoring Nova's placement",
                            self._restore_now, domain,
                            nova_nodes if nodes else None,
                            nova_cpus if cpus else None)
        if not done:
            return False
        # What was given back is Nova's again; the rest stays the agent's.
        now_nodes, now_cpus = self.restrictions.get(name, ((), ()))
        self.restrictions[name] = (() if nodes else now_nodes,
                                   () if cpus else now_cpus)
        self.unrestored.pop(name, None)
        if nodes:
            self._relist(name, nova_nodes)
        self.record(name, 'restored', "ok: Nova's placement (nodes %s, "
                    'CPUs %s): %s' % (_set_text(nova_nodes),
                                      _set_text(nova_cpus), why))
        self.write_record(domain, force=True)
        return True

    def _relist(self, name, nodes) -> None:
        """The nodeset the agent just gave ``name`` back, in its listing
        until the next sample (:meth:`_widen` reads it).
        """
        listed = self.domains.get(name)
        if listed is not None:
            self.domains[name] = dataclasses.replace(
                listed, allowed_nodes=tuple(nodes))

    def _restore_now(self, domain, nodes, cpus) -> bool:
        self.hv.restore(domain, nodes, cpus)
        return True

    def write_record(self, domain: hv_mod.DomainInfo,
                     force: bool = False) -> None:
        """Keep what the agent knows of the guest in its live metadata
        (when it enforces, or ``force``: Nova's placement given back, so
        that a later run does not take the old restriction for one still
        in force; not while the guest leaves by live migration: the
        migration's job holds the domain, and the call would wait for it,
        30 s, then fail).
        """
        name = domain.name
        if (not self.enforcing and not force) or name in self.migrating:
            return
        nodes, cpus = self.restrictions.get(name, ((), ()))
        last = self.outcomes.get(name)
        counts = self.optimizer.guest_counts(name)
        undos, until = self.optimizer.backoff_record(name)
        recorded = hv_mod.Recorded(
            host=self.host, nova_nodes=self.nova_allowed.get(name, ()),
            nova_cpus=self.nova_cpus.get(name, ()), nodes=nodes, cpus=cpus,
            action=last.action if last else '',
            outcome=last.outcome if last else '',
            at=last.at if last else '', moved=counts['moved'],
            kept=counts['kept'], undone=counts['undone'],
            backoff_undos=undos, backoff_until=until)
        error = None
        try:
            self.hv.record(domain, recorded)
        except hv_mod.HypervisorUnavailable:
            raise
        except Exception as exc:
            error = exc
        if error is not None:
            LOG.debug('Could not record the state of %s in its metadata: '
                      '%s', name, error)

    def leave_for_migration(self, name: str) -> None:
        """A live migration of ``name`` began: Nova's placement back.

        The agent's cgroup restrictions (memory nodes, and a local QEMU's
        vCPUs) do not travel, but a restrictive numatune and the vCPU pins
        of a guest without a known QEMU pid live in the XML; and a
        migration that fails leaves the guest here with what Nova wrote
        until it is placed again ('resumed'). The guest is left alone
        meanwhile.
        """
        self.migrating.add(name)
        domain = self.domains.get(name)
        if domain is None or not self.enforcing:
            return
        nodes, cpus = self.restrictions.get(name, ((), ()))
        if nodes or cpus:
            self._restore(domain, nodes, cpus, 'before a live migration')

    def _measure(self, listed, now) -> set:
        """Read counters and placement; returns the guests that vanished."""
        error = None
        try:
            counters = self.hv.counters(listed)
        except hv_mod.HypervisorUnavailable:
            raise
        except hv_mod.HypervisorError as exc:
            error, counters = exc, {}
        if error is not None:
            LOG.warning('Could not read counters: %s', error)
        # resctrl memory-bandwidth monitoring, where the host has it.
        self.collector.measure_bandwidth(self.hv, listed, now)
        gone = set()
        for domain in listed:
            error = None
            try:
                cpus = self.hv.vcpu_cpus(domain)
                memory = self.hv.memory_per_node(domain)
            except hv_mod.DomainGone:
                gone.add(domain.name)
                continue
            except hv_mod.HypervisorUnavailable:
                raise
            except Exception as exc:
                error = exc
            if error is not None:
                self.guest_error(domain.name, 'Measuring', error)
                continue
            self.collector.place(
                domain.name,
                collector_mod.cpu_fractions(cpus, self.node_of_cpu), memory)
            self.collector.update(domain.name, counters.get(domain.name),
                                  now)
        return gone

    def guarded(self, domain, what, func, *args):
        """``func(*args)`` for one guest, its failure contained."""
        error = None
        try:
            return func(*args)
        except hv_mod.DomainGone:
            LOG.debug('Domain %s vanished', domain.name)
        except hv_mod.HypervisorUnavailable:
            raise
        except Exception as exc:
            error = exc
        if error is not None:
            self.guest_error(domain.name, what, error)
        return None

    def guest_error(self, name: str, what: str, exc: BaseException) -> str:
        """Contain one guest's failure: count it, log it, go on.

        Logged at WARNING the first time per guest and kind (a bug, not an
        OSError or hypervisor error, with its traceback), at DEBUG after
        that. Returns the one-line reason.
        """
        kind = error_kind(exc)
        self.errors[kind] = self.errors.get(kind, 0) + 1
        reason = '%s: %s' % (kind, exc)
        args = {'what': what, 'guest': name, 'reason': reason}
        if (name, what, kind) in self._warned:
            LOG.debug('%(what)s of %(guest)s failed again (%(reason)s)', args)
        elif isinstance(exc, (hv_mod.HypervisorError, OSError)):
            self._warned.add((name, what, kind))
            LOG.warning('%(what)s of %(guest)s failed, skipped this cycle '
                        '(%(reason)s)', args)
        else:
            self._warned.add((name, what, kind))
            LOG.error('%(what)s of %(guest)s failed, skipped this cycle '
                      '(%(reason)s)', args, exc_info=exc)
        self.record(name, 'failed', '%s failed: %s' % (what, reason))
        return reason

    def record(self, name: str, action: str, outcome: str) -> None:
        """Keep the last action on ``name`` and its outcome (bounded)."""
        _keep_latest(self.outcomes, name, Outcome(action, outcome,
                                                  utc_now()))

    # -- reporting ----------------------------------------------------------

    def guests_per_node(self) -> list:
        counts = [0] * self.topology.size
        guests = self.collector.guests
        for name in self.domains:
            state = guests.get(name)
            for node, mb in (state.memory_items() if state else ()):
                if mb >= 1 and 0 <= node < len(counts):
                    counts[node] += 1
        return counts

    def build_report(self) -> report_mod.Report:
        topology = self.topology
        # Room, as the placer sees it: what guests have yet to touch is
        # not free, so the schedulers plan on what the agent will plan on.
        free = self.room_free()
        total = [node.memory_mb for node in topology.nodes]
        age = 0.0 if self.measured_at is None else min(
            max(self.clock() - self.measured_at, 0.0), report_mod.MAX_AGE)
        return report_mod.build(
            self.host, self.agent_id, version.version_string(), self.seq,
            self.levels, total_mb=total, age=age,
            free_mb=[max(0, min(int(f), t)) for f, t in zip(free, total)],
            guests=self.guests_per_node(),
            cpus=[len(node.cpus) for node in topology.nodes],
            distances=topology.distances,
            # Plan at the edge: the schedulers look requests up in it.
            policy=self.conf.numa_overhead.default_policy,
            max_nodes=self.conf.numa_overhead.default_max_nodes)

    def report(self) -> bool:
        """Build a report and hand it to the publisher now."""
        with self._lock:
            report = self._build()
        return self._publish(report)

    def _build(self):
        """A new report (under the lock), or None if it cannot be built."""
        self.seq += 1
        try:
            report = self.build_report()
        except (report_mod.InvalidReport, hv_mod.HypervisorError) as e:
            LOG.warning('Could not build a report: %s', e)
            return None
        # Changes from now on make the next one due.
        self.dirty = False
        return report

    def _publish(self, report) -> bool:
        """Hand ``report`` to the publisher; never under the lock."""
        if report is None:
            return False
        sent = self.publisher.publish(report)
        with self._lock:
            if sent:
                self.last_report = self.clock()
            else:
                self.dirty = True
        return sent

    def _due_report(self, now):
        period = min(self.opts.report_interval,
                     self.opts.heartbeat_interval)
        due = self.last_report is None or now - self.last_report >= period
        if self.dirty or due:
            return self._build()
        return None

    def maybe_report(self, now=None) -> bool:
        now = self.clock() if now is None else now
        with self._lock:
            report = self._due_report(now)
        return self._publish(report)

    def sync(self) -> None:
        """A scheduler asked for a fresh report."""
        self.report()

    # -- placement ----------------------------------------------------------

    def host_view(self, without: str | None = None) -> planner.HostView:
        """The planner's view of this host, from the agent's measures.

        Free memory per node is room: the memory other guests were given
        and have yet to touch is counted where it will land
        (:mod:`~nova_numa_overhead.overhead.room`). ``without``: a guest
        whose own memory counts as free (it is the one being placed).
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
        free = [max(0, f) for f in room_mod.uncommitted_free(
            free, topology.distances, self.commitments(without=without))]
        return planner.HostView(
            free_mb=free, total_mb=[n.memory_mb for n in topology.nodes],
            guests=guests, overhead=self.levels.overhead_matrix(),
            distances=[list(r) for r in topology.distances],
            local_nodes=tuple(n.id for n in topology.nodes if n.cpus))

    def commitments(self, without: str | None = None) -> list:
        """What every guest but ``without`` was given and has yet to touch,
        with the nodes it may land on and where its vCPUs run.
        """
        out = []
        guests = self.collector.guests
        for name, domain in self.domains.items():
            if name == without:
                continue
            state = guests.get(name)
            touched = state.memory_items() if state else ()
            near = state.near if state else None
            # The agent's own restriction from this cycle on, else the
            # nodeset the guest was listed with.
            nodes = self.restrictions.get(name, ((), ()))[0] or \
                domain.allowed_nodes
            out.append(room_mod.commitment(domain.memory_mb, touched,
                                           nodes, near))
        return out

    def room_free(self) -> list:
        """Free MiB per node once every guest's memory has landed."""
        topology = self.topology
        free = list(self.free_mb or self.hv.free_memory_mb())
        return [max(0, f) for f in room_mod.uncommitted_free(
            free, topology.distances, self.commitments())]

    def protect(self) -> list:
        """Give Nova's nodes back to guests the agent confined to nodes
        that can no longer hold them.

        Guests started after a guest was confined may fill its nodes
        before it has touched all of its memory (the cgroup's OOM killer
        would end it): such a guest is widened to the nodes Nova allows.
        Returns the names of the guests widened.
        """
        if not self.enforcing or self.stepped_back is not None:
            return []
        widened = []
        for name, (nodes, cpus) in list(self.restrictions.items()):
            domain = self.domains.get(name)
            if not nodes or domain is None or name in self.migrating:
                continue
            view = self.host_view(without=name)
            room = room_mod.room(view.free_mb, nodes)
            if room >= domain.memory_mb:
                continue
            nova_nodes = self.nova_allowed.get(name, ())
            if not self.guarded(domain, "Widening to Nova's nodes",
                                self._restore_now, domain, nova_nodes,
                                None):
                continue
            self.restrictions[name] = ((), cpus)
            self._relist(name, nova_nodes)
            self.record(name, 'widened',
                        "ok: Nova's nodes (%s): nodes %s have room for "
                        '%d MiB of its %d MiB besides what other guests '
                        'have yet to touch there' % (
                            _set_text(nova_nodes), _set_text(nodes),
                            room, domain.memory_mb))
            self.write_record(domain)
            LOG.info('Widened %(guest)s to the nodes Nova allows (%(nova)s):'
                     ' nodes %(nodes)s have room for %(room)d of its '
                     '%(mb)d MiB besides what other guests have yet to '
                     'touch', {'guest': name, 'nova': _set_text(nova_nodes),
                               'nodes': _set_text(nodes), 'room': room,
                               'mb': domain.memory_mb})
            widened.append(name)
        return widened

    def on_lifecycle(self, event: str, name: str) -> None:
        """libvirt event callback: queue the event and return.

        Runs on libvirt's event thread (keepalive and every other event
        wait behind it): it takes only the short event lock. The work is
        :meth:`handle_events`'. ``event``: 'started', 'resumed',
        'stopped' or 'migrating'.
        """
        with self._events_lock:
            self._events.pop(name, None)
            self._events[name] = event
        self.dirty = True
        self._wakeup.set()

    def wait_for_events(self, timeout: float | None = None) -> bool:
        """Block until an event is queued (or ``timeout``)."""
        return self._wakeup.wait(timeout)

    def handle_events(self) -> int:
        """Act on the queued events; returns how many there were.

        A guest that started or resumed (including on the destination of a
        live migration) is placed at once; one that stopped is dropped
        from the next report, sent at once.
        """
        with self._events_lock:
            self._wakeup.clear()
            events, self._events = self._events, collections.OrderedDict()
            self.pending.update(name for name, event in events.items()
                                if event in PLACING_EVENTS)
            for name, event in events.items():
                if event == 'started':
                    self.fresh.add(name)
                elif event in PLACING_EVENTS:
                    self.fresh.discard(name)
        leaving = [name for name, event in events.items()
                   if event == 'migrating']
        if leaving:
            with self._lock:
                for name in leaving:
                    self._guarded_migration(name)
        with self._lock:
            for name, event in events.items():
                if event in PLACING_EVENTS:
                    self.migrating.discard(name)
        if len(leaving) < len(events):
            self.cycle()
        return len(events)

    def _guarded_migration(self, name) -> None:
        error = None
        try:
            self.leave_for_migration(name)
        except hv_mod.HypervisorUnavailable as exc:
            error = exc
        if error is not None:
            LOG.debug('Migration of %s: hypervisor unavailable (%s)', name,
                      error)

    def _partly_placed(self, name) -> None:
        """A placement that failed half-way: what it set on the guest
        (its nodeset, maybe its vCPUs) is the agent's restriction, given
        back as any other (before a migration, when it steps back, when
        memory runs short).
        """
        applied = getattr(self.placer, 'applied', None)
        if not applied:
            return
        _nodes, cpus = self.restrictions.get(name, ((), ()))
        self.restrictions[name] = (applied[0], applied[1] or cpus)

    def as_nova_placed(self, domain: hv_mod.DomainInfo):
        """The domain with the nodes Nova allows it, not the agent's."""
        allowed = self.nova_allowed.get(domain.name)
        if allowed is None or allowed == tuple(domain.allowed_nodes):
            return domain
        return dataclasses.replace(domain, allowed_nodes=allowed)

    def place(self, domain: hv_mod.DomainInfo,
              fresh: bool = False) -> placer_mod.Decision:
        """Place ``domain`` (``fresh``: a new QEMU, just started)."""
        if self.stepped_back is not None:
            decision = placer_mod.Decision(
                domain.name, 'skipped', 'the agent steps back: %s'
                % self.stepped_back)
            _keep_latest(self.decisions, domain.name, decision)
            self.record(domain.name, decision.action, _outcome(decision))
            LOG.debug('Placement of %(guest)s: skipped, the agent steps '
                      'back: %(why)s', {'guest': domain.name,
                                        'why': self.stepped_back})
            return decision
        state = self.collector.guests.get(domain.name)
        # A guest the agent confined (its own record; without one, a live
        # nodeset narrower than Nova's) is placed as it was, not left to
        # the kernel with its nodeset still in force.
        confined = bool(self.restrictions.get(domain.name, ((), ()))[0])
        recorded = domain.recorded
        if recorded is None or recorded.host != self.host:
            every = set(range(self.topology.size))
            nova = set(self.nova_allowed.get(domain.name) or every)
            confined = confined or \
                (recorded is None and
                 (set(domain.allowed_nodes) or every) < nova)
        domain = self.as_nova_placed(domain)
        error = None
        try:
            decision = self.placer.place(
                domain, self.host_view(without=domain.name),
                state.cpu if state else {},
                dict(state.memory_mb) if state else {},
                reach=None if confined else
                functools.partial(self.vcpu_reach, domain), fresh=fresh)
        except hv_mod.DomainGone:
            return None
        except hv_mod.HypervisorUnavailable:
            self._partly_placed(domain.name)
            raise
        except Exception as exc:
            error = exc
        if error is not None:
            # Logged outside the except clause (see cycle()).
            reason = self.guest_error(domain.name, 'Placement', error)
            decision = placer_mod.Decision(domain.name, 'failed', reason)
            self._partly_placed(domain.name)
        _keep_latest(self.decisions, domain.name, decision)
        self.count_failures(decision.failed)
        if decision.action != 'failed':
            self.record(domain.name, decision.action,
                        _outcome(decision))
        if decision.action in ('restricted', 'moved'):
            _nodes, cpus = self.restrictions.get(domain.name, ((), ()))
            self.restrictions[domain.name] = (
                tuple(sorted(decision.plan)), tuple(decision.cpus) or cpus)
            left = self.unrestored.get(domain.name)
            if left is not None:
                # The placement replaced the source host's nodeset (and
                # its pins, if it pinned): only the rest is given back.
                left = (left[0], False, left[2] and not decision.cpus)
                if left[1] or left[2]:
                    self.unrestored[domain.name] = left
                else:
                    del self.unrestored[domain.name]
        if decision.action != 'skipped':
            self.write_record(domain)
        if decision.action != 'skipped' or LOG.isEnabledFor(10):
            LOG.info('Placement of %(guest)s: %(action)s, %(reason)s; '
                     'memory %(before)s MiB -> plan %(plan)s MiB, moves '
                     '%(moves)s, overhead %(overhead)s',
                     {'guest': domain.name, 'action': decision.action,
                      'reason': decision.reason, 'before': decision.before,
                      'plan': decision.plan, 'moves': decision.moves,
                      'overhead': decision.overhead})
        if decision.action != 'skipped':
            self.notify('numa_overhead.placement', decision.payload())
        return decision

    def vcpu_reach(self, domain) -> set | None:
        """Nodes whose CPUs the guest's vCPUs may run on now (their
        affinity), or None when libvirt does not say.
        """
        # CPUs the topology does not list (offline ones in libvirt's maps)
        # are not somewhere the vCPUs can run.
        node_of = self.topology.node_of_cpu()
        error = None
        try:
            cpus = self.hv.vcpu_affinity(domain)
            return {node_of[c] for c in cpus or () if c in node_of} or None
        except (hv_mod.DomainGone, hv_mod.HypervisorUnavailable):
            raise
        except Exception as exc:
            error = exc
        # Logged outside the except clause (see cycle()); once per kind.
        kind = error_kind(error)
        log = LOG.debug if ('affinity', kind) in self._warned \
            else LOG.warning
        self._warned.add(('affinity', kind))
        log('Could not read the vCPU affinity of %(guest)s, placed as if '
            'its vCPUs stayed where they run (%(kind)s: %(error)s)',
            {'guest': domain.name, 'kind': kind, 'error': error})
        return None

    def _judge_placement(self, domain, cpu, before, shares):
        """The optimizer's verdict on a plan; its failure leaves the
        placer's rule standing (logged once per kind of error).
        """
        error = None
        try:
            return self.optimizer.judge(domain.name, cpu, before, shares)
        except hv_mod.HypervisorUnavailable:
            raise
        except Exception as exc:
            error = exc
        kind = error_kind(error)
        if ('judge', kind) not in self._warned:
            self._warned.add(('judge', kind))
            LOG.error('Judging the placement of %(guest)s failed, the '
                      'placer\'s plan stands (%(kind)s: %(error)s)',
                      {'guest': domain.name, 'kind': kind, 'error': error},
                      exc_info=error)
        return None

    def pages_allowed(self, mb: float) -> int:
        """Take up to ``mb`` MiB from the ``migrate_rate_mb_per_s`` budget
        (shared by the placer, the rebalancer and the optimizer; all of it
        when the rate is unlimited) and return them as pages.
        """
        return int(self.rate.take(mb) / placer_mod.page_mb())

    def count_failures(self, failed: dict) -> None:
        """Add the pages a move could not move, per errno name, to
        ``self.failures``.
        """
        for name, count in (failed or {}).items():
            self.failures[name] = self.failures.get(name, 0) + count

    def notify(self, event_type: str, payload: dict) -> None:
        """Send a notification, with ``host`` added to the payload; never
        fails the caller.
        """
        if self.notifier is None:
            return
        try:
            self.notifier.info({}, event_type, dict(payload, host=self.host))
        except Exception as exc:
            LOG.debug('Notification %s not sent: %s', event_type, exc)

    # -- rebalancing --------------------------------------------------------

    def rebalanced(self, name: str, domain) -> bool:
        """Whether the agent may move ``name`` after its placement (the
        rebalancer, the optimizer): managed, its flavor allows it, not
        being live-migrated.
        """
        if name in self.migrating:
            return False
        policy, _ = placer_mod.guest_policy(
            domain, self.opts.managed_guests,
            self.conf.numa_overhead.default_policy,
            self.conf.numa_overhead.default_max_nodes)
        return policy is not None and policy.rebalance

    def managed_guests(self) -> list:
        views = []
        for name, domain in self.domains.items():
            if not self.rebalanced(name, domain):
                continue
            if self.restrictions.get(name, ((), ()))[1]:
                # Its vCPUs were placed with its memory (the optimizer):
                # page moves alone would undo that plan.
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
            if self.levels is None or self.opts.enforcement == 'off' or \
                    self.stepped_back is not None:
                return []
            guests = self.managed_guests()
            moves = rebalancer.plan_moves(
                guests, self.levels.overhead_matrix(), self.room_free(),
                self.opts.rebalance_threshold,
                self.opts.max_move_mb_per_period, self.opts.reserve_mb,
                [node.memory_mb for node in self.topology.nodes])
            try:
                for move in moves:
                    self._apply(move)
            except hv_mod.HypervisorUnavailable as exc:
                # The sampling cycle reconnects.
                LOG.debug('Rebalancing stopped: %s', exc)
            return moves

    def _apply(self, move: rebalancer.Move) -> None:
        domain = self.domains.get(move.guest)
        payload = {'guest': move.guest, 'from': move.src, 'to': move.dst,
                   'mb': move.mb, 'reason': move.reason}
        if domain is None:
            return
        if self.opts.enforcement == 'pages':
            pages = self.pages_allowed(move.mb)
            error = None
            try:
                domain = self._widen(domain, move.dst)
                result = self.hv.move_pages(domain,
                                            [(move.src, move.dst, move.mb)],
                                            pages)
            except hv_mod.DomainGone:
                return
            except hv_mod.HypervisorUnavailable:
                raise
            except Exception as exc:
                error = exc
            if error is not None:
                self.guest_error(move.guest, 'Rebalance', error)
                return
            payload['moved_pages'] = result.moved
            payload['failed'] = dict(result.failed)
            self.count_failures(result.failed)
            action = 'moved'
            self.record(move.guest, 'rebalanced', 'ok: %d of %d pages '
                        'node %d -> %d%s' % (
                            result.moved, result.requested, move.src,
                            move.dst, _failed_text(result.failed)))
            self.write_record(domain)
        else:
            action = 'would move (enforcement=%s)' % self.opts.enforcement
        LOG.info('Rebalance %(action)s %(mb)d MiB of %(guest)s from node '
                 '%(src)d to node %(dst)d: %(reason)s',
                 {'action': action, 'mb': move.mb, 'guest': move.guest,
                  'src': move.src, 'dst': move.dst, 'reason': move.reason})
        self.notify('numa_overhead.rebalance', payload)

    def _widen(self, domain, node):
        """Add ``node`` to a nodeset the agent narrowed, so pages can go
        there; never beyond what Nova allows.
        """
        # The agent's own restriction is newer than the listing (a
        # placement or a move since the last sample).
        restricted, _cpus = self.restrictions.get(domain.name, ((), ()))
        current = tuple(restricted or domain.allowed_nodes)
        nova = self.nova_allowed.get(domain.name, ())
        if not current or node in current or (nova and node not in nova):
            return domain
        nodes = tuple(sorted(set(current) | {node}))
        self.hv.set_nodeset(domain, nodes)
        _nodes, cpus = self.restrictions.get(domain.name, ((), ()))
        self.restrictions[domain.name] = (nodes, cpus)
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
            if self.stepped_back is not None:
                return []
            for guest in self.managed_guests():
                domain = self.domains.get(guest.name)
                if domain is None or guest.action == 'leave':
                    continue
                state = self.collector.guests.get(guest.name)
                view = self.host_view(without=guest.name)
                better = self.guarded(domain, 'Co-location',
                                      self.placer.better_home,
                                      self.as_nova_placed(domain), view,
                                      state.cpu)
                if better is None:
                    continue
                decision = self.place(domain)
                if decision is not None and decision.cpus:
                    # Its vCPUs moved (a plan where they run is no move).
                    return [guest.name]
        return []


def _keep_latest(table: dict, name: str, value) -> None:
    """``table[name] = value`` as its newest entry; the oldest go past
    MAX_DECISIONS.
    """
    table.pop(name, None)
    table[name] = value
    while len(table) > MAX_DECISIONS:
        del table[next(iter(table))]


def _set_text(ids) -> str:
    return ','.join(str(i) for i in ids) if ids else 'all'


def _failed_text(failed: dict) -> str:
    if not failed:
        return ''
    return ', not moved: %s' % ', '.join(
        '%s %d' % (name, count) for name, count in sorted(failed.items()))


def _outcome(decision: placer_mod.Decision) -> str:
    """One line on how a placement went."""
    if decision.action in ('skipped', 'planned'):
        return decision.reason
    text = 'ok: %s' % decision.reason
    if decision.moves:
        text += ', %.0f MiB moved%s' % (decision.moved_mb,
                                        _failed_text(decision.failed))
    return text
