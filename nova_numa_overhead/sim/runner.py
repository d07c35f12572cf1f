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
"""Runs a scenario under every policy and collects the numbers.

For each policy a fresh simulated host is built. Guests arrive one every
``arrival_interval`` seconds in an order the seed shuffles, leave and
change phase when the scenario says; every simulated second the events
happen, the policy acts, the host does what its kernel does (first touch,
NUMA balancing, the migration queue), and each guest's throughput
(normalised to running alone with its current profile) is recorded.
A guest's result is its mean over the seconds it ran in the measured
window (the last ``measure`` seconds); a policy's mean is the mean over
guests.

The oracle is computed afterwards (:mod:`.oracle`), seeded with every
policy's placements.
"""

import dataclasses

from nova_numa_overhead.sim import backend as backend_mod
from nova_numa_overhead.sim import host as host_mod
from nova_numa_overhead.sim import oracle as oracle_mod
from nova_numa_overhead.sim import policies as policies_mod
from nova_numa_overhead.sim import presets

DEFAULT_POLICIES = policies_mod.COMPARED + (policies_mod.ORACLE,)


@dataclasses.dataclass
class PolicyResult:
    policy: str
    throughput: dict            # guest -> normalised throughput
    moved_mb: float = 0.0
    moved_by: dict = dataclasses.field(default_factory=dict)
    oom_kills: int = 0
    samples: list = dataclasses.field(default_factory=list)
    snapshots: dict = dataclasses.field(default_factory=dict)
    extra: dict = dataclasses.field(default_factory=dict)

    @property
    def mean(self) -> float:
        values = list(self.throughput.values())
        return sum(values) / len(values) if values else 0.0


@dataclasses.dataclass
class Segment:
    """Seconds of the measured window with the same guests and phases."""

    start: int                  # first second (inclusive)
    end: int                    # last second (inclusive)
    guests: dict                # name -> profile name


class Timeline:
    """When every guest arrives, leaves and changes phase."""

    def __init__(self, scenario):
        self.scenario = scenario
        self.events = {}
        self.life = {}
        total = scenario.steps()
        for at, plan in scenario.arrivals():
            self.events.setdefault(at, []).append(('arrive', plan))
            end = total
            if plan.leave_at is not None:
                end = min(total, at + plan.leave_at)
                self.events.setdefault(end, []).append(('leave', plan))
            for phase in plan.phases:
                if at + phase.at < end:
                    self.events.setdefault(at + phase.at, []).append(
                        ('phase', (plan, phase.profile)))
            self.life[plan.name] = (at, end)
        self.steps = total
        self.window = max(0, total - scenario.measure)

    def at(self, second: int) -> list:
        # Departures first: their memory is free for who arrives.
        order = {'leave': 0, 'phase': 1, 'arrive': 2}
        return sorted(self.events.get(second, ()),
                      key=lambda e: order[e[0]])

    def present(self, second: int) -> list:
        return [name for name, (a, e) in self.life.items()
                if a <= second < e]

    def weights(self) -> dict:
        """Guest -> weight of one of its measured seconds in the mean."""
        seconds = {}
        for t in range(self.window, self.steps):
            for name in self.present(t):
                seconds[name] = seconds.get(name, 0) + 1
        count = len(seconds)
        return {name: 1.0 / (count * s) for name, s in seconds.items()}

    def segments(self) -> list:
        """The measured window cut where guests or phases change."""
        plans = {p.name: p for _, p in self.scenario.arrivals()}
        out = []
        for t in range(self.window, self.steps):
            guests = {}
            for name in self.present(t):
                a = self.life[name][0]
                profile = plans[name].profile
                for phase in plans[name].phases:
                    if a + phase.at <= t:
                        profile = phase.profile
                guests[name] = profile
            if out and out[-1].guests == guests:
                out[-1].end = t
            else:
                out.append(Segment(t, t, guests))
        return out


def make_guest(plan, node_count: int) -> host_mod.Guest:
    nodes = plan.vcpu_nodes
    per = {}
    for v in range(plan.vcpus):
        node = nodes[v % len(nodes)]
        per[node] = per.get(node, 0) + 1
    first_ctrl = {}
    if plan.first_controller is not None and plan.first_touch:
        first_ctrl[plan.first_touch[0]] = plan.first_controller
    return host_mod.Guest(
        name=plan.name, vcpus=plan.vcpus, memory_mb=plan.memory_mb,
        profile=presets.PROFILES[plan.profile],
        cpu={n: c / plan.vcpus for n, c in per.items()},
        first_touch=tuple(plan.first_touch), first_ctrl=first_ctrl,
        extra_specs=dict(plan.extra_specs), pinned=plan.pinned,
        floating=plan.floating)


def controller_of(host, guest, node_ctrl: dict) -> None:
    """Translate a first-touch controller index to the host's numbering."""
    for node, ctrl in list(node_ctrl.items()):
        node_ctrl[node] = host.spec.first_controller(node) + ctrl


def snapshot(host) -> dict:
    """Where every guest's vCPUs and pages are: name -> (cpu, ctrl_pages)."""
    return {g.name: (dict(g.cpu), dict(g.ctrl_pages))
            for g in host.guests.values() if not g.oom}


class Recorder:
    """The measured window of one run: per-second samples, snapshots."""

    def __init__(self, timeline, tick=None):
        self.timeline = timeline
        self.samples = []       # (second, {guest: throughput})
        self.snapshots = {}     # second -> [placement per host]
        self.tick = tick

    def record(self, second: int, throughput: dict, hosts) -> None:
        if second >= self.timeline.window:
            self.samples.append((second, throughput))
            self.snapshots[second] = [snapshot(h) for h in hosts]
        if self.tick is not None:
            self.tick()

    def throughput(self) -> dict:
        """Guest -> its mean over the seconds it ran in the window."""
        total = {}
        count = {}
        for _, sample in self.samples:
            for guest, value in sample.items():
                total[guest] = total.get(guest, 0.0) + value
                count[guest] = count.get(guest, 0) + 1
        return {g: v / count[g] for g, v in total.items()}


def new_host(scenario, seed_offset: int = 0):
    host = host_mod.Host(scenario.host, balancing=scenario.balancing)
    hv = backend_mod.SimHypervisor(host, counters=scenario.counters,
                                   seed=scenario.seed * 7919 + seed_offset)
    return host, hv


def start_guest(host, hv, policy, plan) -> host_mod.Guest:
    guest = make_guest(plan, host.spec.size)
    controller_of(host, guest, guest.first_ctrl)
    policy.place(guest)
    hv.start(guest, preallocate=plan.preallocate)
    return guest


def apply_event(kind, payload, host, hv, policy):
    if kind == 'arrive':
        start_guest(host, hv, policy, payload)
    elif kind == 'leave':
        hv.stop(payload.name)
    else:
        plan, profile = payload
        guest = host.guests.get(plan.name)
        if guest is not None:
            guest.profile = presets.PROFILES[profile]


def result(name, recorder, hosts) -> PolicyResult:
    moved_by = {}
    for h in hosts:
        for kind, mb in h.moved_by.items():
            moved_by[kind] = moved_by.get(kind, 0.0) + mb
    return PolicyResult(
        policy=name, throughput=recorder.throughput(),
        moved_mb=sum(h.moved_mb for h in hosts), moved_by=moved_by,
        oom_kills=sum(h.oom_kills for h in hosts),
        samples=recorder.samples, snapshots=recorder.snapshots)


def run_policy(scenario, name: str, tick=None,
               options=None) -> PolicyResult:
    """One policy on a fresh host (``options``: :func:`run`'s)."""
    host, hv = new_host(scenario)
    policy = policies_mod.new(name, options)
    policy.attach(hv, scenario)
    timeline = Timeline(scenario)
    recorder = Recorder(timeline, tick)
    for second in range(timeline.steps):
        for kind, payload in timeline.at(second):
            apply_event(kind, payload, host, hv, policy)
        policy.step(float(second))
        host.step(float(second))
        solved = host.solve()
        hv.advance(solved)
        recorder.record(second, host.throughput(solved), [host])
    res = result(name, recorder, [host])
    if isinstance(policy, policies_mod.OverheadAware):
        res.extra['decisions'] = len(policy.agent.decisions)
        res.extra['optimizer'] = policy.agent.optimizer.status()
        res.extra['predictions'] = predictions([policy])
        res.extra['steady'] = steady([policy])
    return res


def predictions(policies) -> dict:
    """The optimizer's predictions beside what was measured at its
    verdicts (Optimizer.predictions), of every host's agent: kind ->
    [[predicted, measured], ...].
    """
    return _merged(p.agent.optimizer.predictions for p in policies)


def steady(policies) -> dict:
    """The optimizer's predictions of every move beside the steady state
    the simulator's physics gives it (OverheadAware.steady), of every
    host's agent: kind -> [[predicted, simulated], ...].
    """
    return _merged(p.steady for p in policies)


def _merged(tables) -> dict:
    """kind -> the (predicted, other) pairs of every table, rounded."""
    out = {}
    for table in tables:
        for kind, pairs in table.items():
            out.setdefault(kind, []).extend(
                [round(p, 4), round(m, 4)] for p, m in pairs)
    return out


def check_policies(policies) -> None:
    known = set(policies_mod.POLICIES) | {policies_mod.ORACLE}
    unknown = [p for p in policies if p not in known]
    if unknown:
        raise ValueError('unknown policies: %s (known: %s)'
                         % (', '.join(unknown), ', '.join(sorted(known))))


def run(scenario, policies=DEFAULT_POLICIES, progress=None,
        options=None) -> dict:
    """Every policy on the scenario: name -> PolicyResult. ``options``:
    group -> {option: value} (``simulate --set``), the agent's for ours.
    """
    check_policies(policies)
    runs = [p for p in policies if p != policies_mod.ORACLE]
    if progress is not None:
        progress.start(scenario.steps() * len(runs) +
                       (1 if policies_mod.ORACLE in policies else 0))
    results = {}
    for name in runs:
        results[name] = run_policy(
            scenario, name, tick=progress.tick if progress else None,
            options=options)
    if policies_mod.ORACLE in policies:
        results[policies_mod.ORACLE] = oracle_mod.oracle(
            scenario, Timeline(scenario), results)
        if progress is not None:
            progress.tick()
    if progress is not None:
        progress.done()
    return results
