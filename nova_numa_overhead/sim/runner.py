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

For each policy a fresh simulated host is built; guests arrive one every
``arrival_interval`` seconds in an order the seed shuffles, with their
scenario placement (pinned vCPUs, Nova's first-touch memory); the policy
places them and acts every simulated second; after the last arrival the
host runs ``duration`` seconds and each guest's throughput (normalised to
running alone) is averaged over the last ``measure`` seconds. An observer
agent (the real one, enforcing nothing) reports the overhead levels every
policy leaves behind.
"""

import dataclasses
import random

from oslo_config import cfg

from nova_numa_overhead.compute import agent as agent_mod
from nova_numa_overhead import conf as plugin_conf
from nova_numa_overhead.sim import backend as backend_mod
from nova_numa_overhead.sim import model
from nova_numa_overhead.sim import policies as policies_mod
from nova_numa_overhead.sim import presets

DEFAULT_POLICIES = tuple(policies_mod.POLICIES)


@dataclasses.dataclass
class PolicyResult:
    policy: str
    throughput: dict            # guest -> normalised throughput
    moved_mb: float
    hottest_level: float        # highest local overhead level of a node
    mean_level: float

    @property
    def mean(self) -> float:
        values = list(self.throughput.values())
        return sum(values) / len(values) if values else 0.0


def first_touch(host: model.Host, plan) -> dict:
    """Where the kernel's first touch puts the memory: the scenario's nodes
    while they have room, then the nearest nodes.
    """
    free = host.free_mb()
    spec = host.spec
    pages = {}
    left = float(plan.memory_mb)
    wanted = list(plan.first_touch)
    order = wanted + sorted(
        (n for n in range(spec.size) if n not in wanted),
        key=lambda n: (spec.distances[plan.vcpu_node][n], n))
    share = left / len(wanted)
    for node in order:
        if left <= 0:
            break
        want = share if node in wanted else left
        take = min(want, left, max(free[node], 0))
        if take > 0:
            pages[node] = pages.get(node, 0) + take
            left -= take
    if left > 0:
        pages[plan.vcpu_node] = pages.get(plan.vcpu_node, 0) + left
    return pages


def make_guest(host: model.Host, plan) -> model.Guest:
    return model.Guest(
        name=plan.name, vcpus=plan.vcpus, memory_mb=plan.memory_mb,
        profile=presets.PROFILES[plan.profile], cpu={plan.vcpu_node: 1.0},
        pages=first_touch(host, plan), extra_specs=dict(plan.extra_specs),
        pinned=plan.pinned)


def observer(hv) -> agent_mod.Agent:
    conf = plugin_conf.register_opts(cfg.ConfigOpts())
    conf([])
    conf.set_override('enforcement', 'off', group='numa_overhead_agent')
    return agent_mod.Agent(conf, hv, policies_mod._NullPublisher(),
                           'observer', clock=lambda: 0.0,
                           sleep=lambda s: None)


def arrival_order(scenario) -> list:
    order = list(scenario.guests)
    random.Random(scenario.seed).shuffle(order)
    return order


def steps(scenario) -> int:
    """Simulated seconds of one policy's run."""
    return len(scenario.guests) * scenario.arrival_interval + \
        scenario.duration


class Recorder:
    """Simulated time, and the throughput samples of the measured window."""

    def __init__(self, scenario, tick=None):
        self.now = 0.0
        self.start = steps(scenario) - scenario.measure
        self.samples = []
        self.tick = tick

    def second(self) -> float:
        """One more simulated second; returns the time."""
        self.now += 1.0
        return self.now

    def record(self, throughput: dict) -> None:
        if self.now > self.start:
            self.samples.append(throughput)
        if self.tick is not None:
            self.tick()

    def throughput(self) -> dict:
        """Guest -> throughput averaged over the measured window."""
        total = {}
        for sample in self.samples:
            for guest, value in sample.items():
                total[guest] = total.get(guest, 0.0) + value
        return {g: v / len(self.samples) for g, v in total.items()}


def result(name, recorder, hypervisors, watches) -> PolicyResult:
    """What a run leaves: throughput, memory moved, overhead levels."""
    local = []
    for watch in watches:
        matrix = watch.levels.overhead_matrix()
        local.extend(matrix[i][i] for i in range(len(matrix)))
    return PolicyResult(policy=name, throughput=recorder.throughput(),
                        moved_mb=sum(hv.moved_mb for hv in hypervisors),
                        hottest_level=max(local),
                        mean_level=sum(local) / len(local))


def run_policy(scenario, name: str, tick=None) -> PolicyResult:
    """One policy on a fresh host."""
    host = model.Host(scenario.host)
    hv = backend_mod.SimHypervisor(host)
    policy = policies_mod.POLICIES[name]()
    policy.attach(hv)
    watch = observer(hv)
    recorder = Recorder(scenario, tick)

    def run(seconds):
        for _ in range(seconds):
            solved = hv.advance(1.0)
            policy.step(recorder.second())
            watch.cycle()
            recorder.record(host.throughput(solved))

    for plan in arrival_order(scenario):
        guest = make_guest(host, plan)
        policy.place(guest)
        hv.start(guest)
        run(scenario.arrival_interval)
    if isinstance(policy, policies_mod.Oracle):
        policy.optimise()
    run(scenario.duration)
    return result(name, recorder, [hv], [watch])


def run(scenario, policies=DEFAULT_POLICIES, progress=None) -> dict:
    """Every policy on the scenario: name -> PolicyResult."""
    unknown = [p for p in policies if p not in policies_mod.POLICIES]
    if unknown:
        raise ValueError('unknown policies: %s (known: %s)'
                         % (', '.join(unknown),
                            ', '.join(policies_mod.POLICIES)))
    if progress is not None:
        progress.start(steps(scenario) * len(policies))
    results = {}
    for name in policies:
        results[name] = run_policy(
            scenario, name, tick=progress.tick if progress else None)
    if progress is not None:
        progress.done()
    return results
