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
* ``numad``: every 5-15 s, for every guest over 300 MB, the smallest node
  set that fits its memory and vCPUs at 85% use, scored by free CPU x
  free memory (and distance between the nodes); a guest not on its best
  set is bound to it (cpuset: vCPUs and memory; the kernel migrates its
  pages), at most once a minute per guest.
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
    name = 'numad'
    min_interval = 5.0
    max_interval = 15.0
    target = 0.85
    min_mb = 300.0
    hold = 60.0

    def attach(self, hv, scenario=None):
        super().attach(hv, scenario)
        self.interval = self.min_interval
        self.next_scan = self.min_interval
        self.moved_at = {}

    def step(self, now):
        if now < self.next_scan:
            return
        changed = self._scan(now)
        self.interval = self.min_interval if changed else min(
            self.interval * 2, self.max_interval)
        self.next_scan = now + self.interval

    def _needed(self, guest) -> int:
        node_mb = min(n.memory_mb for n in self.spec.nodes) * self.target
        node_cpus = min(n.cpus for n in self.spec.nodes) * self.target
        return max(1, math.ceil(guest.memory_mb / node_mb),
                   math.ceil(guest.vcpus / node_cpus))

    def _best_set(self, guest, k):
        spec = self.spec
        free = self.host.free_mb()
        mine = self.host.pages(guest)
        load = self.cpu_load(skip=guest)
        mem = [free[n] + mine.get(n, 0.0) for n in range(spec.size)]
        cpu = [max(spec.nodes[n].cpus - load[n], 0.0)
               for n in range(spec.size)]
        magnitude = [cpu[n] * mem[n] for n in range(spec.size)]
        best = None
        for seed in range(spec.size):
            nodes = [seed]
            rest = [n for n in range(spec.size) if n != seed]
            while len(nodes) < k and rest:
                pick = max(rest, key=lambda n: (
                    magnitude[n] / (spec.distances[seed][n] / 10.0) ** 2,
                    -n))
                nodes.append(pick)
                rest.remove(pick)
            if sum(mem[n] for n in nodes) < guest.memory_mb:
                continue
            dist = 1.0
            if len(nodes) > 1:
                pairs = [(a, b) for a in nodes for b in nodes if a < b]
                dist = sum(spec.distances[a][b] / 10.0
                           for a, b in pairs) / len(pairs)
            score = sum(magnitude[n] for n in nodes) / dist ** 2
            if best is None or score > best[0]:
                best = (score, tuple(sorted(nodes)))
        return best[1] if best else None

    def _scan(self, now) -> bool:
        changed = False
        guests = [g for g in self.managed() if g.allocated_mb >= self.min_mb]
        for guest in sorted(guests, key=lambda g: (-g.vcpus * g.memory_mb,
                                                   g.name)):
            if now - self.moved_at.get(guest.name, -1e9) < self.hold:
                continue
            k = self._needed(guest)
            nodes = None
            while nodes is None and k <= self.spec.size:
                nodes = self._best_set(guest, k)
                k += 1
            if nodes is None:
                continue
            pages = self.host.pages(guest)
            inside = sum(mb for n, mb in pages.items() if n in nodes)
            cpu_inside = sum(f for n, f in guest.cpu.items() if n in nodes)
            if guest.allowed == nodes or (
                    inside >= 0.9 * guest.allocated_mb and
                    cpu_inside >= 0.999):
                continue
            per = guest.vcpus / len(nodes)
            self.vcpus_to(guest, {n: per for n in nodes})
            self.host.restrict(guest, nodes)
            self.moved_at[guest.name] = now
            changed = True
        return changed


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

    def _gather(self, guest):
        pages = self.host.pages(guest)
        if not pages:
            return
        p = max(pages, key=lambda n: (pages[n], -n))
        free = self.host.free_mb()[p] - self.host.pending_mb()
        for i, mb in sorted(pages.items()):
            if i != p and free >= mb:
                self.host.enqueue(guest, i, p, mb, host_mod.REMOTE)
                free -= mb
        self.vcpus_to(guest, {p: guest.vcpus})

    def _even(self, guest):
        pages = self.host.pages(guest)
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
