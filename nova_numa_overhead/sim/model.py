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
"""An analytical NUMA host: where vCPUs run and pages lie -> overheads,
throughput and the hardware counters the agent reads.

Each step the model solves a small fixed point for every guest:

* LLC sharing: a guest's hit rate is its solo hit rate scaled by how much
  of the LLC of the node it runs on its working set can keep
  (``llc / sum of the working sets running there``);
* latency: for every (vCPU node, memory node) pair the guest uses, the
  link's base latency, stretched by the queueing of the memory controller
  of the memory node and, for remote pairs, of the link (both
  ``1 + k rho / (1 - rho)``, utilisations from the traffic below);
* CPI = core CPI + LLC misses per instruction x latency cycles / memory
  level parallelism; throughput = instructions per second;
* traffic = misses per second x 64 bytes, split over controllers and links
  by where the guest runs and where its pages are.

Throughput is normalised to the guest running alone on the host with its
memory local. The model is deterministic; noise, when wanted, is added by
the caller with its own seeded generator.
"""

import dataclasses
import math

CACHE_LINE = 64
QUEUE_K = 1.0
RHO_MAX = 0.97
ITERATIONS = 40


@dataclasses.dataclass(frozen=True)
class Profile:
    """A workload's memory behaviour."""

    name: str
    api: float           # LLC references per instruction
    footprint_mb: float  # LLC working set
    solo_hit: float      # LLC hit rate alone on a socket
    cpi0: float          # cycles per instruction without memory stalls
    mlp: float           # LLC misses in flight (memory-level parallelism)


@dataclasses.dataclass(frozen=True)
class NodeSpec:
    cores: int
    llc_mb: float
    memory_mb: int
    mc_gbps: float


@dataclasses.dataclass(frozen=True)
class HostSpec:
    """A NUMA host: nodes, and per (cpu node, memory node) latency and
    bandwidth (asymmetric where the hardware is).
    """

    name: str
    nodes: tuple
    latency_ns: tuple     # [cpu node][memory node]
    link_gbps: tuple      # [cpu node][memory node]; diagonal unused
    distances: tuple      # SLIT, what the firmware tells the OS
    ghz: float

    @property
    def size(self) -> int:
        return len(self.nodes)


@dataclasses.dataclass
class Guest:
    """A running guest: where its vCPUs run and where its pages lie."""

    name: str
    vcpus: int
    memory_mb: int
    profile: Profile
    cpu: dict                  # node -> fraction of vCPUs
    pages: dict                # node -> MiB
    extra_specs: dict = dataclasses.field(default_factory=dict)
    pinned: bool = False
    allowed: tuple = ()        # nodes its memory may use; () = all

    def mem_fractions(self) -> dict:
        total = float(sum(v for v in self.pages.values() if v > 0))
        if total <= 0:
            return {}
        return {n: v / total for n, v in self.pages.items() if v > 0}


@dataclasses.dataclass(frozen=True)
class GuestResult:
    ips: float
    cpi: float
    hit: float
    latency_ns: float
    traffic_gbps: float
    cpu_share: float           # fraction of its vCPUs' time it gets


@dataclasses.dataclass
class Result:
    guests: dict               # name -> GuestResult
    mc_util: list
    link_util: list


class Host:
    """A host spec with guests on it."""

    def __init__(self, spec: HostSpec):
        self.spec = spec
        self.guests: dict = {}
        self._solo: dict = {}

    def free_mb(self) -> list:
        used = [0.0] * self.spec.size
        for g in self.guests.values():
            for n, mb in g.pages.items():
                used[n] += mb
        return [max(0, int(node.memory_mb - u))
                for node, u in zip(self.spec.nodes, used)]

    def add(self, guest: Guest) -> None:
        self.guests[guest.name] = guest

    def remove(self, name: str) -> None:
        self.guests.pop(name, None)

    def solve(self, guests=None) -> Result:
        return solve(self.spec, list((guests or self.guests).values())
                     if isinstance(guests, dict) or guests is None
                     else guests)

    def solo_ips(self, guest: Guest) -> float:
        """The guest alone on this host, vCPUs and memory on node 0."""
        key = (guest.profile, guest.vcpus)
        if key not in self._solo:
            alone = dataclasses.replace(guest, cpu={0: 1.0},
                                        pages={0: guest.memory_mb})
            self._solo[key] = solve(self.spec, [alone]).guests[
                guest.name].ips
        return self._solo[key]

    def throughput(self, result: Result) -> dict:
        """Name -> throughput normalised to running alone."""
        return {name: r.ips / self.solo_ips(self.guests[name])
                for name, r in result.guests.items()
                if name in self.guests}


def _queue(rho: float) -> float:
    rho = min(max(rho, 0.0), RHO_MAX)
    return 1.0 + QUEUE_K * rho / (1.0 - rho)


def _sharing(spec, guests):
    """CPU share and LLC hit rate of every guest."""
    n = spec.size
    demand = [0.0] * n
    load = [0.0] * n
    for g in guests:
        for node, frac in g.cpu.items():
            demand[node] += g.vcpus * frac
            load[node] += g.profile.footprint_mb * frac
    # vCPUs beyond a node's cores get a share of them.
    share = [min(1.0, spec.nodes[i].cores / demand[i]) if demand[i] else 1.0
             for i in range(n)]
    hits = {}
    cpu_share = {}
    for g in guests:
        hit = cs = 0.0
        for node, frac in g.cpu.items():
            fit = min(1.0, spec.nodes[node].llc_mb / load[node]) \
                if load[node] else 1.0
            hit += frac * g.profile.solo_hit * fit
            cs += frac * share[node]
        hits[g.name] = hit
        cpu_share[g.name] = cs
    return hits, cpu_share


def _latency(spec, guest, mem, q_mc, q_link) -> float:
    if not mem:
        return spec.latency_ns[0][0]
    latency = 0.0
    for cn, cf in guest.cpu.items():
        for mn, mf in mem.items():
            base = spec.latency_ns[cn][mn] * q_mc[mn]
            if cn != mn:
                base *= q_link[cn][mn]
            latency += cf * mf * base
    return latency


def _cpi(spec, guest, hit, latency) -> float:
    mpi = guest.profile.api * (1.0 - hit)
    return guest.profile.cpi0 + mpi * latency * spec.ghz / guest.profile.mlp


def solve(spec: HostSpec, guests) -> Result:
    """The steady state of these guests on this host."""
    n = spec.size
    hz = spec.ghz * 1e9
    hits, cpu_share = _sharing(spec, guests)
    mems = {g.name: g.mem_fractions() for g in guests}
    q_mc = [1.0] * n
    q_link = [[1.0] * n for _ in range(n)]
    ips = {}
    lat = {}
    traffic = {}
    for _ in range(ITERATIONS):
        mc_bytes = [0.0] * n
        link_bytes = [[0.0] * n for _ in range(n)]
        for g in guests:
            mem = mems[g.name]
            lat[g.name] = _latency(spec, g, mem, q_mc, q_link)
            cpi = _cpi(spec, g, hits[g.name], lat[g.name])
            ips[g.name] = g.vcpus * cpu_share[g.name] * hz / cpi
            traffic[g.name] = (ips[g.name] * g.profile.api *
                               (1.0 - hits[g.name]) * CACHE_LINE)
            for cn, cf in g.cpu.items():
                for mn, mf in mem.items():
                    mc_bytes[mn] += traffic[g.name] * cf * mf
                    if cn != mn:
                        link_bytes[cn][mn] += traffic[g.name] * cf * mf
        # Damped update: the fixed point oscillates otherwise.
        q_mc = [0.5 * q + 0.5 * _queue(mc_bytes[i] /
                                       (spec.nodes[i].mc_gbps * 1e9))
                for i, q in enumerate(q_mc)]
        q_link = [[1.0 if a == b else 0.5 * q_link[a][b] + 0.5 * _queue(
            link_bytes[a][b] / (spec.link_gbps[a][b] * 1e9))
            for b in range(n)] for a in range(n)]
    results = {g.name: GuestResult(
        ips=ips[g.name], cpi=_cpi(spec, g, hits[g.name], lat[g.name]),
        hit=hits[g.name], latency_ns=lat[g.name],
        traffic_gbps=traffic[g.name] / 1e9, cpu_share=cpu_share[g.name])
        for g in guests}
    mc_util = [min(1.0, sum(traffic[g.name] * mems[g.name].get(i, 0)
                            for g in guests) / (spec.nodes[i].mc_gbps * 1e9))
               for i in range(n)]
    link_util = [[0.0 if a == b else min(1.0, sum(
        traffic[g.name] * g.cpu.get(a, 0) * mems[g.name].get(b, 0)
        for g in guests) / (spec.link_gbps[a][b] * 1e9)) for b in range(n)]
        for a in range(n)]
    return Result(guests=results, mc_util=mc_util, link_util=link_util)


def counters(spec: HostSpec, guest: Guest, result: GuestResult,
             seconds: float) -> tuple:
    """Counter increments over ``seconds``: instructions, cycles, LLC
    references, LLC misses, stalled cycles.
    """
    instructions = result.ips * seconds
    cycles = instructions * result.cpi
    refs = instructions * guest.profile.api
    misses = refs * (1.0 - result.hit)
    stalls = misses * result.latency_ns * spec.ghz / guest.profile.mlp
    return (int(instructions), int(cycles), int(refs), int(misses),
            int(min(stalls, cycles)))


def geomean(values) -> float:
    values = [v for v in values if v > 0]
    if not values:
        return 0.0
    return math.exp(sum(math.log(v) for v in values) / len(values))
