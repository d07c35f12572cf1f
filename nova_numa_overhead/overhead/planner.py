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
"""Node selection and proportional shares (Liu & Li, sections 4.2 and 5.2).

The scheduler and the agent run the same planner: the scheduler over the
levels a host reported, the agent over the levels it measured, so the
overhead a host is scored at is the overhead its planner will place the
guest at.

Proportional policy, seen from a local node L (the node the guest's vCPUs
run on; when unknown every node is tried and the best plan kept):

1. A node with no active guests that can hold the whole request gets it:
   the local node first, then the nearest remote node whose overhead seen
   from the local node is at least two levels below the local node's.
2. Otherwise a step threshold starts at 0 and rises by 2 (overheads 0,
   1-2, 3-4, ...) until the nodes under it, at most ``max_nodes`` of them
   (nearest first within a step), can hold the request; more nodes are
   taken only when ``max_nodes`` nodes cannot hold it. When the local node
   could hold the request alone, only nodes cheaper than it share it:
   remote accesses cost latency the integer levels do not show.
3. Shares are proportional to ``1 / (1 + overhead)``, rounded to binary
   fractions of the request: every share is one power-of-two block
   (1/2, 1/4, 1/8 ... of the request), the blocks add up to the request and
   a lower overhead never gets a smaller block; equal overheads get equal
   blocks where blocks that add up allow it (three equal nodes cannot: two
   halves, the third none), and the highest-overhead nodes may get none.
   A share never exceeds the node's free memory; what a full node cannot
   take goes to the next lowest-overhead node with room.
"""

import bisect
import dataclasses
import functools
import math
from typing import Sequence

PROPORTIONAL = 'proportional'
LOCAL = 'local'
SPREAD = 'spread'
NONE = 'none'
POLICY_HELP = {
    PROPORTIONAL: 'spread memory over a few low-overhead nodes, in '
                  'proportion to their low overhead (Liu & Li)',
    LOCAL: 'fewest nodes, nearest to the vCPUs first (the kernel default)',
    SPREAD: 'even shares over all nodes with room',
    NONE: 'leave placement to the kernel; scored like local',
}
POLICIES = tuple(POLICY_HELP)
DEFAULT_MAX_NODES = 4
MAX_NODES_LIMIT = 64
STEP = 2
# Smallest block: 1/2**SEARCH_EXPONENT of the request for the exact search
# (up to SEARCH_LIMIT nodes), 1/2**MAX_EXPONENT for the greedy rounding.
SEARCH_EXPONENT = 6
SEARCH_LIMIT = 8
MAX_EXPONENT = 16
# Request-size buckets: 256 MiB * 2**k and 384 MiB * 2**k up to 6 TiB, so
# the usual flavor sizes (512 MiB, 1, 2, 3, 4, 6, 8 ... GiB) are exact. The
# agent ships its plan per bucket in its report; the scheduler scores a
# request at the smallest bucket that holds it.
BUCKETS = tuple(sorted(b * 2 ** k for b in (256, 384) for k in range(15)))


def bucket_index(memory_mb: int) -> int:
    """Index of the smallest bucket that holds ``memory_mb`` (the largest
    one beyond).
    """
    return min(bisect.bisect_left(BUCKETS, memory_mb), len(BUCKETS) - 1)


@dataclasses.dataclass
class HostView:
    """What the planner needs to know of a host, per NUMA node.

    ``overhead[L][i]`` is the overhead of node i seen from local node L
    (see :mod:`nova_numa_overhead.overhead.estimator`). ``local_nodes`` are
    the nodes with CPUs, the only possible local nodes.
    """

    free_mb: list
    total_mb: list
    guests: list
    overhead: list
    distances: list
    local_nodes: tuple = ()
    # What does not depend on the request, per local node: the candidate
    # order, the step groups and the empty nodes. Not init fields, so that
    # dataclasses.replace() starts them afresh.
    _orders: dict = dataclasses.field(default_factory=dict, repr=False,
                                      compare=False, init=False)
    _steps: dict = dataclasses.field(default_factory=dict, repr=False,
                                     compare=False, init=False)
    _empties: dict = dataclasses.field(default_factory=dict, repr=False,
                                       compare=False, init=False)
    _bounds: list = dataclasses.field(default=None, repr=False,
                                      compare=False, init=False)

    def __post_init__(self):
        if not self.local_nodes:
            self.local_nodes = tuple(range(len(self.free_mb)))

    def order_from(self, local: int) -> list:
        """Nodes with free memory by step group, then distance (4.2)."""
        order = self._orders.get(local)
        if order is None:
            row = self.overhead[local]
            dist = self.distances[local]
            order = self._orders[local] = sorted(
                (i for i in range(self.size) if self.free_mb[i] > 0),
                key=lambda i: (math.ceil(row[i] / STEP), dist[i], row[i], i))
        return order

    def locals_by_bound(self) -> list:
        """(local node, lowest overhead seen from it of a node with free
        memory), lowest first: no plan from a local node costs less.
        """
        ranked = self._bounds
        if ranked is None:
            free = [i for i in range(self.size) if self.free_mb[i] > 0]
            ranked = self._bounds = sorted(
                ((local, min((self.overhead[local][i] for i in free),
                             default=math.inf))
                 for local in self.local_nodes),
                key=lambda pair: (pair[1], pair[0]))
        return ranked

    def steps_from(self, local: int, max_nodes: int) -> list:
        """(nodes, their free MiB) under each step threshold, ascending:
        at most ``max_nodes`` nodes, nearest first within a step (4.2).
        """
        key = (local, max_nodes)
        steps = self._steps.get(key)
        if steps is None:
            order = self.order_from(local)
            row = self.overhead[local]
            free = self.free_mb
            group = {i: math.ceil(row[i] / STEP) for i in order}
            steps = []
            for step in sorted(set(group.values())):
                chosen = [i for i in order if group[i] <= step][:max_nodes]
                steps.append((chosen, sum(free[i] for i in chosen)))
            self._steps[key] = steps
        return steps

    def empties_from(self, local: int) -> list:
        """Nodes without guests that may take a whole request alone, best
        first: the local node, then remote nodes at least one step
        cheaper than it, nearest first.
        """
        empties = self._empties.get(local)
        if empties is None:
            dist = self.distances[local]
            row = self.overhead[local]
            empties = self._empties[local] = sorted(
                (i for i in range(self.size) if self.guests[i] == 0 and
                 (i == local or row[i] <= row[local] - STEP)),
                key=lambda i: (i != local, dist[i], row[i], i))
        return empties

    @property
    def size(self) -> int:
        return len(self.free_mb)


@dataclasses.dataclass(frozen=True)
class Plan:
    """Where a guest's memory goes: node -> MiB, and what it will cost."""

    policy: str
    local: int
    shares: dict
    overhead: float  # share-weighted mean of overhead[local][node]
    worst: float     # highest overhead among the chosen nodes

    @property
    def nodes(self) -> list:
        return sorted(self.shares)


def _finish(policy, view, local, nodes, amounts) -> 'Plan | None':
    shares = {n: mb for n, mb in zip(nodes, amounts) if mb > 0}
    if not shares:
        return None
    row = view.overhead[local]
    total = sum(shares.values())
    mean = sum(row[n] * mb for n, mb in shares.items()) / total
    return Plan(policy=policy, local=local, shares=shares,
                overhead=round(mean, 3),
                worst=max(row[n] for n in shares))


def split_binary(request_mb: int, overheads: Sequence[float],
                 caps: Sequence[int]) -> 'list | None':
    """Split ``request_mb`` over nodes with these overheads (section 5.2).

    Returns MiB per node, in the order given, or None when the nodes' free
    memory (``caps``) cannot hold the request. The paper's example:
    2**8 GiB over overheads 2, 4, 5 gives 2**7, 2**6 and 2**6 GiB.
    """
    n = len(overheads)
    if n == 0 or sum(caps) < request_mb:
        return None
    fractions = binary_fractions(tuple(float(o) for o in overheads))
    amounts = [int(request_mb * f) for f in fractions]
    by_overhead = sorted(range(n), key=lambda i: (overheads[i], i))
    amounts[by_overhead[0]] += request_mb - sum(amounts)
    excess = 0
    for i in range(n):
        if amounts[i] > caps[i]:
            excess += amounts[i] - caps[i]
            amounts[i] = caps[i]
    for i in by_overhead:
        if not excess:
            break
        take = min(excess, caps[i] - amounts[i])
        amounts[i] += take
        excess -= take
    return amounts


@functools.lru_cache(maxsize=4096)
def binary_fractions(overheads: tuple) -> tuple:
    """Fractions 2**-k (or 0) of the request per node, adding up to 1.

    The ideal share of a node is proportional to ``1 / (1 + overhead)``.
    Among the assignments of power-of-two blocks where a lower overhead
    (then a lower position among equals) never gets a smaller block, the
    one closest to the ideal shares (least squares) wins: nodes of equal
    overhead get equal blocks where blocks that add up to 1 allow it, and
    those left without one are the last. Above ``SEARCH_LIMIT`` nodes a
    greedy rounding is used instead.
    """
    n = len(overheads)
    weights = [1.0 / (1.0 + max(o, 0.0)) for o in overheads]
    total_w = sum(weights)
    ideal = [w / total_w for w in weights]
    order = sorted(range(n), key=lambda i: (overheads[i], i))
    if n > SEARCH_LIMIT:
        return _greedy_fractions(overheads, ideal)
    best = [math.inf, None]
    exps = [0] * n

    def search(pos, min_exp, room, error):
        # Power-of-two sums are exact in binary floating point.
        if error >= best[0]:
            return
        if pos == n or room == 0.0:
            if room == 0.0:
                rest = sum(ideal[order[j]] ** 2 for j in range(pos, n))
                if error + rest < best[0]:
                    best[0] = error + rest
                    best[1] = [2.0 ** -exps[order[j]] if j < pos else 0.0
                               for j in range(n)]
            return
        node = order[pos]
        if pos and overheads[node] == overheads[order[pos - 1]]:
            choices = (exps[order[pos - 1]],)
        else:
            choices = range(min_exp, SEARCH_EXPONENT + 1)
        for exp in choices:
            size = 2.0 ** -exp
            if size > room:
                continue
            exps[node] = exp
            search(pos + 1, exp, room - size,
                   error + (size - ideal[node]) ** 2)

    search(0, 0, 1.0, 0.0)
    by_position = best[1]
    fractions = [0.0] * n
    for pos, node in enumerate(order):
        fractions[node] = by_position[pos]
    return tuple(fractions)


def _greedy_fractions(overheads, ideal):
    n = len(overheads)
    exps = [min(MAX_EXPONENT, max(0, round(-math.log2(f)))) for f in ideal]

    def block(i):
        return 2.0 ** -exps[i]

    total = sum(block(i) for i in range(n))
    while total > 1.0:
        i = max((i for i in range(n) if exps[i] < MAX_EXPONENT),
                key=lambda i: (block(i) / ideal[i], overheads[i], i))
        total -= block(i) / 2
        exps[i] += 1
    while total < 1.0:
        room = 1.0 - total
        i = max((i for i in range(n) if block(i) <= room),
                key=lambda i: (ideal[i] / block(i), -overheads[i], -i))
        total += block(i)
        exps[i] -= 1
    return tuple(block(i) for i in range(n))


def _select(view: HostView, local: int, request_mb: int,
            max_nodes: int) -> list:
    row = view.overhead[local]
    free = view.free_mb
    # Raise the step threshold (0, 2, 4, ...) until the candidates under
    # it, at most max_nodes of them, hold the request.
    for chosen, room in view.steps_from(local, max_nodes):
        if room >= request_mb:
            # A remote node only shares the load of a local node that can
            # hold it alone when it is cheaper than the local node.
            if local in chosen and free[local] >= request_mb:
                chosen = [i for i in chosen
                          if i == local or row[i] < row[local]]
            return chosen
    # max_nodes nodes cannot hold it: take more, lowest overhead first.
    chosen = []
    room = 0
    for node in view.order_from(local):
        chosen.append(node)
        room += free[node]
        if room >= request_mb:
            break
    return chosen


def _proportional(view, local, request_mb, max_nodes):
    row = view.overhead[local]
    # An empty remote node only wins over the local node when it is at
    # least two levels cheaper (the swap FIFO's margin): its remote-latency
    # and interconnect levels count, and its links carry no traffic yet.
    free = view.free_mb
    for node in view.empties_from(local):
        if free[node] >= request_mb:
            return _finish(PROPORTIONAL, view, local, [node], [request_mb])
    nodes = _select(view, local, request_mb, max_nodes)
    amounts = split_binary(request_mb, [row[i] for i in nodes],
                           [free[i] for i in nodes])
    if amounts is None:
        return None
    return _finish(PROPORTIONAL, view, local, nodes, amounts)


def _local(view, local, request_mb, policy):
    dist = view.distances[local]
    nodes = sorted(range(view.size), key=lambda i: (dist[i], i))
    amounts = []
    left = request_mb
    for node in nodes:
        take = min(left, max(view.free_mb[node], 0))
        amounts.append(take)
        left -= take
    if left:
        return None
    return _finish(policy, view, local, nodes, amounts)


def _spread(view, local, request_mb):
    nodes = [i for i in range(view.size) if view.free_mb[i] > 0]
    if sum(view.free_mb[i] for i in nodes) < request_mb:
        return None
    amounts = dict.fromkeys(nodes, 0)
    left = request_mb
    open_nodes = sorted(nodes, key=lambda i: (view.free_mb[i], i))
    while left and open_nodes:
        each = left // len(open_nodes)
        extra = left - each * len(open_nodes)
        still_open = []
        for idx, node in enumerate(open_nodes):
            want = each + (1 if idx >= len(open_nodes) - extra else 0)
            take = min(want, view.free_mb[node] - amounts[node])
            amounts[node] += take
            left -= take
            if amounts[node] < view.free_mb[node]:
                still_open.append(node)
        open_nodes = still_open
    return _finish(SPREAD, view, local, nodes, [amounts[i] for i in nodes])


def plan(view: HostView, request_mb: int, policy: str = PROPORTIONAL,
         max_nodes: int = DEFAULT_MAX_NODES,
         local: int | None = None) -> 'Plan | None':
    """Plan a guest of ``request_mb`` MiB on this host.

    :param local: the node the guest's vCPUs run on; None tries every node
        with CPUs and keeps the plan with the lowest overhead.
    :returns: the plan, or None when the host's free memory cannot hold it.
    :raises ValueError: for an unknown policy or max_nodes < 1.
    """
    if policy not in POLICY_HELP:
        raise ValueError('unknown placement policy %r' % policy)
    if max_nodes < 1:
        raise ValueError('max_nodes must be >= 1, got %r' % max_nodes)
    if request_mb <= 0:
        raise ValueError('request must be > 0 MiB, got %r' % request_mb)
    if local is not None:
        locals_ = ((local, -math.inf),)
    else:
        locals_ = view.locals_by_bound()
    best = None
    for node, bound in locals_:
        # Every share sits on a node with free memory, so no plan from
        # here costs less than the cheapest such node: past the best plan
        # (and its rounding), the rest cannot win.
        if best is not None and bound > best.overhead + 0.001:
            break
        if policy == PROPORTIONAL:
            candidate = _proportional(view, node, request_mb, max_nodes)
        elif policy == SPREAD:
            candidate = _spread(view, node, request_mb)
        else:
            candidate = _local(view, node, request_mb, policy)
        if candidate is not None and (
                best is None or _rank(view, candidate) < _rank(view, best)):
            best = candidate
    return best


def _rank(view: HostView, plan: Plan) -> tuple:
    # Lowest overhead; on a tie, fewer nodes, fewer guests already running
    # there and more of it local: what the integer levels do not show
    # (yet) still costs.
    return (plan.overhead, len(plan.shares),
            sum(view.guests[n] for n in plan.shares),
            -plan.shares.get(plan.local, 0), plan.local)


def plan_buckets(view: HostView, policy: str = PROPORTIONAL,
                 max_nodes: int = DEFAULT_MAX_NODES) -> list:
    """Planned overhead of a guest of every request-size bucket.

    The agent ships this in its report and the scheduler looks requests up
    in it: entry ``k`` is ``plan(view, BUCKETS[k], policy,
    max_nodes).overhead``. The list stops before the first bucket the
    host's free memory cannot hold (every larger one cannot either).
    """
    free = sum(max(f, 0) for f in view.free_mb)
    planned = []
    for bucket in BUCKETS:
        if bucket > free:
            break
        result = plan(view, bucket, policy, max_nodes)
        if result is None:
            break
        planned.append(result.overhead)
    return planned
