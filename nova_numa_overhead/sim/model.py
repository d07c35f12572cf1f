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
"""The analytical NUMA host: where vCPUs run and pages lie -> throughput
and the hardware counters a host would show.

A host is a set of nodes (sockets); a node has cores (and hardware
threads), a last-level cache, and one or more memory controllers, each
owning part of the node's memory. For every guest the model solves a small
fixed point:

* CPU: vCPUs beyond a node's cores share them; a second hardware thread
  on a core adds ``SMT_YIELD`` of a core, no more;
* LLC: a guest's hit rate is its solo hit rate scaled by the share of the
  node's LLC its working set can keep (``llc / sum of the working sets of
  the vCPUs running there``; a working set grows with the vCPU count);
* latency: for every (vCPU node, controller) pair the guest uses, the
  base latency of the (vCPU node, memory node) pair stretched by the
  queueing of that controller and, for remote pairs, of the link (both
  ``1 + k rho / (1 - rho)``, utilisations from the traffic below, page
  migrations included);
* CPI = core CPI + LLC misses per instruction x latency in cycles / memory
  level parallelism; instructions per second = vCPUs x CPU share x clock /
  CPI, less the time the guest loses to its pages being migrated;
* traffic = misses per second x 64 bytes, split over controllers and links
  by where the guest runs and where its pages are.

Throughput is normalised to the guest running alone on the host, vCPUs
and memory on node 0. Everything here is deterministic; counter noise is
added by the simulated hypervisor with its own seeded generator.
"""

import dataclasses
import math

import numpy

CACHE_LINE = 64
QUEUE_K = 1.0
RHO_MAX = 0.97
MAX_ITERATIONS = 60
TOLERANCE = 1e-4
# What a second hardware thread adds to a core: Intel quotes 15-30% for
# Hyper-Threading, memory-bound loads gain more; fitted within 10-40% with
# the profiles (tools/calibrate-sim.py), it sits at the bound.
SMT_YIELD = 0.4


@dataclasses.dataclass(frozen=True)
class Profile:
    """A workload's memory behaviour."""

    name: str
    api: float           # LLC references per instruction
    footprint_mb: float  # LLC working set per vCPU
    solo_hit: float      # LLC hit rate alone on a socket
    cpi0: float          # cycles per instruction without memory stalls
    mlp: float           # LLC misses in flight (memory-level parallelism)
    touched: float = 1.0  # share of its memory it keeps accessing


@dataclasses.dataclass(frozen=True)
class NodeSpec:
    cores: int             # physical cores
    llc_mb: float
    memory_mb: int
    mc_gbps: float         # all of the node's controllers together
    controllers: int = 1
    threads: int = 1       # hardware threads per core

    @property
    def cpus(self) -> int:
        return self.cores * self.threads


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

    @property
    def controllers(self) -> list:
        """Node of every memory controller, in order."""
        return [i for i, node in enumerate(self.nodes)
                for _ in range(node.controllers)]

    def controller_mb(self) -> list:
        """Memory behind every controller."""
        return [node.memory_mb // node.controllers
                for node in self.nodes for _ in range(node.controllers)]

    def first_controller(self, node: int) -> int:
        return sum(n.controllers for n in self.nodes[:node])


@dataclasses.dataclass
class Load:
    """What the solver needs of one guest at one instant."""

    name: str
    vcpus: int
    profile: Profile
    cpu: dict                 # node -> fraction of its vCPUs
    memory: dict              # controller -> fraction of its pages
    lost: float = 0.0         # fraction of its vCPU time lost to migration


@dataclasses.dataclass
class Params:
    """Per-guest parameters of a solve (arrays over the guests)."""

    vcpus: numpy.ndarray
    api: numpy.ndarray
    foot: numpy.ndarray
    solo: numpy.ndarray
    cpi0: numpy.ndarray
    mlp: numpy.ndarray
    kept: numpy.ndarray


@dataclasses.dataclass
class Result:
    names: list
    ips: numpy.ndarray
    cpi: numpy.ndarray
    hit: numpy.ndarray
    latency_ns: numpy.ndarray
    stall_cpi: numpy.ndarray    # memory-stall part of the CPI
    measured_cpi: numpy.ndarray  # cycles / instructions (SMT included)
    traffic: numpy.ndarray      # bytes per second
    cpu_share: numpy.ndarray
    ctrl_util: numpy.ndarray
    link_util: numpy.ndarray
    state: tuple = ()           # queueing factors, to warm-start a solve

    def of(self, name: str) -> int:
        return self.names.index(name)


def _queue(rho):
    rho = numpy.minimum(rho, RHO_MAX)
    return 1.0 + QUEUE_K * rho / (1.0 - rho)


class Solver:
    """The fixed point of a set of loads on one host spec."""

    def __init__(self, spec: HostSpec):
        self.spec = spec
        n = spec.size
        ctrl_node = spec.controllers
        self.ctrl_node = numpy.array(ctrl_node)
        k = len(ctrl_node)
        self.k = k
        self.ctrl_onehot = numpy.zeros((k, n))
        self.ctrl_onehot[numpy.arange(k), self.ctrl_node] = 1.0
        lat = numpy.array(spec.latency_ns, dtype=float)
        self.lat_k = lat[:, self.ctrl_node]              # n x k
        self.remote_k = (numpy.arange(n)[:, None] !=
                         self.ctrl_node[None, :])        # n x k
        self.ctrl_bw = numpy.array(
            [spec.nodes[c].mc_gbps * 1e9 / spec.nodes[c].controllers
             for c in ctrl_node])
        link = numpy.array(spec.link_gbps, dtype=float) * 1e9
        numpy.fill_diagonal(link, numpy.inf)
        self.link_bw = link
        self.cores = numpy.array([node.cores for node in spec.nodes],
                                 dtype=float)
        self.threads = numpy.array([node.threads for node in spec.nodes],
                                   dtype=float)
        self.llc = numpy.array([node.llc_mb for node in spec.nodes])
        self.hz = spec.ghz * 1e9

    def sharing(self, demand):
        """Per node: the share of time a vCPU runs on a hardware thread,
        and what a running thread gets of a core (SMT).
        """
        threads = self.cores * self.threads
        running = numpy.minimum(demand, threads)
        extra = numpy.maximum(running - self.cores, 0.0)
        cores = numpy.minimum(running, self.cores + SMT_YIELD * extra)
        run = numpy.where(demand > 0, running / numpy.maximum(demand, 1e-12),
                          1.0)
        smt = numpy.where(running > 0, cores / numpy.maximum(running, 1e-12),
                          1.0)
        return run, smt

    def arrays(self, loads) -> tuple:
        """(cpu G x N, memory G x K, per-guest parameters) of ``loads``."""
        n, k = self.spec.size, self.k
        g = len(loads)
        cpu = numpy.zeros((g, n))
        mem = numpy.zeros((g, k))
        for i, load in enumerate(loads):
            for node, frac in load.cpu.items():
                cpu[i, node] = frac
            for ctrl, frac in load.memory.items():
                mem[i, ctrl] = frac
        params = Params(
            vcpus=numpy.array([load.vcpus for load in loads], dtype=float),
            api=numpy.array([load.profile.api for load in loads]),
            foot=numpy.array([load.profile.footprint_mb for load in loads]),
            solo=numpy.array([load.profile.solo_hit for load in loads]),
            cpi0=numpy.array([load.profile.cpi0 for load in loads]),
            mlp=numpy.array([load.profile.mlp for load in loads]),
            kept=1.0 - numpy.array([min(max(load.lost, 0.0), 0.95)
                                    for load in loads]))
        return cpu, mem, params

    def solve(self, loads, background=None, warm=None) -> Result:
        """The steady state of ``loads``.

        :param background: (controller bytes/s, link bytes/s) of traffic
            that is not the guests' own (page migrations).
        :param warm: the ``state`` of an earlier result, to start from.
        """
        cpu, mem, params = self.arrays(loads)
        out = self.core(cpu[None], mem[None], params, background,
                        None if not warm else (warm[0][None], warm[1][None]))
        return Result(
            names=[load.name for load in loads],
            **{key: value[0] for key, value in out.items()
               if key != 'state'},
            state=(out['state'][0][0], out['state'][1][0]))

    def ips_batch(self, cpu, mem, params, warm=None, tolerance=TOLERANCE):
        """Instructions per second of every guest for B placements at
        once (``cpu`` B x G x N, ``mem`` B x G x K); and the state.
        """
        out = self.core(cpu, mem, params, None, warm, tolerance)
        return out['ips'], out['state']

    def core(self, cpu, mem, p, background=None, warm=None,
             tolerance=TOLERANCE) -> dict:
        """The fixed point of B placements of the same guests."""
        spec = self.spec
        b = cpu.shape[0]
        n, k = spec.size, self.k
        # CPU and LLC sharing do not depend on the fixed point.
        demand = cpu.transpose(0, 2, 1) @ p.vcpus                # B x N
        run, smt = self.sharing(demand)
        guest_run = numpy.einsum('bgn,bn->bg', cpu, run)
        guest_smt = numpy.einsum('bgn,bn->bg', cpu, smt)
        share = guest_run * guest_smt
        load_mb = cpu.transpose(0, 2, 1) @ (p.vcpus * p.foot)    # B x N
        fit = numpy.minimum(1.0, self.llc / numpy.maximum(load_mb, 1e-12))
        hit = p.solo * numpy.einsum('bgn,bn->bg', cpu, fit)
        mpi = p.api * (1.0 - hit)
        mem_node = mem @ self.ctrl_onehot                        # B x G x N
        bg_ctrl = 0.0 if background is None else background[0]
        bg_link = 0.0 if background is None else background[1]
        if warm is not None:
            q_ctrl, q_link = warm[0].copy(), warm[1].copy()
        else:
            q_ctrl, q_link = numpy.ones((b, k)), numpy.ones((b, n, n))
        alpha = numpy.full(b, 0.5)
        residual = numpy.full(b, numpy.inf)
        cpu_t = cpu.transpose(0, 2, 1)
        for _ in range(MAX_ITERATIONS):
            q_link_k = q_link[:, :, self.ctrl_node]              # B x N x K
            cost = self.lat_k[None] * q_ctrl[:, None, :] * numpy.where(
                self.remote_k[None], q_link_k, 1.0)
            latency = (cpu * (mem @ cost.transpose(0, 2, 1))).sum(-1)
            stall = mpi * latency * spec.ghz / p.mlp
            cpi = p.cpi0 + stall
            ips = p.vcpus * share * self.hz / cpi * p.kept
            traffic = ips * mpi * CACHE_LINE                     # B x G
            ctrl_bytes = (mem * traffic[:, :, None]).sum(1) + bg_ctrl
            link_bytes = (cpu_t * traffic[:, None, :]) @ mem_node + bg_link
            d_ctrl = _queue(ctrl_bytes / self.ctrl_bw) - q_ctrl
            d_link = _queue(link_bytes / self.link_bw) - q_link
            change = numpy.maximum(numpy.abs(d_ctrl).max(1),
                                   numpy.abs(d_link).max((1, 2)))
            if change.max() < tolerance:
                break
            # The map is decreasing (more queueing, less traffic): damp
            # it, and harder whenever the residual grows (oscillation).
            alpha = numpy.where(change > residual,
                                numpy.maximum(alpha * 0.5, 0.02), alpha)
            residual = change
            q_ctrl = q_ctrl + alpha[:, None] * d_ctrl
            q_link = q_link + alpha[:, None, None] * d_link
        return {
            'ips': ips, 'cpi': cpi, 'hit': hit, 'latency_ns': latency,
            'stall_cpi': stall, 'measured_cpi': cpi / guest_smt,
            'traffic': traffic, 'cpu_share': share,
            'ctrl_util': numpy.minimum(1.0, ctrl_bytes / self.ctrl_bw),
            'link_util': numpy.minimum(1.0, link_bytes / self.link_bw),
            'state': (q_ctrl, q_link)}

    def solo_ips(self, profile: Profile, vcpus: int) -> float:
        """The guest alone on the host: its vCPUs on node 0 (and the next
        nodes, one vCPU per core, when node 0 has too few cores), its pages
        beside them, spread over their controllers.
        """
        cpu = {}
        left = vcpus
        for node, spec in enumerate(self.spec.nodes):
            take = min(left, spec.cores) if node < self.spec.size - 1 \
                else left
            if take > 0:
                cpu[node] = take / vcpus
                left -= take
            if left <= 0:
                break
        memory = {}
        for node, frac in cpu.items():
            first = self.spec.first_controller(node)
            ctrls = self.spec.nodes[node].controllers
            for c in range(first, first + ctrls):
                memory[c] = frac / ctrls
        alone = Load('solo', vcpus, profile, cpu, memory)
        return float(self.solve([alone]).ips[0])


def geomean(values) -> float:
    values = [v for v in values if v > 0]
    if not values:
        return 0.0
    return math.exp(sum(math.log(v) for v in values) / len(values))
