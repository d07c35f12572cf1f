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
"""Placement policies compared by the simulator.

Every policy runs on top of what a Linux host does by itself (first
touch, the kernel's automatic NUMA balancing, page migrations that cost
time: :mod:`nova_numa_overhead.sim.host`). Each does what its paper or
manual says, at its own period, from the counters a host gives (with
noise), and moves pages and vCPUs through the same physics as ours:

* ``nova-default``: nothing more (first touch and NUMA balancing).
* ``numad``: numad.c's daemon (:class:`Numad`): every 5-15 s, the
  guests over half a CPU and 300 MB, largest first; the first whose best
  nodes (the fewest that hold it at 85% use, chosen by distance and by
  free CPU and free memory) differ from where it runs is bound to them
  (its threads' CPU affinity, then ``migrate_pages``; its memory is not
  confined) and the pass ends; a guest bound is looked at again after
  five minutes, or sooner on the busiest node.
* ``interleave``: the guest's memory policy interleaves its pages over
  every node from its start (NUMA balancing leaves such pages alone).
* ``vtrms``: every second, guests with more than 10,000 LLC misses per
  million instructions get their vCPUs moved to the node with the best
  access affinity (page share / measured latency; vTRMS Eq. 5).
* ``vprobe``: every second, vProbe's Algorithm 1: the LLC-thrashing, then
  LLC-fitting vCPUs (LLC references per 1,000 instructions) are dealt
  over the nodes, least-loaded node first, each taking a vCPU whose
  memory is on it when one is left.
* ``vdarm``: every 5 s, vDARM's classes from CPI and the sensitivity
  factor: class 1 gets its pages gathered on its main node where they fit
  and its vCPUs there (Algorithm 1), class 2 its pages evened over all
  nodes (Algorithm 2).
* ``overhead-aware``: this project's agent, unchanged, in the
  configuration the docs recommend for production
  (:data:`nova_numa_overhead.conf.agent.PRODUCTION`), nothing else
  overridden.
* ``oracle``: the best placement known (:mod:`.oracle`).

Baselines are frozen: they are changed only to follow their papers more
closely, never to make ours look better.
"""

import collections
import dataclasses
import math

from oslo_config import cfg

from nova_numa_overhead.compute import agent as agent_mod
from nova_numa_overhead import conf as plugin_conf
from nova_numa_overhead.conf import agent as agent_conf
from nova_numa_overhead.overhead import classifier
from nova_numa_overhead.sim import backend
from nova_numa_overhead.sim import host as host_mod


class Policy:
    """Places arriving guests; may act every simulated second."""

    name = 'base'

    def attach(self, hv, scenario=None) -> None:
        self.hv = hv
        self.host = hv.host
        self.spec = hv.host.spec
        self._last = {}

    def place(self, guest: host_mod.Guest) -> None:
        """The guest is about to start (its memory policy, if any)."""

    def step(self, now: float) -> None:
        """One simulated second passed."""

    # -- helpers shared by the baselines --------------------------------

    def managed(self) -> list:
        return [g for g in self.host.guests.values()
                if not g.pinned and not g.oom]

    def deltas(self) -> dict:
        """Counter increments since this policy last looked, per guest:
        (instructions, cycles, LLC references, LLC misses, seconds).
        """
        domains = self.hv.domains()
        now = self.hv.counters(domains)
        out = {}
        for name, c in now.items():
            prev = self._last.get(name)
            self._last[name] = (c, self._clock)
            if prev is None:
                continue
            before, then = prev
            seconds = self._clock - then
            if seconds <= 0:
                continue
            out[name] = (c.instructions - before.instructions,
                         c.cycles - before.cycles,
                         c.cache_references - before.cache_references,
                         c.cache_misses - before.cache_misses, seconds)
        return out

    _clock = 0.0

    def vcpus_to(self, guest, counts: dict) -> None:
        """Run the guest's vCPUs on these nodes (node -> vCPU count)."""
        total = float(sum(counts.values()))
        guest.cpu = {n: c / total for n, c in counts.items() if c > 0}
        guest.floating = False

    def cpu_load(self, skip=None) -> list:
        load = [0.0] * self.spec.size
        for g in self.host.guests.values():
            if g is skip or g.oom:
                continue
            for n, f in g.cpu.items():
                load[n] += g.vcpus * f
        return load


class NovaDefault(Policy):
    name = 'nova-default'


class Interleave(Policy):
    name = 'interleave'

    def place(self, guest):
        guest.interleave = True


class Numad(Policy):
    """numad's daemon as numad.c runs it (``manage_loads``,
    ``pick_numa_nodes``, ``bind_process_and_migrate_memory``), with its
    default options (``-i 5:15 -u 85 -m 90 -t 20``).

    Each pass measures the guests' CPU use since the last one (from their
    cycle counters) and their memory (resident, per node); the guests
    over half a CPU and 300 MB are candidates: those never bound first,
    largest (CPU x memory) first, then the bound ones, smallest first,
    the least recently bound first among those within 20% of each other.
    A guest bound less than five minutes ago is skipped unless it is on
    the node with the fewest free CPUs or free memory and moving it would
    even the nodes out. For the first candidate whose best nodes differ
    from where it is (or hold less than 90% of its memory), numad binds
    it and ends the pass: every thread's CPU affinity to those nodes'
    CPUs, then ``migrate_pages`` from its largest node outside them to
    the node inside with the least of its memory, one source node at a
    time. Nothing confines its memory: new pages go where its vCPUs run,
    to other nodes when those are full. The next pass comes after 5 s
    when it bound one, 15 s otherwise.
    """

    name = 'numad'
    min_interval = 5.0
    max_interval = 15.0
    utilization = 85           # -u, percent
    memlocality = 90           # -m, percent
    htt_percent = 20           # -t: a second hardware thread's worth
    cpu_threshold = 50         # CPU_THRESHOLD, hundredths of a CPU
    mb_threshold = 300         # MEMORY_THRESHOLD, MB
    reevaluation = 300.0       # MIN_DELAY_FOR_REEVALUATION, s
    mbs_margin = 100           # MBS_MARGIN, MB

    def attach(self, hv, scenario=None):
        super().attach(hv, scenario)
        self.next_scan = self.min_interval
        self.bound = {}        # name -> its nodes, once bound
        self.bind_time = {}    # name -> when (re)bound or confirmed

    def step(self, now):
        if now < self.next_scan:
            return
        self._clock = now
        self.next_scan = now + self._manage(now)

    # -- the nodes, as numad reads them (update_nodes) ----------------------

    def _cpus_total(self, n) -> float:
        node = self.spec.nodes[n]
        return 100.0 * node.cores * (
            1.0 + (node.threads - 1) * self.htt_percent / 100.0)

    def _free(self, used: dict) -> tuple:
        """Free CPUs (hundredths) and free MB per node. The CPUs are what
        every guest used (numad reads the host's idle time: Nova-pinned
        guests included; one that started since the last pass counts
        busy); the memory is net of the page migrations still queued
        (numad's migrate_pages returns once they are done).
        """
        size = self.spec.size
        busy = [0.0] * size
        for g in self.host.guests.values():
            if g.oom:
                continue
            for n, f in g.cpu.items():
                busy[n] += used.get(g.name, 100.0 * g.vcpus) * f
        cpus = [max(self._cpus_total(n) - busy[n], 0.0)
                for n in range(size)]
        mbs = [float(mb) for mb in self.host.free_mb()]
        for guest, src, dst, mb, _kind in self.host.queue:
            mbs[dst] -= mb
            mbs[src] += mb
        return cpus, [max(mb, 0.0) for mb in mbs]

    # -- one pass (manage_loads) --------------------------------------------

    def _manage(self, now) -> float:
        for table in (self.bound, self.bind_time):
            for name in [n for n in table if n not in self.host.guests]:
                del table[name]
        hz = self.spec.ghz * 1e9
        used, mbs_used = {}, {}
        for name, (_i, cycles, _r, _m, seconds) in self.deltas().items():
            guest = self.host.guests.get(name)
            if guest is None or guest.oom:
                continue
            used[name] = 100.0 * cycles / seconds / hz
            mbs_used[name] = guest.allocated_mb
        if not used:
            # Nothing measured yet: back soon.
            return self.min_interval
        # (Nova-pinned guests: numad would bind them too, its affinity
        # clipped by their cgroups; the simulator's policies leave them.)
        candidates = [self.host.guests[n] for n in sorted(used)
                      if not self.host.guests[n].pinned and
                      used[n] > self.cpu_threshold and
                      mbs_used[n] > self.mb_threshold]
        magnitude = {g.name: used[g.name] * mbs_used[g.name]
                     for g in candidates}
        unbound = sorted((g for g in candidates if g.name not in
                          self.bind_time),
                         key=lambda g: -magnitude[g.name])
        # Bound ones: increasing magnitude in bins of 20%, the least
        # recently bound first within a bin.
        bound = sorted((g for g in candidates if g.name in self.bind_time),
                       key=lambda g: (
                           math.floor(math.log(max(magnitude[g.name], 1.0),
                                               1.25)),
                           self.bind_time[g.name]))
        cpus_free, mbs_free = self._free(used)
        size = self.spec.size
        node0_cpus = self._cpus_total(0)
        node0_mbs = float(self.spec.nodes[0].memory_mb)
        sum_used = sum(used[g.name] for g in candidates)
        enough = sum_used <= sum(self._cpus_total(n) for n in range(size))
        for guest in unbound + bound:
            name = guest.name
            util = min(self.utilization, 100)
            if guest.memory_mb > node0_mbs and \
                    mbs_used[name] * 5 / 4 > node0_mbs:
                mb_request = guest.memory_mb * 100.0 / util
            else:
                mb_request = mbs_used[name] * 100.0 / util
            cpu_request = min(used[name] * 100.0 / self.utilization,
                              guest.vcpus * 100.0)
            if now - self.bind_time.get(name, -1e18) < self.reevaluation \
                    and not self._bypass(name, used[name], mbs_used[name],
                                         cpu_request, mb_request,
                                         cpus_free, mbs_free, node0_cpus,
                                         node0_mbs):
                continue
            nodes = self._pick(guest, used[name], mbs_used[name],
                               cpu_request, mb_request, enough, cpus_free,
                               mbs_free, now)
            if nodes is not None:
                self._bind(guest, nodes, now)
                return self.min_interval
        return self.max_interval

    def _bypass(self, name, cpu_used, mb_used, cpu_request, mb_request,
                cpus_free, mbs_free, node0_cpus, node0_mbs) -> bool:
        """Whether a guest bound recently is looked at anyway: it is on
        the node with the fewest free CPUs or free memory, fits in one
        node, and moving it would even the nodes out.
        """
        nodes = self.bound.get(name, ())
        least_cpu = min(range(len(cpus_free)), key=lambda n: cpus_free[n])
        least_mb = min(range(len(mbs_free)), key=lambda n: mbs_free[n])
        if least_cpu not in nodes and least_mb not in nodes:
            return False
        if cpu_request >= node0_cpus or mb_request >= node0_mbs:
            return False
        lo_c, hi_c = min(cpus_free), max(cpus_free)
        avg_c = sum(cpus_free) / len(cpus_free)
        lo_m, hi_m = min(mbs_free), max(mbs_free)
        avg_m = sum(mbs_free) / len(mbs_free)
        return (abs(lo_c + cpu_used - avg_c) +
                abs(hi_c - cpu_used - avg_c) <
                (hi_c - lo_c) - self.cpu_threshold and
                abs(lo_m + mb_used - avg_m) +
                abs(hi_m - mb_used - avg_m) < hi_m - lo_m)

    @staticmethod
    def _weigh(mbs, cpus, mbs_free, cpus_free) -> float:
        """numad's magnitude of a node for a request: the resources it
        needs weighed above what it would leave over.
        """
        need_m, extra_m = (mbs, mbs_free - mbs) if mbs_free > mbs else \
            (mbs_free, 0.0)
        need_c, extra_c = (cpus, cpus_free - cpus) if cpus_free > cpus \
            else (cpus_free, 0.0)
        return (need_m * 10 + extra_m * 4) * (need_c * 6 + extra_c)

    def _pick(self, guest, cpu_used, mb_used, cpus, mbs, enough, cpus_free,
              mbs_free, now):
        """The nodes numad would bind ``guest`` to; None where it stays
        (bound there already with 90% of its memory there).
        """
        spec = self.spec
        size = spec.size
        dist = spec.distances
        mine = self.host.pages(guest)
        bound = self.bound.get(guest.name)
        tmp_m, tmp_c = list(mbs_free), list(cpus_free)
        sum_free = 0.0
        if bound is not None and len(bound) < size:
            avg = (cpu_used + sum(cpus_free[n] for n in bound)) / len(bound)
        for n in range(size):
            own = mine.get(n, 0.0)
            if bound is None or len(bound) >= size:
                tmp_m[n] += own * 17 / 16
                if mb_used > 0:
                    tmp_c[n] += cpu_used * own / mb_used
            else:
                tmp_m[n] += own * 5 / 4
                if n in bound:
                    tmp_c[n] = avg
            sum_free += tmp_c[n]
            tmp_c[n] = max(min(tmp_c[n], self._cpus_total(n)), 1.0)
            tmp_m[n] = min(tmp_m[n], float(spec.nodes[n].memory_mb))
        mag = [self._weigh(mbs, cpus, tmp_m[n], tmp_c[n])
               for n in range(size)]
        if cpus > sum_free:
            enough = True
        flex = (100 - self.utilization) * self._cpus_total(0) / 200.0 \
            if self.utilization < 100 else 0.0
        need = max(math.ceil(mbs / spec.nodes[0].memory_mb),
                   math.ceil((cpus - flex) / self._cpus_total(0)))
        need = min(need, size)

        def chain(seed):
            # By distance from seed; ties to the larger magnitude, then
            # the lower node.
            return sorted(range(size), key=lambda n: (dist[n][seed],
                                                      -mag[n], n))

        totmag = []
        for seed in range(size):
            order = chain(seed)
            totmag.append(sum(mag[n] / dist[n][seed] ** 2
                              for n in order[:need]))
        best = max(range(size), key=lambda n: (totmag[n], -n))
        target = []
        left_m, left_c = mbs, cpus
        for n in chain(best):
            if need <= 0 and left_m <= 0 and (left_c <= flex or enough):
                break
            target.append(n)
            need -= 1
            if len(target) == size:
                break
            if tmp_m[n] >= left_m + self.mbs_margin:
                left_m = 0.0
            else:
                left_m -= tmp_m[n] - self.mbs_margin
            if tmp_c[n] >= left_c:
                left_c = 0.0
            else:
                left_c -= tmp_c[n]
        target = tuple(sorted(target))
        outside = sum(mb for n, mb in mine.items() if n not in target)
        local = mb_used <= 0 or \
            100.0 * outside / mb_used <= 100 - self.memlocality
        if bound is not None and target == bound and local:
            self.bind_time[guest.name] = now
            return None
        return target

    def _bind(self, guest, nodes, now) -> None:
        """Every thread's affinity to the nodes' CPUs, then its memory
        from each node outside them, the largest first, to the node
        inside with the least of it (bind_process_and_migrate_memory).
        """
        self.vcpus_to(guest, {n: guest.vcpus / len(nodes) for n in nodes})
        # Its new pages are first touched where its vCPUs now run.
        guest.first_touch = tuple(nodes)
        mine = self.host.pages(guest)
        # Pages already on their way somewhere are not moved again.
        for g, src, _dst, mb, _kind in self.host.queue:
            if g is guest:
                mine[src] = max(mine.get(src, 0.0) - mb, 0.0)
        have = [mine.get(n, 0.0) for n in range(self.spec.size)]
        previous = None
        while True:
            inside = [n for n in range(self.spec.size) if n in nodes]
            outside = [n for n in range(self.spec.size) if n not in nodes]
            if not outside:
                break
            dst = min(inside, key=lambda n: (have[n], -n))
            src = max(outside, key=lambda n: (have[n], -n))
            if have[src] <= host_mod.EPSILON or src == previous:
                break
            self.host.enqueue(guest, src, dst, have[src], host_mod.REMOTE)
            have[dst] += have[src]
            have[src] = 0.0
            previous = src
        self.bound[guest.name] = tuple(nodes)
        self.bind_time[guest.name] = now


class VTRMS(Policy):
    name = 'vtrms'
    period = 1
    pressure = 10000.0     # LLC misses per million instructions

    def step(self, now):
        self._clock = now
        if int(now) % self.period:
            return
        deltas = self.deltas()
        lat = self.spec.latency_ns
        n = self.spec.size
        for guest in self.managed():
            d = deltas.get(guest.name)
            if d is None or d[0] <= 0:
                continue
            if d[3] / d[0] * 1e6 < self.pressure:
                continue
            pages = self.host.pages(guest)
            total = sum(pages.values())
            if total <= 0:
                continue
            affinity = {m: mb / total for m, mb in pages.items()}
            target = max(range(n), key=lambda c: (
                sum(a / lat[c][m] for m, a in affinity.items()), -c))
            if guest.cpu != {target: 1.0}:
                self.vcpus_to(guest, {target: guest.vcpus})


class VProbe(Policy):
    name = 'vprobe'
    period = 1
    low = classifier.LLC_LOW_BOUND
    high = classifier.LLC_HIGH_BOUND

    def step(self, now):
        self._clock = now
        if int(now) % self.period:
            return
        deltas = self.deltas()
        n = self.spec.size
        groups = {classifier.THRASHING: [], classifier.FITTING: []}
        for guest in sorted(self.managed(), key=lambda g: g.name):
            d = deltas.get(guest.name)
            if d is None:
                continue
            kind, _ = classifier.llc_type(d[2], d[0], self.low, self.high)
            if kind == classifier.FRIENDLY:
                continue
            pages = self.host.pages(guest)
            affinity = max(pages, key=lambda m: (pages[m], -m)) if pages \
                else 0
            for v in range(guest.vcpus):
                groups[kind].append((guest, affinity))
        if not any(groups.values()):
            return
        assigned = [0] * n
        placed = {}
        for kind in (classifier.THRASHING, classifier.FITTING):
            left = list(groups[kind])
            while left:
                node = min(range(n), key=lambda i: (assigned[i], i))
                local = [v for v in left if v[1] == node]
                if local:
                    pick = local[0]
                else:
                    sizes = {}
                    for v in left:
                        sizes[v[1]] = sizes.get(v[1], 0) + 1
                    biggest = max(sizes, key=lambda p: (sizes[p], -p))
                    pick = next(v for v in left if v[1] == biggest)
                left.remove(pick)
                assigned[node] += 1
                counts = placed.setdefault(pick[0].name, (pick[0], {}))[1]
                counts[node] = counts.get(node, 0) + 1
        for guest, counts in placed.values():
            self.vcpus_to(guest, counts)


class VDARM(Policy):
    name = 'vdarm'
    period = 5

    def step(self, now):
        self._clock = now
        if int(now) % self.period:
            return
        deltas = self.deltas()
        available = max(n.mc_gbps for n in self.spec.nodes) * 1000.0
        for guest in self.managed():
            d = deltas.get(guest.name)
            if d is None or d[0] <= 0:
                continue
            kind = classifier.classify(d[0], d[1], d[2], d[3], d[4],
                                       available_mbps=available)
            if kind.vdarm_class == 1:
                self._gather(guest)
            elif kind.vdarm_class == 2:
                self._even(guest)

    def _landed(self, guest) -> dict:
        """The guest's pages per node once its queued moves are done
        (a move is asked for once, not again at every period while its
        pages are on their way).
        """
        pages = self.host.pages(guest)
        for g, src, dst, mb, _kind in self.host.queue:
            if g is guest:
                pages[src] = pages.get(src, 0.0) - mb
                pages[dst] = pages.get(dst, 0.0) + mb
        return {n: mb for n, mb in pages.items()
                if mb > host_mod.EPSILON}

    def _gather(self, guest):
        pages = self._landed(guest)
        if not pages:
            return
        p = max(pages, key=lambda n: (pages[n], -n))
        # Its free memory once the moves queued into and out of it land.
        free = self.host.free_mb()[p]
        for _g, src, dst, mb, _kind in self.host.queue:
            free += mb if src == p else -mb if dst == p else 0.0
        for i, mb in sorted(pages.items()):
            if i != p and free >= mb:
                self.host.enqueue(guest, i, p, mb, host_mod.REMOTE)
                free -= mb
        self.vcpus_to(guest, {p: guest.vcpus})

    def _even(self, guest):
        pages = self._landed(guest)
        n = self.spec.size
        total = sum(pages.values())
        d = [pages.get(j, 0.0) - total / n for j in range(n)]
        for j in range(n):
            for k in range(n):
                if d[j] <= 1 or d[k] >= -1:
                    continue
                amount = min(d[j], -d[k])
                self.host.enqueue(guest, j, k, amount, host_mod.REMOTE)
                d[j] -= amount
                d[k] += amount


class OverheadAware(Policy):
    """The project's agent, unchanged, configured as the docs recommend
    for production, on the simulated host.
    """

    name = 'overhead-aware'
    overrides: tuple = ()          # (option, value) pairs

    def __init__(self, options=None):
        # ``[numa_overhead_agent]`` options set by ``simulate --set``;
        # the policy's own overrides come after them (liu-li stays
        # liu-li).
        self.options = dict(options or {})

    def attach(self, hv, scenario=None):
        super().attach(hv, scenario)
        self.conf = production_conf(dict(self.options,
                                         **dict(self.overrides)))
        opts = self.conf.numa_overhead_agent
        self.sample = max(1, int(opts.sample_interval))
        self.rebalance_every = int(opts.rebalance_interval)
        self.clock = [0.0]
        self.agent = agent_mod.Agent(self.conf, hv, _NullPublisher(),
                                     hv.host.spec.name,
                                     clock=lambda: self.clock[0],
                                     sleep=lambda s: None)
        # Every prediction of the run, not the agent's latest only: the
        # simulator's calibration figures are of whole runs.
        self.agent.optimizer.predictions = {
            kind: collections.deque()
            for kind in self.agent.optimizer.predictions}
        # And every move's predictions beside the steady state the
        # simulator's own physics gives it (Host.steady_effects).
        self.steady = {'guest': [], 'neighbours': []}
        self._pass = (None, [])    # (when, moves made) of the last pass
        # An error of _observe: the agent's pass logs and skips it, which
        # would change this policy's results silently; step() raises it.
        self.failed = None
        self.agent.optimizer.observer = self._observe
        hv.register_lifecycle(self._on_lifecycle)

    def _observe(self, action):
        """The optimizer's hook, before each of its moves: what the
        simulator's physics gives the move in steady state, against
        the same state without it (with the moves made before it in the
        same pass, as its prediction has them), kept beside the
        predictions once the move is made (the callable returned).
        """
        now = self.clock[0]
        if self._pass[0] != now:
            self._pass = (now, [])
        move = host_mod.Move(
            action.guest, memory=action.predicted[1]
            if action.with_memory else None,
            cpu=backend.pinned(self.hv.topology(), action.cpus))
        if move.cpu is None:
            move = dataclasses.replace(move, floating=True)
        earlier = self._pass[1]
        try:
            truth = self.host.steady_effects(move, earlier)
        except Exception as exc:
            self.failed = exc
            raise

        def made():
            earlier.append(move)
            for name, effect in action.effects.items():
                if name not in truth:
                    continue
                kind = 'guest' if name == action.guest else 'neighbours'
                self.steady[kind].append((effect, truth[name]))
        return made

    def _on_lifecycle(self, event, name):
        # The simulated host has no event thread to keep turning: the
        # agent handles each event as it comes, as before it was queued.
        self.agent.on_lifecycle(event, name)
        self.agent.handle_events()

    def step(self, now):
        self.clock[0] = now
        if int(now) % self.sample == 0:
            self.agent.cycle()
            if self.failed is not None:
                raise self.failed
        if self.rebalance_every and int(now) % self.rebalance_every == 0:
            # What the agent service does every rebalance_interval.
            self.agent.rebalance()
            self.agent.colocate()


class PaperMethod(OverheadAware):
    """The agent as Liu & Li describe it: memory placement over the
    low-overhead nodes, remote ones included (``remote_placement =
    True``), and swap-FIFO rebalancing, without the optimizer's vCPU moves
    (``optimize = False``). The simulator's validation reproduces the
    paper's figures with it; it is not one of the compared policies.
    """

    name = 'liu-li'
    overrides = (('optimize', False), ('remote_placement', True))


AGENT_GROUP = 'numa_overhead_agent'
SCHEDULER_GROUP = 'numa_overhead'
# Options ``simulate --set`` refuses: the simulator sets them itself (its
# hypervisor, its in-process transport and per-run topic, reports that do
# not age on its fast clock) or they name files and hosts of a real
# deployment.
NOT_SETTABLE = {
    AGENT_GROUP: ('connection_uri', 'hypervisor', 'sim_host',
                  'sim_scenario', 'topology_file'),
    SCHEDULER_GROUP: ('transport_url', 'report_topic', 'report_ttl'),
}


def new(name, options=None) -> Policy:
    """Policy ``name``, with ``options`` (group -> {option: value}, from
    ``simulate --set``) where it reads them: the agent's for ours and
    liu-li.
    """
    cls = POLICIES[name]
    if issubclass(cls, OverheadAware):
        return cls((options or {}).get(AGENT_GROUP))
    return cls()


def check_options(options) -> dict:
    """``options`` (group -> {option: value as given}) as their options'
    types make them (group -> {option: value}); ValueError, one line,
    where it names a group other than the agent's and the scheduler
    side's, an unknown option, one the simulator sets itself
    (NOT_SETTABLE), or a value its type or range refuses (an empty one
    included).
    """
    conf = plugin_conf.register_opts(cfg.ConfigOpts())
    conf([], use_env=False)
    out = {}
    for group, values in (options or {}).items():
        if group not in (AGENT_GROUP, SCHEDULER_GROUP):
            raise ValueError('--set: group %r: only %s and %s options can '
                             'be set' % (group, AGENT_GROUP,
                                         SCHEDULER_GROUP))
        for name, value in values.items():
            if name in NOT_SETTABLE[group]:
                raise ValueError('--set: %s.%s is set by the simulator%s'
                                 % (group, name, ' (--transport-url)'
                                    if name == 'transport_url' else ''))
            if not str(value).strip():
                raise ValueError('--set: %s.%s: no value' % (group, name))
            try:
                conf.set_override(name, value, group=group)
            except cfg.NoSuchOptError:
                raise ValueError('--set: no option %s.%s' % (group, name))
            except (TypeError, ValueError) as exc:
                raise ValueError('--set: %s.%s=%s: %s'
                                 % (group, name, value, exc))
            out.setdefault(group, {})[name] = conf[group][name]
    if out.get(AGENT_GROUP):
        # What the agent service checks when it starts (thresholds
        # ascending, bounds in order): refused now, not after the
        # baselines ran.
        try:
            agent_conf.check(production_conf(out[AGENT_GROUP]))
        except ValueError as exc:
            raise ValueError('--set: %s' % exc)
    return out


def production_conf(overrides=None):
    """The agent's configuration as the docs recommend it for production:
    the option defaults and :data:`agent_conf.PRODUCTION`, nothing else.
    """
    conf = plugin_conf.register_opts(cfg.ConfigOpts())
    # Nothing from the environment (OS_NUMA_OVERHEAD_AGENT__*): what the
    # simulated agents run with is the defaults and what is set here.
    conf([], use_env=False)
    for name, value in dict(agent_conf.PRODUCTION,
                            **(overrides or {})).items():
        conf.set_override(name, value, group='numa_overhead_agent')
    return conf


class _NullPublisher:

    def __init__(self):
        self.reports = []

    def publish(self, report):
        self.reports.append(report)
        return True


POLICIES = {cls.name: cls for cls in (
    NovaDefault, Numad, Interleave, VTRMS, VProbe, VDARM, OverheadAware,
    PaperMethod)}
# Compared in every run; PaperMethod only where asked for.
COMPARED = tuple(name for name in POLICIES if name != PaperMethod.name)
ORACLE = 'oracle'
DEFAULT = OverheadAware.name
BASELINE = NovaDefault.name
