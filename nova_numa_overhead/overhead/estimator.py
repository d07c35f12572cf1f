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
"""Memory-zone overhead estimator: Liu & Li, Figure 4.

Per node ``i`` the estimator classifies LLC contention (from the LLC hit rate
of the guests running on ``i``) and memory-controller congestion (from the
cycle loss of local accesses to ``i``); per pair ``(L, i)`` interconnect
congestion (from the cycle loss of guests running on ``L`` with memory on
``i``) and remote-access latency (from the IPC ratio of local to remote
accesses). Each metric is classified into integer levels by ascending
thresholds, and the levels add up to the overhead of node ``i`` seen from a
local node ``L``::

    overhead[L][i] = LLC(i) + MC(i)                         if i == L
                   = MC(i) + LLC(L) + INTER(L, i) + RML(L, i) otherwise

Where no guest gives an IPC ratio for a pair, remote-access latency falls
back to the host's static latency ratio: a measured latency or bandwidth
matrix (vTRMS) when known, else the SLIT distances.
"""

import bisect
import dataclasses
from typing import Sequence

# Ascending thresholds; level = number of thresholds <= value.
# LLC contention is measured as 1 - hit rate; with these thresholds the
# paper's characterization (hit rate 0.48 with one guest, 0.10 with eight on
# a socket) spans level 0 to level 4.
DEFAULT_LLC_THRESHOLDS = (0.55, 0.65, 0.75, 0.85)
# Cycle loss (stalled / all cycles): a memory-bound guest alone loses about
# two thirds of its cycles on its local controller (0.67 on the simulated
# x3850, 0.75 remote); two guests on one controller ~0.72, four ~0.80,
# eight ~0.9. These defaults come from that simulated characterization;
# real platforms need their own (see doc/source/admin/estimator.rst).
DEFAULT_MC_THRESHOLDS = (0.70, 0.75, 0.80, 0.85)
DEFAULT_INTER_THRESHOLDS = (0.78, 0.82, 0.86, 0.90)
# Local/remote IPC (or latency) ratio: SLIT 16/10 is level 1, 21/10 level
# 2, 22/10 and beyond level 3. A node congested at level 4 or more is then
# two levels worse than an idle remote node one hop away, which is when the
# paper's swap FIFO moves pages (section 4.3).
DEFAULT_RML_THRESHOLDS = (1.3, 1.7, 2.2, 3.0)

# A domain counts for a node or a pair when at least this fraction of its
# vCPU time or memory is there.
MIN_WEIGHT = 0.05


def classify(value: float, thresholds: Sequence[float]) -> int:
    """Level of ``value``: how many ascending thresholds it reaches."""
    return bisect.bisect_right(thresholds, value)


def check_thresholds(name: str, thresholds: Sequence[float]) -> tuple:
    """Return ``thresholds`` as a tuple, or raise ValueError naming them."""
    values = tuple(float(t) for t in thresholds)
    if not values:
        raise ValueError('%s thresholds: at least one value needed' % name)
    # NaN would pass the order checks below (its comparisons are false).
    if not all(-float('inf') < v < float('inf') for v in values):
        raise ValueError('%s thresholds must be finite numbers: %s'
                         % (name, ', '.join(str(v) for v in values)))
    if any(b <= a for a, b in zip(values, values[1:])):
        raise ValueError('%s thresholds must be strictly ascending: %s'
                         % (name, ', '.join(str(v) for v in values)))
    if values[0] < 0:
        raise ValueError('%s thresholds must not be negative' % name)
    return values


@dataclasses.dataclass(frozen=True)
class Thresholds:
    """Ascending classification thresholds of the four overheads."""

    llc: tuple = DEFAULT_LLC_THRESHOLDS
    mc: tuple = DEFAULT_MC_THRESHOLDS
    inter: tuple = DEFAULT_INTER_THRESHOLDS
    rml: tuple = DEFAULT_RML_THRESHOLDS

    def __post_init__(self):
        for field in dataclasses.fields(self):
            object.__setattr__(self, field.name, check_thresholds(
                field.name, getattr(self, field.name)))


@dataclasses.dataclass(frozen=True)
class Topology:
    """What the estimator knows of the host's nodes and their links.

    ``distances`` is the SLIT matrix (10 = local). ``latency_ns`` and
    ``bandwidth_mbps`` are measured matrices (row = CPU node, column =
    memory node), either may be absent; when present they replace SLIT for
    the static remote-latency ratio, latency first. The row of a node
    without CPUs may be None (nothing runs there to measure from): SLIT
    answers for it. ``bandwidth_streams`` says how many concurrent
    streams measured each row of ``bandwidth_mbps`` (None: one each);
    the ratios here are within a row and do not depend on it, the cost
    model's capacities do.
    """

    distances: tuple
    latency_ns: tuple | None = None
    bandwidth_mbps: tuple | None = None
    bandwidth_streams: tuple | None = None

    @property
    def size(self) -> int:
        return len(self.distances)

    def remote_ratio(self, local: int, node: int) -> float:
        """How many times slower memory on ``node`` is than local memory."""
        if local == node:
            return 1.0
        row = self.latency_ns[local] if self.latency_ns else None
        if row is not None and row[local] > 0:
            return row[node] / row[local]
        row = self.bandwidth_mbps[local] if self.bandwidth_mbps else None
        if row is not None and row[node] > 0:
            return row[local] / row[node]
        base = self.distances[local][local] or 10
        return self.distances[local][node] / base

    @classmethod
    def uniform(cls, n: int, remote: int = 21) -> 'Topology':
        return cls(tuple(tuple(10 if i == j else remote for j in range(n))
                         for i in range(n)))


@dataclasses.dataclass(frozen=True, slots=True)
class Observation:
    """One domain's smoothed metrics and where it runs and lives.

    ``cpu`` maps node -> fraction of the domain's vCPU time on that node,
    ``memory`` maps node -> fraction of its memory on that node.
    """

    llc_hit_rate: float
    cycle_loss: float
    ipc: float
    cpu: dict
    memory: dict


@dataclasses.dataclass
class Levels:
    """Per-node and per-pair overhead levels of one host."""

    llc: list
    mc: list
    inter: list  # inter[L][i], 0 on the diagonal
    rml: list    # rml[L][i], 0 on the diagonal

    @property
    def size(self) -> int:
        return len(self.llc)

    def overhead_matrix(self, extra: Sequence[float] | None = None) -> list:
        """overhead[L][i] of Figure 4 for every local node L.

        ``extra`` adds a per-node congestion term (used by the scheduler to
        account for guests placed since the last report).
        """
        n = self.size
        llc, mc = self.llc, self.mc
        bump = list(extra) if extra is not None else [0] * n
        rows = []
        for local in range(n):
            inter_row, rml_row = self.inter[local], self.rml[local]
            row = []
            for node in range(n):
                if node == local:
                    row.append(llc[node] + mc[node] + bump[node])
                else:
                    row.append(mc[node] + llc[local] + inter_row[node] +
                               rml_row[node] + bump[node])
            rows.append(row)
        return rows

    def to_dict(self) -> dict:
        return {'llc': list(self.llc), 'mc': list(self.mc),
                'inter': [list(r) for r in self.inter],
                'rml': [list(r) for r in self.rml]}


@dataclasses.dataclass
class Inputs:
    """The raw values the levels are classified from (for tuning).

    ``llc[i]``: LLC contention of node ``i`` (1 - hit rate); ``mc[i]``:
    cycle loss of local accesses to node ``i``; ``inter[L][i]``: cycle
    loss of accesses from node ``L`` to node ``i``; None where no guest
    gave a value (classified as 0). ``rml[L][i]``: local/remote ratio,
    always known: from the guests' IPC where ``rml_source[L][i]`` is
    ``'ipc'``, else the host's static ratio (``'static'``). Diagonals of
    the pair matrices are None.
    """

    llc: list
    mc: list
    inter: list
    rml: list
    rml_source: list

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def static_levels(topology: Topology,
                  thresholds: Thresholds = Thresholds()) -> Levels:
    """Levels of an idle host: only the static remote-latency term."""
    return estimate([], topology, thresholds)


def estimate(observations: Sequence[Observation], topology: Topology,
             thresholds: Thresholds = Thresholds()) -> Levels:
    """Classify the four overheads of every node and pair (Figure 4).

    The raw values come from :func:`measure`; each is classified by its
    ascending thresholds (a missing value counts as 0).
    """
    return classify_inputs(measure(observations, topology), thresholds)


def classify_inputs(inputs: Inputs,
                    thresholds: Thresholds = Thresholds()) -> Levels:
    """The levels of ``inputs`` under ``thresholds``."""
    n = len(inputs.llc)

    def level(value, which):
        return classify(value or 0.0, which)

    inter = [[0] * n for _ in range(n)]
    rml = [[0] * n for _ in range(n)]
    for local in range(n):
        for node in range(n):
            if node != local:
                inter[local][node] = level(inputs.inter[local][node],
                                           thresholds.inter)
                rml[local][node] = level(inputs.rml[local][node],
                                         thresholds.rml)
    return Levels(llc=[level(v, thresholds.llc) for v in inputs.llc],
                  mc=[level(v, thresholds.mc) for v in inputs.mc],
                  inter=inter, rml=rml)


def measure(observations: Sequence[Observation],
            topology: Topology) -> Inputs:
    """The raw value of each overhead of every node and pair.

    Attribution (documented in doc/source/admin/estimator.rst):

    * LLC(i): 1 - the vCPU-time-weighted mean LLC hit rate of the domains
      running on node i (the LLC of socket i).
    * MC(i): the highest cycle loss among domains that both run on i and
      keep memory on i (local accesses to controller i).
    * INTER(L, i): the highest cycle loss among domains running on L with
      memory on i.
    * RML(L, i): mean IPC of domains running on L with local memory over
      mean IPC of domains running on L with memory on i; the static latency
      ratio of the topology when either side has no domain.
    """
    n = topology.size
    hit_sum = [0.0] * n
    hit_weight = [0.0] * n
    cycle_loss = [[None] * n for _ in range(n)]
    ipc_sum = [[0.0] * n for _ in range(n)]
    ipc_weight = [[0.0] * n for _ in range(n)]
    for obs in observations:
        for cpu_node, cpu_w in obs.cpu.items():
            if cpu_w < MIN_WEIGHT or not 0 <= cpu_node < n:
                continue
            hit_sum[cpu_node] += cpu_w * obs.llc_hit_rate
            hit_weight[cpu_node] += cpu_w
            for mem_node, mem_w in obs.memory.items():
                if mem_w < MIN_WEIGHT or not 0 <= mem_node < n:
                    continue
                loss = max(obs.cycle_loss, 0.0)
                if cycle_loss[cpu_node][mem_node] is None or \
                        loss > cycle_loss[cpu_node][mem_node]:
                    cycle_loss[cpu_node][mem_node] = loss
                weight = cpu_w * mem_w
                ipc_sum[cpu_node][mem_node] += weight * obs.ipc
                ipc_weight[cpu_node][mem_node] += weight

    llc = [1.0 - hit_sum[i] / hit_weight[i] if hit_weight[i] else None
           for i in range(n)]
    mc = [cycle_loss[i][i] for i in range(n)]
    inter = [[None] * n for _ in range(n)]
    rml = [[None] * n for _ in range(n)]
    source = [[None] * n for _ in range(n)]
    for local in range(n):
        local_ipc = (ipc_sum[local][local] / ipc_weight[local][local]
                     if ipc_weight[local][local] else None)
        for node in range(n):
            if node == local:
                continue
            inter[local][node] = cycle_loss[local][node]
            remote_ipc = (ipc_sum[local][node] / ipc_weight[local][node]
                          if ipc_weight[local][node] else None)
            if local_ipc and remote_ipc:
                rml[local][node] = local_ipc / remote_ipc
                source[local][node] = 'ipc'
            else:
                rml[local][node] = topology.remote_ratio(local, node)
                source[local][node] = 'static'
    return Inputs(llc=llc, mc=mc, inter=inter, rml=rml, rml_source=source)
