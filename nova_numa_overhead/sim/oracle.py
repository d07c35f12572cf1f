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
"""The oracle: the best placement of vCPUs and memory known, an upper
bound of every policy the simulator runs.

For every segment of the measured window (seconds with the same guests
and phases) it looks for the placement of the guests Nova did not pin
that maximises the window's objective (each guest's throughput,
normalised to running alone, weighted so that the segments add up to the
policies' means), with every guest's whole memory placed, capacity
respected, and moves free (no migration traffic, no lost time: the
oracle is where placement could be, not how to get there). Candidates per
guest: its vCPUs on one node; its memory on one node, evenly over all,
or in halves between its vCPU node and one other (pages spread over each
node's controllers); on hosts of more than four nodes the remote choices
are the ``NEAREST`` nodes to the vCPU node.

* **exhaustive**: where the candidate placements of all guests number at
  most ``EXHAUSTIVE_LIMIT``, every one is evaluated: the optimum over that
  grid.
* **best known**: otherwise, coordinate descent (every candidate of one
  guest at a time, evaluated together) from many starts: every policy's
  placement in every second of the segment, a balanced and
  ``RANDOM_STARTS`` random co-located placements; the best ``POLISHED``
  starts descend until nothing improves (at most ``MAX_PASSES`` passes),
  the next ``ONE_PASS`` for one pass.

Every policy's placements are evaluated as they are (exactly, as seeds),
so the search is worth at least every policy's own seconds, which also
pay for migrations; and a second of the window is then worth the best of
the search and of every policy's measured second, so no policy can beat
the oracle. The output says how often a policy's own second was better
than the search (it should be never).

**The fair oracle** (``fair_mean`` in the oracle's output) is the same
search with every guest held to ``FAIR_FLOOR`` of its throughput under
Nova's default in the segment (a shortfall costs ``FAIR_PENALTY`` times
its weight): the best placement known that harms no guest the way the
do-no-harm rule counts harm (:mod:`nova_numa_overhead.sim.rules`). Where
it is far below the oracle, the oracle's mean comes from sacrificing
guests, and the guest and oracle rules look incompatible. Evidence, not
proof: the search is a heuristic (a better fair placement may exist), its
floor holds per segment (stricter than the rule, which takes each guest's
whole-run mean), and the penalty is soft (``fair_worst_guest`` says how
well it held). It takes no policy's second as its own (those may break
the floor) and uses its own random stream. Where the placement it found
is better than the oracle's own search (the penalty leads the descent
elsewhere), the oracle takes it: every placement found is one the oracle
may take.
"""

import itertools
import random

import numpy

from nova_numa_overhead.sim import model
from nova_numa_overhead.sim import policies as policies_mod
from nova_numa_overhead.sim import presets
from nova_numa_overhead.sim import rules

EXHAUSTIVE_LIMIT = 4096
RANDOM_STARTS = 3
POLISHED = 2
ONE_PASS = 4
MAX_PASSES = 6
# Remote nodes a guest's memory may go to, nearest first, on big hosts.
NEAREST = 3
# Candidates are ranked at this precision; the winner is re-solved fully.
RANK_TOLERANCE = 1e-3
BATCH = 512
# The fair oracle: every guest at least this of its Nova-default
# throughput (the do-no-harm rule's floor); a shortfall costs this much.
FAIR_FLOOR = rules.GUEST
FAIR_PENALTY = 50.0
EXHAUSTIVE = 'exhaustive'
BEST_KNOWN = 'best-known'


class Problem:
    """One host, one segment: the guests, their weights, the candidates."""

    def __init__(self, spec, guests, weights, fixed=None, floors=None):
        self.spec = spec
        self.solver = model.Solver(spec)
        self.names = sorted(guests)
        self.guests = guests            # name -> (vcpus, memory_mb, Profile)
        loads = [model.Load(name, guests[name][0], guests[name][2], {0: 1.0},
                            {0: 1.0}) for name in self.names]
        _, _, self.params = self.solver.arrays(loads)
        self.weights = numpy.array([weights.get(n, 0.0) for n in self.names])
        self.solo = numpy.array([self.solver.solo_ips(guests[n][2],
                                                      guests[n][0])
                                 for n in self.names])
        self.mb = numpy.array([guests[n][1] for n in self.names],
                              dtype=float)
        self.caps = numpy.array([node.memory_mb for node in spec.nodes],
                                dtype=float) + 1.0
        self.fixed = fixed or {}        # name -> (cpu row, mem row)
        self.free = [i for i, n in enumerate(self.names)
                     if n not in self.fixed]
        self.evals = 0
        n, k = spec.size, self.solver.k
        self.ctrl_even = numpy.zeros((n, k))
        for node in range(n):
            first = spec.first_controller(node)
            ctrls = spec.nodes[node].controllers
            self.ctrl_even[node, first:first + ctrls] = 1.0 / ctrls
        self.cands = {i: self._candidates() for i in self.free}
        # The fair oracle's floor per guest (0: none).
        self.floors = None
        if floors:
            self.floors = numpy.array([FAIR_FLOOR * floors.get(n, 0.0)
                                       for n in self.names])

    def _candidates(self) -> tuple:
        """(cpu rows C x N, memory rows C x K) of one guest's candidates."""
        n = self.spec.size
        cpus, mems = [], []
        for c in range(n):
            others = sorted((o for o in range(n) if o != c),
                            key=lambda o: (self.spec.latency_ns[c][o], o))
            if n > 4:
                others = others[:NEAREST]
            pages = [numpy.eye(n)[m] for m in [c] + others]
            if n > 1:
                pages.append(numpy.full(n, 1.0 / n))
                for o in others:
                    if o != c:
                        row = numpy.zeros(n)
                        row[c] = row[o] = 0.5
                        pages.append(row)
            for row in pages:
                cpus.append(numpy.eye(n)[c])
                mems.append(row @ self.ctrl_even)
        return numpy.array(cpus), numpy.array(mems)

    def usage(self, mem) -> numpy.ndarray:
        """MiB per node of placements ``mem`` (B x G x K)."""
        return (mem * self.mb[None, :, None]).sum(1) @ \
            self.solver.ctrl_onehot

    def evaluate(self, cpu, mem, warm=None, tolerance=model.TOLERANCE):
        """Objective of B placements (infeasible ones: -inf), per-guest
        throughput, and the solver state.
        """
        self.evals += cpu.shape[0]
        ips, state = self.solver.ips_batch(cpu, mem, self.params, warm,
                                           tolerance)
        tput = ips / self.solo[None, :]
        value = tput @ self.weights
        if self.floors is not None:
            short = numpy.maximum(self.floors[None, :] - tput, 0.0)
            value = value - FAIR_PENALTY * (short @ self.weights)
        over = (self.usage(mem) > self.caps[None, :]).any(1)
        value = numpy.where(over, -numpy.inf, value)
        return value, tput, state

    def start(self, rows: dict) -> tuple | None:
        """A full placement (arrays G x N, G x K) from name -> rows."""
        n, k = self.spec.size, self.solver.k
        cpu = numpy.zeros((len(self.names), n))
        mem = numpy.zeros((len(self.names), k))
        for i, name in enumerate(self.names):
            row = self.fixed.get(name) or rows.get(name)
            if row is None:
                return None
            cpu[i], mem[i] = row
        return cpu, mem


def rows_of(problem, snap, name):
    """A snapshot's (cpu dict, controller MiB) as normalised rows."""
    if name not in snap:
        return None
    cpu, pages = snap[name]
    total = sum(pages.values())
    if total <= 0 or not cpu:
        return None
    c = numpy.zeros(problem.spec.size)
    for node, frac in cpu.items():
        c[node] = frac
    m = numpy.zeros(problem.solver.k)
    for ctrl, mb in pages.items():
        m[ctrl] = mb / total
    return c, m


def descend(problem, cpu, mem, passes) -> tuple:
    """Coordinate descent: the best candidate of each guest in turn."""
    value, tput, state = problem.evaluate(cpu[None], mem[None])
    value, tput = value[0], tput[0]
    for _ in range(passes):
        improved = False
        for i in problem.free:
            c_cpu, c_mem = problem.cands[i]
            b = len(c_cpu)
            cpus = numpy.repeat(cpu[None], b, 0)
            mems = numpy.repeat(mem[None], b, 0)
            cpus[:, i] = c_cpu
            mems[:, i] = c_mem
            warm = (numpy.repeat(state[0], b, 0),
                    numpy.repeat(state[1], b, 0))
            values, _, _ = problem.evaluate(cpus, mems, warm,
                                            RANK_TOLERANCE)
            j = int(numpy.argmax(values))
            if values[j] > value + 1e-9:
                exact, t, st = problem.evaluate(
                    cpus[j:j + 1], mems[j:j + 1],
                    (state[0].copy(), state[1].copy()))
                if exact[0] > value + 1e-9:
                    value, tput = exact[0], t[0]
                    cpu, mem = cpus[j], mems[j]
                    state = st
                    improved = True
        if not improved:
            break
    return value, tput


def exhaustive(problem, base_cpu, base_mem) -> tuple:
    """Every combination of the free guests' candidates."""
    best = (-numpy.inf, None)
    free = problem.free
    ranges = [range(len(problem.cands[i][0])) for i in free]
    combos = itertools.product(*ranges)
    while True:
        chunk = list(itertools.islice(combos, BATCH))
        if not chunk:
            break
        idx = numpy.array(chunk)
        b = len(chunk)
        cpus = numpy.repeat(base_cpu[None], b, 0)
        mems = numpy.repeat(base_mem[None], b, 0)
        for col, i in enumerate(free):
            cpus[:, i] = problem.cands[i][0][idx[:, col]]
            mems[:, i] = problem.cands[i][1][idx[:, col]]
        values, tputs, _ = problem.evaluate(cpus, mems)
        j = int(numpy.argmax(values))
        if values[j] > best[0]:
            best = (values[j], tputs[j])
    return best


def _starts(problem, seeds, rng) -> list:
    """Distinct full placements to start from: the seeds, then a balanced
    and random co-located ones.
    """
    starts = []
    seen = set()
    n = problem.spec.size
    extra = []
    for k in range(RANDOM_STARTS + 1):
        rows = {}
        for j, i in enumerate(problem.free):
            node = (j % n) if k == 0 else rng.randrange(n)
            rows[problem.names[i]] = (numpy.eye(n)[node],
                                      problem.ctrl_even[node])
        extra.append(rows)
    for seed in list(seeds) + extra:
        placed = problem.start(seed)
        if placed is None:
            continue
        key = (placed[0].round(6).tobytes(), placed[1].round(6).tobytes())
        if key not in seen:
            seen.add(key)
            starts.append(placed)
    return starts


def _grid_size(problem) -> int:
    total = 1
    for i in problem.free:
        total *= len(problem.cands[i][0])
        if total > EXHAUSTIVE_LIMIT:
            break
    return total


def search(problem, seeds, rng) -> tuple:
    """(objective, name -> throughput, kind) of the best placement."""
    starts = _starts(problem, seeds, rng)
    if not starts:
        return -numpy.inf, {}, BEST_KNOWN
    cpus = numpy.array([s[0] for s in starts])
    mems = numpy.array([s[1] for s in starts])
    values, tputs, _ = problem.evaluate(cpus, mems)
    order = numpy.argsort(-values)
    best = (values[order[0]], tputs[order[0]])
    kind = BEST_KNOWN
    if problem.free and _grid_size(problem) <= EXHAUSTIVE_LIMIT:
        kind = EXHAUSTIVE
        found = exhaustive(problem, cpus[0], mems[0])
        if found[0] > best[0]:
            best = found
    else:
        for rank, s in enumerate(order[:POLISHED + ONE_PASS]):
            if values[s] == -numpy.inf:
                break
            passes = MAX_PASSES if rank < POLISHED else 1
            found = descend(problem, cpus[s], mems[s], passes)
            if found[0] > best[0]:
                best = found
    if best[0] == -numpy.inf:
        return best[0], {}, kind
    return float(best[0]), dict(zip(problem.names,
                                    (float(v) for v in best[1]))), kind


def _host_search(scenario, timeline, segment, results, snap, h, rng,
                 floors=None):
    """The search on host ``h`` for one segment: (value, tput, kind)."""
    plans = {p.name: p for _, p in scenario.arrivals()}
    names = [n for n in segment.guests if scenario.hosts == 1 or n in snap]
    if not names:
        return 0.0, {}, None
    guests = {n: (plans[n].vcpus, plans[n].memory_mb,
                  presets.PROFILES[segment.guests[n]]) for n in names}
    problem = Problem(scenario.host, guests, timeline.weights(),
                      floors=floors)
    for name in names:
        if plans[name].pinned:
            rows = rows_of(problem, snap, name)
            if rows is not None:
                problem.fixed[name] = rows
    problem.free = [j for j, n in enumerate(problem.names)
                    if n not in problem.fixed]
    seeds = []
    for other in results.values():
        for t in range(segment.start, segment.end + 1):
            osnaps = other.snapshots.get(t)
            if not osnaps or h >= len(osnaps):
                continue
            rows = {n: rows_of(problem, osnaps[h], n) for n in names}
            seeds.append({n: r for n, r in rows.items() if r is not None})
    return search(problem, seeds, rng)


def _segment_best(scenario, timeline, segment, results, rng, kinds,
                  floors=None):
    """Per-guest throughput of the best placement known for a segment."""
    # A cluster: the guests' hosts as Nova's default and ours left them
    # (every policy's own seconds still bound it below).
    assignments = list(results.values())[:1] if scenario.hosts == 1 else [
        r for name, r in results.items()
        if name in (policies_mod.BASELINE, policies_mod.DEFAULT)] or \
        list(results.values())
    best = None
    for res in assignments:
        snaps = res.snapshots.get(segment.end)
        if not snaps:
            continue
        total_value, total_tput = 0.0, {}
        for h, snap in enumerate(snaps):
            value, tput, kind = _host_search(scenario, timeline, segment,
                                             results, snap, h, rng, floors)
            if kind is not None:
                kinds.add(kind)
            total_value += value
            total_tput.update(tput)
        if best is None or total_value > best[0]:
            best = (total_value, total_tput)
    return best[1] if best else {}


def oracle(scenario, timeline, results):
    """The oracle's PolicyResult for a single-host or cluster run."""
    from nova_numa_overhead.sim import runner
    weights = timeline.weights()
    rng = random.Random(scenario.seed)
    fair_rng = random.Random(scenario.seed + 1)
    nova = dict(results[policies_mod.BASELINE].samples) \
        if policies_mod.BASELINE in results else None
    kinds = set()
    by_policy = [{t: s for t, s in r.samples} for r in results.values()]
    samples, searched, fair_samples = [], [], []
    policy_best = 0
    for segment in timeline.segments():
        found = _segment_best(scenario, timeline, segment, results, rng,
                              kinds)
        found_value = sum(weights.get(g, 0.0) * v for g, v in found.items())
        if nova is not None:
            fair = _fair_segment(scenario, timeline, segment, results,
                                 fair_rng, nova)
            fair_samples += [(t, fair) for t in
                             range(segment.start, segment.end + 1)]
            # A placement the fair search found is one the oracle may
            # take: where it is better, the oracle's search missed it.
            value = sum(weights.get(g, 0.0) * v for g, v in fair.items())
            if value > found_value:
                found, found_value = fair, value
        for t in range(segment.start, segment.end + 1):
            searched.append((t, found))
            best, best_value = found, found_value
            for sample in by_policy:
                s = sample.get(t)
                if s is None:
                    continue
                value = sum(weights.get(g, 0.0) * v for g, v in s.items())
                if value > best_value * (1 + model.TOLERANCE):
                    best, best_value = s, value
                    policy_best += 1
            samples.append((t, best))
    recorder = runner.Recorder(timeline)
    recorder.samples = samples
    res = runner.PolicyResult(policy=policies_mod.ORACLE,
                              throughput=recorder.throughput())
    recorder.samples = searched
    res.extra['search_mean'] = sum(recorder.throughput().values()) / max(
        len(res.throughput), 1)
    res.extra['kind'] = EXHAUSTIVE if kinds == {EXHAUSTIVE} else BEST_KNOWN
    res.extra['policy_best_seconds'] = policy_best
    res.extra['seconds'] = len(samples)
    if nova is not None:
        recorder.samples = fair_samples
        fair = recorder.throughput()
        base = results[policies_mod.BASELINE].throughput
        res.extra['fair_mean'] = sum(fair.values()) / max(len(fair), 1)
        worst = [v / base[g] for g, v in fair.items() if base.get(g)]
        res.extra['fair_worst_guest'] = min(worst) if worst else None
    return res


def _fair_segment(scenario, timeline, segment, results, rng, nova) -> dict:
    """The fair oracle's per-guest throughput for one segment (``nova``:
    second -> Nova's default's per-guest throughput).
    """
    # Nova's run records every second of the measured window, so every
    # segment has its floors.
    seconds = [nova[t] for t in range(segment.start, segment.end + 1)
               if t in nova]
    floors = {g: sum(s.get(g, 0.0) for s in seconds) / len(seconds)
              for g in segment.guests} if seconds else {}
    return _segment_best(scenario, timeline, segment, results, rng, set(),
                         floors)
