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
"""The agent's cost model: predicted time, not levels.

The four levels (Figure 4) are what agents report to the schedulers. The
agent's own decisions (moving a guest's vCPUs and memory) are taken on a
prediction of every guest's speed, in the currency the issue asks for:
instructions per second, from what the agent measures.

For every guest the model keeps what was measured over the last samples:
instructions and cycles per second, LLC references and misses per
instruction, the share of cycles stalled on memory (measured where the
host has the stalled-cycles event, else estimated, ``MISS_CYCLES``), where
its vCPUs run and where its pages are. A guest's time per instruction is
split into a core part and a memory part; a candidate placement changes

* its CPU share: vCPUs beyond a node's hardware threads wait, a second
  thread on a core adds ``SMT_YIELD`` of a core;
* without the stalled-cycles event, the stall share is the larger of what
  the LLC misses explain (``MISS_CYCLES`` each) and, for a
  memory-intensive guest, the CPI beyond ``CORE_CPI``; for a guest that is
  not memory-intensive the optimizer may pass a stall share learned from
  the guest's own samples instead (its ``GuestLoad.stall``, as if
  measured: :meth:`~nova_numa_overhead.compute.optimizer.Optimizer.loads`);
* its LLC misses: the node's LLC is shared by the memory-intensive vCPUs
  running there (as many fit as its size holds working sets of
  ``WORKING_SET_MB``; where the host does not say its LLC's size,
  ``LLC_VCPUS_PER_CORE`` per core);
* its memory stalls: latency of each (vCPU node, memory node) pair (the
  probe's matrix, else SLIT), stretched by the queueing of the memory
  controllers and links it uses (``1 + rho^3 / (1 - rho)``), with their
  bandwidth from the probe or ``node_bandwidth_mbps`` (a probe's matrix
  measured with fewer concurrent streams than a node has CPUs gives
  ratios only: :meth:`HostModel.build`).

Each of these also changes what the guest's neighbours get, so a move is
scored on the sum of every guest's relative speed change.

Floating vCPUs (a guest whose vCPUs may run on CPUs of several nodes,
``GuestLoad.reach``) do not stay where a move crowds them: the kernel's
load balancer moves them (:meth:`Model.balance`). A guest a change pins
stays where it is pinned; a change may also leave a guest's vCPUs to the
kernel (``cpu`` None): a guest that does not float now (pinned to fewer
CPUs than Nova allows it, by the agent or since it started, or whose
affinity is unknown) floats from then on over the nodes of the CPUs Nova
allows it (``GuestLoad.release``), and the balancer moves its vCPUs off
a node with more runnable vCPUs than cores as it moves any floating
guest's. A guest pinned by Nova, or by the agent to fewer CPUs than Nova
allows (several nodes included: the simulator keeps such a split too,
where the kernel would balance within it), keeps its split unless a
change leaves it to the kernel.

The constants are documented assumptions, not fitted to the simulator;
the closed loop (:mod:`nova_numa_overhead.compute.optimizer`) undoes what
the model misjudged.
"""

import dataclasses
import math

SMT_YIELD = 0.3          # a second hardware thread: +30% of a core
LLC_VCPUS_PER_CORE = 0.4  # memory-intensive working sets an LLC holds
# The LLC (MiB) a memory-intensive vCPU's working set takes, for hosts
# whose LLC size is known (libvirt's capabilities): LLC_VCPUS_PER_CORE on
# the papers' host (18 MiB of LLC for 8 cores). LLCs range from under 1
# MiB to several MiB per core: a constant per core misjudges the room of
# most hosts, the smallest several times over.
WORKING_SET_MB = 18.0 / (8 * LLC_VCPUS_PER_CORE)
MISS_CYCLES = 50.0       # stall per local LLC miss when not measured
CORE_CPI = 0.8           # cycles per instruction of a core not stalled
MAX_STALL = 0.9          # share of cycles a guest can be stalled
HIT_CAP = 0.98           # LLC hit rate the model counts at most
RHO_MAX = 0.95
CONVERGED = 1e-4         # predictions settled: no further iteration
RHO_SEEN = 0.8           # utilisation assumed at most where traffic is seen
QUEUE_KNEE = 3           # latency stays flat at low utilisation
LINK_FRACTION = 0.4      # link bandwidth / controller bandwidth, unknown
CACHE_LINE = 64
IMBALANCE_PCT = 117      # the kernel's imbalance_pct between NUMA nodes
EPSILON = 1e-9
MEMORY_INTENSIVE_RPKI = 3.0   # LLC references per 1,000 instructions


@dataclasses.dataclass(frozen=True)
class HostModel:
    """What the agent knows of the host's hardware."""

    cores: tuple              # physical cores per node
    threads: tuple            # hardware threads per node
    latency: tuple            # relative latency [cpu node][memory node]
    bandwidth_mbps: tuple     # memory controllers of each node, MB/s
    link_mbps: tuple          # [cpu node][memory node], MB/s
    llc_room: tuple = ()      # memory-intensive vCPUs each node's LLC fits

    @property
    def size(self) -> int:
        return len(self.cores)

    @classmethod
    def build(cls, cpus, distances, bandwidth_mbps, cores=None,
              latency_ns=None, matrix_mbps=None, llc_mb=None,
              matrix_streams=None) -> 'HostModel':
        """From the topology: CPUs per node, SLIT, the bandwidth option,
        the probe's matrix where it was measured, the LLC per node (MiB)
        where it is known.

        ``matrix_mbps`` is taken as capacities (the diagonal the memory
        controllers', the rest the links') only when every measured row
        was measured by as many concurrent streams as its node has CPUs
        (``matrix_streams``, per node; None: one stream each, an old
        probe file). Otherwise (``--streams``, a probe confined by a
        cpuset or affinity to some of a node's CPUs, an old file) what
        one or a few streams move is a fraction of a controller, and the
        matrix gives ratios only: it is
        scaled so that its largest diagonal cell is ``bandwidth_mbps``
        (:func:`partial_rows`).
        """
        n = len(cpus)
        # A node the probe could not measure (no CPUs) has a None row; a
        # cell that is not a positive number (NaN from a failed cell) is
        # unmeasured too: 0.0, which falls back to SLIT and the option.
        latency_ns = [[_measured(v) for v in r] if r else [0.0] * n
                      for r in latency_ns] if latency_ns else None
        matrix_mbps = [[_measured(v) for v in r] if r else [0.0] * n
                       for r in matrix_mbps] if matrix_mbps else None
        if matrix_mbps and partial_rows(cpus, matrix_mbps, matrix_streams):
            matrix_mbps = _scaled(matrix_mbps, float(bandwidth_mbps))
        cores = tuple(cores) if cores else tuple(cpus)
        threads = tuple(max(t, c) for t, c in zip(cpus, cores))
        if latency_ns:
            lat = [[float(latency_ns[i][j] or 0.0) for j in range(n)]
                   for i in range(n)]
            for i in range(n):
                # An unmeasured diagonal from a measured cell of its row
                # through SLIT: the row's cells stay in one unit (ns).
                known = [j for j in range(n) if lat[i][j] > 0]
                if lat[i][i] <= 0 and known:
                    j = known[0]
                    lat[i][i] = lat[i][j] * distances[i][i] / \
                        distances[i][j]
                for j in range(n):
                    if lat[i][j] <= 0:
                        lat[i][j] = distances[i][j] / 10.0 * (
                            lat[i][i] or 1.0)
            local = [lat[i][i] or 1.0 for i in range(n)]
            latency = tuple(tuple(lat[i][j] / local[i] for j in range(n))
                            for i in range(n))
        else:
            latency = tuple(tuple(distances[i][j] / 10.0 for j in range(n))
                            for i in range(n))
        bw = [float(bandwidth_mbps)] * n
        if matrix_mbps:
            for i in range(n):
                if matrix_mbps[i][i]:
                    bw[i] = float(matrix_mbps[i][i])
        link = [[(float(matrix_mbps[i][j]) if matrix_mbps and
                  matrix_mbps[i][j] else min(bw[i], bw[j]) * LINK_FRACTION)
                 for j in range(n)] for i in range(n)]
        room = tuple(
            float(llc_mb[i]) / WORKING_SET_MB
            if llc_mb and i < len(llc_mb) and llc_mb[i] and llc_mb[i] > 0
            else float(cores[i]) * LLC_VCPUS_PER_CORE for i in range(n))
        return cls(cores=tuple(float(c) for c in cores),
                   threads=tuple(float(t) for t in threads),
                   llc_room=room,
                   latency=latency, bandwidth_mbps=tuple(bw),
                   link_mbps=tuple(tuple(r) for r in link))


def _measured(value) -> float:
    """``value`` as a float if it is a finite positive number, else 0.0
    (unmeasured).
    """
    try:
        value = float(value)
    except (TypeError, ValueError):
        return 0.0
    return value if math.isfinite(value) and value > 0 else 0.0


def partial_rows(cpus, matrix_mbps, streams) -> tuple:
    """Nodes whose row of ``matrix_mbps`` was measured by fewer concurrent
    streams than the node has CPUs (``cpus``: how many per node;
    ``streams``: per node, None for one stream each, an old probe file);
    rows without a measured cell do not count.
    """
    out = []
    for i, count in enumerate(cpus):
        row = matrix_mbps[i] if i < len(matrix_mbps) else None
        if not row or not any(v and v > 0 for v in row):
            continue
        measured = streams[i] if streams and i < len(streams) else None
        if (measured or 1) < count:
            out.append(i)
    return tuple(out)


def _scaled(matrix_mbps, bandwidth_mbps) -> list:
    """``matrix_mbps`` times the factor that makes its largest diagonal
    cell (largest cell, without one) ``bandwidth_mbps``.
    """
    local = [row[i] for i, row in enumerate(matrix_mbps)
             if i < len(row) and row[i] and row[i] > 0]
    cells = local or [v for row in matrix_mbps for v in row if v and v > 0]
    if not cells:
        return matrix_mbps
    factor = bandwidth_mbps / max(cells)
    return [[v * factor if v and v > 0 else v for v in row]
            for row in matrix_mbps]


@dataclasses.dataclass(frozen=True)
class GuestLoad:
    """One guest as measured: rates per second and where it is."""

    name: str
    vcpus: int
    cpu: dict                 # node -> fraction of its vCPUs
    memory: dict              # node -> fraction of its pages
    ips: float                # instructions per second
    cpi: float                # cycles per instruction (while running)
    rpi: float                # LLC references per instruction
    mpi: float                # LLC misses per instruction
    stall: float | None = None  # share of cycles stalled, if measured
    #                             (or learned: see the module's doc)
    measured_mbps: float | None = None  # resctrl bandwidth, if measured
    # Nodes between which the kernel's load balancer moves its vCPUs (a
    # floating guest: its affinity spans them); () = they stay.
    reach: tuple = ()
    # Nodes between which it would move them were they left to it (the
    # nodes of the CPUs Nova allows the guest); () = they would stay
    # (Nova pinned them, or those CPUs are on one node), or the guest
    # floats already (its reach says where).
    release: tuple = ()

    @property
    def intensive(self) -> bool:
        return intensive(self.rpi)

    @property
    def traffic_mbps(self) -> float:
        """Its memory traffic: measured (resctrl) where the host has it,
        else its LLC misses in cache lines.
        """
        if self.measured_mbps is not None:
            return self.measured_mbps
        return self.ips * self.mpi * CACHE_LINE / 1e6


def _carrying(host: HostModel, agg) -> HostModel:
    """``host`` with no controller or link slower than the traffic it is
    measured to carry: a node seen moving X MB/s has at least X / RHO_SEEN
    of bandwidth, whatever the option (or a stale probe) says.
    """
    n = host.size
    bw = tuple(max(host.bandwidth_mbps[j], agg['ctrl'][j] / RHO_SEEN)
               for j in range(n))
    link = tuple(tuple(max(host.link_mbps[i][j],
                           agg['link'].get((i, j), 0.0) / RHO_SEEN)
                       for j in range(n)) for i in range(n))
    if bw == host.bandwidth_mbps and link == host.link_mbps:
        return host
    return dataclasses.replace(host, bandwidth_mbps=bw, link_mbps=link)


def _flows(cpu, mem) -> tuple:
    """Where a guest placed on ``cpu``, ``mem`` sends its traffic, in the
    order :func:`_add_traffic` adds it: (memory node, share of its pages,
    ((link, share of its vCPUs) from each other node its vCPUs are on)).
    """
    return tuple((j, m, tuple(((i, j), f) for i, f in cpu.items()
                              if i != j))
                 for j, m in mem.items())


def _add_traffic(ctrl, link, flows, traffic) -> None:
    """``traffic`` (MB/s) of a guest to its memory nodes' controllers
    (``ctrl``) and the links from its vCPUs' nodes (``link``), along its
    ``flows`` (:func:`_flows`).
    """
    for j, m, links in flows:
        ctrl[j] += traffic * m
        for pair, f in links:
            link[pair] = link.get(pair, 0.0) + traffic * f * m


def _speed_of(core, latency) -> float:
    """A guest's speed (:meth:`Model._speed`) from what
    :meth:`Model._core` gives and its mean ``latency``.
    """
    share, cpi, memory, lat0 = core
    return share / max(cpi + memory * latency / lat0, 1e-6)


def _queue(rho: float) -> float:
    """Loaded latency / idle latency at utilisation ``rho``: flat while
    the controller or link is lightly used, steep near saturation (the
    knee of measured bandwidth-latency curves), ``1 + rho^3 / (1 - rho)``.
    """
    rho = min(max(rho, 0.0), RHO_MAX)
    return 1.0 + rho ** QUEUE_KNEE / (1.0 - rho)


class Model:
    """Predicts every guest's speed for a change of one or more guests'
    placement, relative to now.
    """

    def __init__(self, host: HostModel, guests):
        self.host = host
        self.guests = {g.name: g for g in guests}
        # name -> (memory traffic at today's speed, memory-intensive)
        self._kind = {g.name: (g.traffic_mbps, g.intensive) for g in guests}
        self.now = {g.name: (dict(g.cpu), dict(g.memory)) for g in guests}
        # Nodes the host has CPUs on: the only ones vCPUs can go to.
        usable = {i for i in range(host.size) if host.threads[i] > 0}
        self.reach = {}
        # Those a change leaving them to the kernel (``cpu`` None) sets
        # floating (pinned now, by the agent or since they started).
        self.release = {}
        for g in guests:
            reach = tuple(sorted(usable.intersection(g.reach)))
            if len(reach) > 1:
                self.reach[g.name] = reach
                continue
            release = tuple(sorted(usable.intersection(g.release)))
            if len(release) > 1:
                self.release[g.name] = release
        self._base = self._aggregates(self.now)
        self.host = host = _carrying(host, self._base)
        self._ref = {name: self._reference(name) for name in self.guests}
        self._speed_now = {name: self._speed(name, self.now, self._base)
                           for name in self.guests}
        # Predictions compare with now as the kernel's balancer leaves it
        # (as measured, unless the measured split is not one it would
        # keep): a change that moves nothing predicts no change.
        self.settled = self.balance(self.now)
        if self.settled == self.now:
            self._settled_base = self._base
            self._speed_settled = self._speed_now
        else:
            self._settled_base = self._aggregates(self.settled)
            self._speed_settled = {
                name: self._speed(name, self.settled, self._settled_base)
                for name in self.guests}
        # Where each guest's traffic goes as settled: most guests a
        # prediction reaches stay there.
        self._flows_settled = {name: _flows(cpu, mem)
                               for name, (cpu, mem) in self.settled.items()}

    # -- node aggregates ----------------------------------------------------

    def _aggregates(self, placement, speeds=None, base=None,
                    flows=None) -> dict:
        """Per node: vCPU demand, LLC pressure, controller traffic; per
        (cpu node, memory node): link traffic. ``base``: aggregates of
        the guests not in ``placement``, added to; ``flows``: name ->
        :func:`_flows` of its placement, where known.
        """
        n = self.host.size
        if base is None:
            agg = {'demand': [0.0] * n, 'pressure': [0.0] * n,
                   'ctrl': [0.0] * n, 'link': {}}
        else:
            agg = {'demand': list(base['demand']),
                   'pressure': list(base['pressure']),
                   'ctrl': list(base['ctrl']), 'link': dict(base['link'])}
        for name, (cpu, mem) in placement.items():
            self._add(agg, name, cpu, mem,
                      (speeds or {}).get(name, 1.0),
                      flows=(flows or {}).get(name))
        return agg

    def _add(self, agg, name, cpu, mem, scale, sign=1.0,
             flows=None) -> None:
        """One guest's share of the aggregates (``sign`` -1: taken off;
        ``flows``: :func:`_flows` of ``cpu``, ``mem``, where known).
        """
        vcpus = self.guests[name].vcpus
        traffic, intensive = self._kind[name]
        demand, pressure = agg['demand'], agg['pressure']
        for i, f in cpu.items():
            demand[i] += sign * vcpus * f
            if intensive:
                pressure[i] += sign * vcpus * f
        if flows is None:
            flows = _flows(cpu, mem)
        _add_traffic(agg['ctrl'], agg['link'], flows,
                     traffic * scale * sign)

    @staticmethod
    def _traffic(flows, speeds, base) -> dict:
        """Controller and link traffic of guests ((traffic today,
        :func:`_flows`) each) at ``speeds`` (the scale of today's, in the
        same order), added to ``base``'s: the part of :meth:`_aggregates`
        that speeds change, in the same order (the same sums).
        """
        ctrl, link = list(base['ctrl']), dict(base['link'])
        for (traffic, paths), speed in zip(flows, speeds):
            _add_traffic(ctrl, link, paths, traffic * speed)
        return {'ctrl': ctrl, 'link': link}

    # -- one guest ------------------------------------------------------------

    def _terms(self, agg) -> dict:
        """Per node (and node pair) terms of ``agg``, computed once: every
        guest on a node shares them.
        """
        terms = agg.get('terms')
        if terms is not None:
            return terms
        host = self.host
        n = host.size
        cpu = []
        fit = []
        for node in range(n):
            demand = agg['demand'][node]
            cores = host.cores[node]
            if demand <= 0:
                cpu.append((1.0, 1.0))
            else:
                running = min(demand, host.threads[node])
                extra = max(running - cores, 0.0)
                eff = min(running, cores + SMT_YIELD * extra)
                cpu.append((running / demand, eff / running))
            room = host.llc_room[node] if host.llc_room else \
                cores * LLC_VCPUS_PER_CORE
            pressure = agg['pressure'][node]
            fit.append(1.0 if pressure <= room else room / pressure)
        terms = agg['terms'] = {'cpu': cpu, 'fit': fit}
        terms.update(self._queues(agg))
        return terms

    def _queues(self, traffic) -> dict:
        """The queueing terms of ``traffic`` (aggregates, or what
        :meth:`_traffic` gives): per memory node, per (cpu node, memory
        node).
        """
        host = self.host
        ctrl = [_queue(t / bw)
                for t, bw in zip(traffic['ctrl'], host.bandwidth_mbps)]
        link = {}
        for (i, j), t in traffic['link'].items():
            link[(i, j)] = _queue(t / host.link_mbps[i][j])
        return {'ctrl': ctrl, 'link': link}

    def _cpu(self, node: int, agg) -> tuple:
        """(run share, SMT factor) of a vCPU on ``node``."""
        return self._terms(agg)['cpu'][node]

    def _fit(self, node: int, agg) -> float:
        return self._terms(agg)['fit'][node]

    def _pairs(self, cpu, mem) -> tuple:
        """The (cpu node, memory node) pairs of a placement, in the order
        :meth:`_latency` sums them: (memory node, link or None where
        local, share of its accesses, idle latency).
        """
        latency = self.host.latency
        return tuple((j, (i, j) if i != j else None, f * m, latency[i][j])
                     for j, m in mem.items() for i, f in cpu.items())

    @staticmethod
    def _latency(pairs, queues) -> float:
        """Mean latency of the accesses of ``pairs`` (:meth:`_pairs`),
        with the ``queues`` (:meth:`_queues`) of the traffic.
        """
        ctrl, link = queues['ctrl'], queues['link']
        total = 0.0
        for j, pair, share, idle in pairs:
            lat = idle * ctrl[j]
            if pair is not None:
                lat *= link.get(pair, 1.0)
            total += share * lat
        return total

    def _reference(self, name) -> tuple:
        """What does not change with a candidate: (core CPI, stall share,
        LLC hit rate, fit and latency now).
        """
        g = self.guests[name]
        cpu0, mem0 = self.now[name]
        base = self._base
        fit0 = sum(f * self._fit(i, base) for i, f in cpu0.items())
        smt0 = sum(f * self._cpu(i, base)[1] for i, f in cpu0.items())
        # Cycles per instruction a full core would need now.
        cpi = max(g.cpi, 1e-3) * max(smt0, 1e-3)
        lat0 = max(self._latency(self._pairs(cpu0, mem0),
                                 self._terms(base)), 1e-6)
        if g.stall is not None:
            stall = min(max(g.stall, 0.0), MAX_STALL)
        else:
            # Without the stall counter: what the misses explain, or
            # what the CPI shows beyond a core's (top-down's rule of
            # thumb: a CPI well above 1 is memory-bound), the larger.
            stall = min(max(g.mpi * MISS_CYCLES * lat0 / cpi,
                            1.0 - CORE_CPI / cpi if g.intensive else 0.0),
                        MAX_STALL)
        # No LLC reference counted (a host without the cache events): its
        # hit rate unknown, 0, and its misses do not change with the LLC.
        hit0 = 1.0 - min(g.mpi / g.rpi, 1.0) if g.rpi > 0 else 0.0
        return cpi, stall, hit0, max(fit0, 1e-6), lat0

    def _core(self, name, cpu, agg) -> tuple:
        """The parts of one guest's speed, its vCPUs on ``cpu``, that the
        memory traffic does not change: (run share times SMT factor; the
        core part and the memory part of its cycles per instruction, the
        latter at its latency now; that latency).
        """
        terms = self._terms(agg)
        run = smt = fit = 0.0
        for i, f in cpu.items():
            r, s = terms['cpu'][i]
            run += f * r
            smt += f * s
            fit += f * terms['fit'][i]
        cpi, stall, hit0, fit0, lat0 = self._ref[name]
        # Hit rates above HIT_CAP count as HIT_CAP, now and after: the
        # misses change by a bounded factor, and by none at the same fit.
        hit0 = min(hit0, HIT_CAP)
        hit = min(max(hit0 * fit / fit0, 0.0), HIT_CAP) if hit0 > 0 else 0.0
        misses = (1.0 - hit) / (1.0 - hit0)
        return run * smt, cpi * (1.0 - stall), cpi * stall * misses, lat0

    def _speed(self, name, placement, agg) -> float:
        """Instructions per second of one guest, up to a constant."""
        cpu, mem = placement[name]
        lat = self._latency(self._pairs(cpu, mem), self._terms(agg))
        return _speed_of(self._core(name, cpu, agg), lat)

    # -- predictions ----------------------------------------------------------

    def predict(self, changes: dict, iterations: int = 10) -> dict:
        """Name -> predicted speed / speed now, for the guests a change
        reaches (those sharing a node with it or whose floating vCPUs the
        kernel moves; the others keep 1.0), when the guests in
        ``changes`` (name -> (cpu, memory)) move. A ``cpu`` pins the
        guest's vCPUs there; None leaves them to the kernel (where they
        run, balanced if the guest has a reach or, pinned now, a
        release: unpinned, they float).
        """
        settled = self.settled
        placement = dict(settled)
        pinned = set()
        freed = {}
        for name, (cpu, mem) in changes.items():
            if cpu is None:
                placement[name] = (settled[name][0], mem)
                if name in self.release:
                    freed[name] = self.release[name]
            else:
                placement[name] = (cpu, mem)
                pinned.add(name)
        if pinned or freed:
            placement = self.balance(placement, pinned, freed)
        nodes = set()
        for name, (cpu, mem) in placement.items():
            cpu0, mem0 = settled[name]
            if name in changes or cpu is not cpu0 and cpu != cpu0 or \
                    mem is not mem0 and mem != mem0:
                nodes.update(cpu, mem, cpu0, mem0)
        reached = [name for name, (cpu, mem) in placement.items()
                   if nodes.intersection(cpu) or nodes.intersection(mem)]
        # The guests not reached keep their place and speed: their share
        # of the aggregates is today's, summed once.
        rest = self._aggregates({}, base=self._settled_base)
        settled_flows = self._flows_settled
        for name in reached:
            cpu0, mem0 = settled[name]
            self._add(rest, name, cpu0, mem0, 1.0, sign=-1.0,
                      flows=settled_flows[name])
        moving = {name: placement[name] for name in reached}
        flows = {name: settled_flows[name] if place is settled[name]
                 else _flows(*place) for name, place in moving.items()}
        # First at today's traffic, then with the traffic the predicted
        # speeds bring (damped: faster guests load the controllers more).
        # Only the traffic changes between iterations: the CPU and LLC
        # terms, and each guest's speed but its latency (:meth:`_core`),
        # are computed once; a latency once per iteration for the guests
        # placed alike (``pairs``: :meth:`_pairs` -> its index in the
        # list of distinct ones). Lists in the order of ``reached``.
        agg = self._aggregates(moving, base=rest, flows=flows)
        pairs = {}
        guests = [(self._core(name, cpu, agg),
                   pairs.setdefault(self._pairs(cpu, mem), len(pairs)),
                   self._speed_settled[name])
                  for name, (cpu, mem) in moving.items()]
        pairs = list(pairs)
        flows = [(self._kind[name][0], flows[name]) for name in reached]
        ratios = self._ratios(guests, pairs, self._terms(agg))
        for _ in range(iterations):
            new = self._ratios(guests, pairs, self._queues(
                self._traffic(flows, ratios, rest)))
            step = max((abs(n - r) for r, n in zip(ratios, new)),
                       default=0.0)
            ratios = [0.5 * r + 0.5 * n for r, n in zip(ratios, new)]
            if step < CONVERGED:
                break
        return dict(zip(reached, ratios))

    def balance(self, placement: dict, pinned: set | tuple = (),
                freed=None) -> dict:
        """``placement`` as the kernel's load balancer leaves it: the
        floating vCPUs (of the guests with a ``reach`` and of those
        ``freed``, name -> the nodes they float over once unpinned; not
        of those in ``pinned``) move, a whole vCPU at a time, from a node
        with more runnable vCPUs than cores to the nearest node with an
        idle core; with no idle core left, from the node with the most
        runnable vCPUs per CPU to the one with the fewest, while the first has
        more than IMBALANCE_PCT percent of the second's and the move does
        not overshoot (find_busiest_group and calculate_imbalance between
        NUMA nodes); a node whose floating vCPUs cannot go anywhere is
        passed over (LBF_ALL_PINNED). Until no such move is left: the
        result is balanced again unchanged. The vCPU moved is of the
        guest with the least of its memory on the busy node. As the
        simulator's kernel: every vCPU counts as runnable (the kernel
        weighs runnable load, an idle vCPU little) and a node is idle
        while a core is (the kernel counts hardware threads). A new dict;
        the entries not moved are the same objects.
        """
        reach = dict(self.reach, **(freed or {}))
        floating = sorted(name for name in reach
                          if name not in pinned and name in placement)
        if not floating:
            return placement
        balancer = _Balancer(self, placement, floating, reach)
        balancer.run()
        if not balancer.moved:
            return placement
        out = dict(placement)
        for name in balancer.moved:
            vcpus = float(self.guests[name].vcpus)
            out[name] = ({i: c / vcpus
                          for i, c in sorted(balancer.count[name].items())
                          if c > EPSILON}, placement[name][1])
        return out

    def _ratios(self, guests, pairs, queues) -> list:
        """Speed / speed settled of each of ``guests`` ((core part, index
        in ``pairs``, speed settled): :meth:`predict`) with ``queues``.
        """
        latency = [self._latency(p, queues) for p in pairs]
        return [_speed_of(core, latency[k]) / now if now > 0 else 1.0
                for core, k, now in guests]

    def gain(self, changes: dict) -> float:
        """Sum over guests of the relative speed change (guests' share of
        the host's throughput, each guest counting once).
        """
        return sum(r - 1.0 for r in self.predict(changes).values())


class _Balancer:
    """:meth:`Model.balance`'s state: runnable vCPUs per node, floating
    vCPUs per guest and node, the guests with a whole vCPU on each node.
    """

    def __init__(self, model, placement, floating, reach):
        self.host = model.host
        self.reach = reach
        self.placement = placement
        n = self.host.size
        self.load = [0.0] * n
        for name, (cpu, _mem) in placement.items():
            vcpus = model.guests[name].vcpus
            for i, f in cpu.items():
                self.load[i] += vcpus * f
        self.count = {}
        self.on = [set() for _ in range(n)]
        for name in floating:
            vcpus = model.guests[name].vcpus
            self.count[name] = {i: vcpus * f
                                for i, f in placement[name][0].items()}
            for i in self.count[name]:
                self._update(name, i)
        # Each move evens the load: a bound, never reached.
        self.steps = 2 * int(sum(model.guests[name].vcpus
                                 for name in floating)) + 1
        self.moved = set()

    def _update(self, name, node) -> None:
        if self.count[name].get(node, 0.0) >= 1.0 - EPSILON:
            self.on[node].add(name)
        else:
            self.on[node].discard(name)

    def run(self) -> None:
        for _ in range(self.steps):
            if not (self._to_idle() or self._between_busy()):
                return

    def _busy(self) -> list:
        cores = self.host.cores
        return [i for i in range(self.host.size)
                if self.load[i] > cores[i] + EPSILON and self.on[i]]

    def _reachable(self, src) -> list:
        return sorted({i for name in self.on[src] for i in self.reach[name]
                       if i != src})

    def _pull(self, src, dst) -> None:
        """One vCPU from ``src`` to ``dst``, of the guest (with a whole
        vCPU on ``src`` and allowed on ``dst``) with the least memory on
        ``src``.
        """
        names = [name for name in self.on[src] if dst in self.reach[name]]
        name = min(names, key=lambda g: (
            self.placement[g][1].get(src, 0.0), g))
        count = self.count[name]
        count[src] -= 1.0
        if count[src] <= EPSILON:
            del count[src]
        count[dst] = count.get(dst, 0.0) + 1.0
        self.load[src] -= 1.0
        self.load[dst] += 1.0
        self._update(name, src)
        self._update(name, dst)
        self.moved.add(name)

    def _to_idle(self) -> bool:
        load, cores, near = self.load, self.host.cores, self.host.latency
        for src in sorted(self._busy(),
                          key=lambda i: (-(load[i] - cores[i]), i)):
            idle = [i for i in self._reachable(src)
                    if load[i] <= cores[i] - 1.0 + EPSILON]
            if idle:
                dst = min(idle, key=lambda i: (near[src][i],
                                               load[i] - cores[i], i))
                self._pull(src, dst)
                return True
        return False

    def _between_busy(self) -> bool:
        load, threads, near = self.load, self.host.threads, \
            self.host.latency
        per = [load[i] / max(threads[i], EPSILON)
               for i in range(self.host.size)]
        for src in sorted(self._busy(), key=lambda i: (-per[i], i)):
            others = self._reachable(src)
            if not others:
                continue
            dst = min(others, key=lambda i: (per[i], near[src][i], i))
            if per[src] * 100 > IMBALANCE_PCT * per[dst] + EPSILON and \
                    (load[src] - 1.0) / max(threads[src], EPSILON) >= \
                    (load[dst] + 1.0) / max(threads[dst], EPSILON) - \
                    EPSILON:
                self._pull(src, dst)
                return True
        return False


def intensive(rpi: float) -> bool:
    """Whether a guest making ``rpi`` LLC references per instruction is
    memory-intensive (``MEMORY_INTENSIVE_RPKI`` per 1,000 or more).
    """
    return rpi * 1000.0 >= MEMORY_INTENSIVE_RPKI


def even(nodes) -> dict:
    nodes = sorted(nodes)
    return {n: 1.0 / len(nodes) for n in nodes}


def moved_fraction(before: dict, after: dict) -> float:
    """Share of a guest's pages that must move from ``before`` to
    ``after`` (both node -> fraction).
    """
    return sum(max(0.0, f - after.get(n, 0.0)) for n, f in before.items())
