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
"""Cluster mode: several simulated hosts, one agent each, and Nova's own
filter and weigher handlers choosing a host for every arriving guest.

Agents cast their reports over oslo.messaging (the in-memory ``fake://``
transport unless a URL is given, e.g. RabbitMQ); a scheduler-side store
receives them, and NUMAOverheadFilter and NUMAOverheadWeigher run next to
Nova's default weighers exactly as in nova-scheduler. The baseline policies
run with Nova's default weighers alone choosing hosts.

Nova's default ``weight_classes`` is every weigher Nova has; of them, only
the RAM and CPU weighers see simulated hosts differ (free memory and free
vCPUs as Nova's resource tracker counts them: what the guests' flavors
claim, not what they have touched; vCPUs at Nova's
``initial_cpu_allocation_ratio``); the others (disk, I/O
operations, PCI, affinity, build failures, cells, hypervisor version, and
those off by default) weigh every simulated host the same and change no
choice, so they are left out. Before them, as placement does, only the
hosts that hold the request are offered (:func:`_fits`).
"""

import dataclasses
import itertools
import os
import time

from nova_numa_overhead.sim import policies as policies_mod
from nova_numa_overhead.sim import runner

# Every run in a process gets a topic of its own: a scenario's id() is
# reused once it is freed, and a run must not see an earlier run's reports
# (the fake transport keeps its exchanges for the process's life).
_RUNS = itertools.count()


class Scheduler:
    """Nova's handlers with or without the plugin's filter and weigher."""

    def __init__(self, transport_url: str | None, ours: bool, topic: str,
                 options=None):
        import warnings
        warnings.simplefilter('ignore')
        import nova.conf
        from nova import objects
        from nova.scheduler import filters as nova_filters
        from nova.scheduler import weights as nova_weights
        from nova.scheduler.weights import cpu
        from nova.scheduler.weights import ram

        from nova_numa_overhead import conf as plugin_conf
        from nova_numa_overhead.scheduler import filters
        from nova_numa_overhead.scheduler import store
        from nova_numa_overhead.scheduler import weighers

        objects.register_all()
        self.objects = objects
        conf = self.conf = nova.conf.CONF
        plugin_conf.register_opts(conf)
        try:
            conf.config_file
        except Exception:
            # Not parsed yet (the simulate command runs outside Nova).
            conf([], project='nova', default_config_files=[])
        conf.set_override('transport_url', transport_url or 'fake://',
                          group='numa_overhead')
        conf.set_override('report_topic', topic, group='numa_overhead')
        # Reports age on the scheduler's wall clock; a simulated second
        # takes a fraction of one: a run paused long enough (a debugger,
        # a suspended machine) must not see its hosts' reports expire.
        conf.set_override('report_ttl', 10 ** 6, group='numa_overhead')
        # ``simulate --set numa_overhead.NAME=VALUE`` (the run of ours
        # only: the others have no filter or weigher of the plugin):
        # cleared by close(), however the run ends (the configuration is
        # the process's, shared by the runs that follow).
        self.overridden = []
        self.store = None
        try:
            for name, value in ((options or {}).get(
                    policies_mod.SCHEDULER_GROUP, {}) if ours else {}).items():
                conf.set_override(name, value, group='numa_overhead')
                self.overridden.append(name)
            store.reset_store()
            self.store = store.get_store(conf) if ours else None
            if ours and not store.listener().wait(30):
                raise ClusterError('the report listener did not start in '
                                   '30 s')
        except Exception:
            self.close()
            raise
        self.filter_handler = nova_filters.HostFilterHandler()
        self.weight_handler = nova_weights.HostWeightHandler()
        self.filters = [filters.NUMAOverheadFilter()] if ours else []
        # Nova's defaults ([filter_scheduler] weight_classes =
        # all_weighers), and ours beside them as the docs configure it.
        self.weighers = [ram.RAMWeigher(), cpu.CPUWeigher()] + (
            [weighers.NUMAOverheadWeigher()] if ours else [])

    def pick(self, host_states, memory_mb, extra_specs, vcpus=2):
        spec = self.objects.RequestSpec(
            flavor=self.objects.Flavor(memory_mb=memory_mb, vcpus=vcpus,
                                       root_gb=10,
                                       extra_specs=dict(extra_specs)),
            instance_uuid='00000000-0000-4000-8000-000000000000',
            scheduler_hints={})
        # What placement offers the scheduler: the hosts whose memory and
        # vCPUs, at Nova's initial allocation ratios, hold the request.
        # None does: Nova would fail the build (NoValidHost); a simulated
        # guest cannot fail, so the weighers choose among every host.
        reserved = self.conf.reserved_host_memory_mb
        passed = [s for s in host_states
                  if _fits(s, memory_mb, vcpus, reserved)] or host_states
        if self.filters:
            passed = self.filter_handler.get_filtered_objects(
                self.filters, passed, spec) or []
        weighed = self.weight_handler.get_weighed_objects(
            self.weighers, passed, spec)
        return weighed[0].obj.host if weighed else None

    def close(self):
        from nova_numa_overhead.scheduler import store
        store.reset_store()
        for name in self.overridden:
            self.conf.clear_override(name, group='numa_overhead')
        self.overridden = []


def _fits(state, memory_mb, vcpus, reserved_mb) -> bool:
    """Whether placement would offer ``state``'s host for the request."""
    usable = state.total_usable_ram_mb - reserved_mb
    used = usable - state.free_ram_mb
    return used + memory_mb <= usable * state.ram_allocation_ratio and \
        state.vcpus_used + vcpus <= \
        state.vcpus_total * state.cpu_allocation_ratio


def _host_states(hosts):
    import nova.conf
    from nova.scheduler import host_manager
    conf = nova.conf.CONF
    ratio = conf.initial_cpu_allocation_ratio
    states = []
    for name, host in hosts.items():
        state = host_manager.HostState(name, name, 'cell1')
        guests = list(host.guests.values())
        # What Nova's resource tracker reports: memory and every host CPU
        # (thread), less what the guests' flavors claim (at once, touched
        # or not; a guest killed out of memory still holds its claim, as
        # a stopped instance does) and the memory reserved for the host;
        # Nova's default allocation ratio.
        state.total_usable_ram_mb = sum(n.memory_mb for n in host.spec.nodes)
        state.free_ram_mb = (state.total_usable_ram_mb -
                             conf.reserved_host_memory_mb -
                             sum(g.memory_mb for g in guests))
        state.vcpus_total = sum(n.cpus for n in host.spec.nodes)
        state.vcpus_used = sum(g.vcpus for g in guests)
        state.cpu_allocation_ratio = ratio
        state.ram_allocation_ratio = conf.initial_ram_allocation_ratio
        state.num_instances = len(host.guests)
        state.aggregates = []
        states.append(state)
    return states


class ClusterError(RuntimeError):
    """A cluster run that cannot go on without changing its figures."""


def _wait_for_reports(store, pols, timeout: float = 60.0) -> None:
    """Until the store holds every report the agents sent: the run does
    not depend on how fast the transport delivers. Called before each
    arrival is scheduled and at the end of every second.

    Every host whose agent has sent a report is waited for, the one sent
    at second 0 too (its ``last_report`` is 0.0, which is false: testing
    that skipped the wait, so whether the first reports were in the store
    for the next arrivals depended on the listener thread's timing, and a
    cluster's figures on what the process had run before and on the load
    of the machine). A report that could not be sent, or does not reach
    the store (lost, or refused by it), stops the run rather than change
    its figures.
    """
    deadline = time.monotonic() + timeout
    for hname, policy in pols.items():
        if policy.publisher.failed is not None:
            raise ClusterError('report %d of %s could not be sent'
                               % (policy.publisher.failed, hname))
        want = policy.publisher.sent
        if want is None:
            continue
        while True:
            entry = store.get(hname)
            if entry is not None and entry.report.seq >= want:
                break
            if time.monotonic() >= deadline:
                raise ClusterError(
                    'report %d of %s did not reach the scheduler\'s store '
                    'in %d s (lost, or refused by it)'
                    % (want, hname, timeout))
            time.sleep(0.001)


class _Publisher:
    """The agent's publisher, remembering the last report it sent and
    the first it could not send.
    """

    def __init__(self, publisher):
        self.publisher = publisher
        self.sent = None
        self.failed = None

    def publish(self, report) -> bool:
        sent = self.publisher.publish(report)
        if sent:
            self.sent = report.seq
        elif self.failed is None:
            self.failed = report.seq
        return sent


def _least_loaded_node(host):
    load = [0.0] * host.spec.size
    for g in host.guests.values():
        for n, f in g.cpu.items():
            load[n] += g.vcpus * f
    return min(range(host.spec.size),
               key=lambda n: (load[n] / host.spec.nodes[n].cpus, n))


def run_policy(scenario, name, transport_url=None, tick=None,
               options=None):
    """One policy on the cluster: the guests' throughput on every host
    (``options``: :func:`run`'s).
    """
    from nova_numa_overhead import rpc
    ours = name == policies_mod.DEFAULT
    topic = 'numa-overhead-sim-%d-%d' % (os.getpid(), next(_RUNS))
    sched = Scheduler(transport_url, ours, topic, options)
    hosts = {}
    hvs = {}
    pols = {}
    try:
        for i in range(scenario.hosts):
            hname = 'sim-host-%d' % (i + 1)
            host, hv = runner.new_host(scenario, seed_offset=i)
            policy = policies_mod.new(name, options)
            policy.attach(hv, scenario)
            if ours:
                policy.agent.host = hname
                policy.publisher = _Publisher(
                    rpc.ReportPublisher(sched.conf))
                policy.agent.publisher = policy.publisher
            hosts[hname], hvs[hname], pols[hname] = host, hv, policy
        recorder, placed = _run(scenario, sched, hosts, hvs, pols, ours,
                                tick)
    finally:
        sched.close()
    res = runner.result(name, recorder, hosts.values())
    if ours:
        res.extra['predictions'] = runner.predictions(pols.values())
        res.extra['steady'] = runner.steady(pols.values())
    return res, placed


def _run(scenario, sched, hosts, hvs, pols, ours, tick):
    timeline = runner.Timeline(scenario)
    recorder = runner.Recorder(timeline, tick)
    placed = {}
    for second in range(timeline.steps):
        for kind, payload in timeline.at(second):
            if kind == 'arrive':
                plan = payload
                if ours:
                    # A guest that left this second made its host report.
                    _wait_for_reports(sched.store, pols)
                chosen = sched.pick(_host_states(hosts), plan.memory_mb,
                                    dict(plan.extra_specs), plan.vcpus)
                if chosen is None:
                    chosen = min(hosts, key=lambda h: len(hosts[h].guests))
                node = _least_loaded_node(hosts[chosen])
                plan = dataclasses.replace(plan, vcpu_nodes=(node,),
                                           first_touch=(node,))
                placed[plan.name] = chosen
                runner.start_guest(hosts[chosen], hvs[chosen],
                                   pols[chosen], plan)
            else:
                plan = payload if kind == 'leave' else payload[0]
                chosen = placed.get(plan.name)
                if chosen is not None:
                    runner.apply_event(kind, payload, hosts[chosen],
                                       hvs[chosen], pols[chosen])
        tput = {}
        for hname, hv in hvs.items():
            pols[hname].step(float(second))
            hosts[hname].step(float(second))
            solved = hosts[hname].solve()
            hv.advance(solved)
            tput.update(hosts[hname].throughput(solved))
        if ours:
            _wait_for_reports(sched.store, pols)
        recorder.record(second, tput, list(hosts.values()))
    return recorder, placed


def run(scenario, policies=None, progress=None, transport_url=None,
        options=None):
    """Every policy on the cluster scenario: name -> PolicyResult.
    ``options``: group -> {option: value} (``simulate --set``): the
    agents' for ours, the scheduler side's for Nova's handlers with the
    plugin's filter and weigher.
    """
    from nova_numa_overhead.sim import oracle as oracle_mod
    policies = tuple(policies or runner.DEFAULT_POLICIES)
    runner.check_policies(policies)
    runs = [p for p in policies if p != policies_mod.ORACLE]
    if progress is not None:
        progress.start(scenario.steps() * len(runs) + 1)
    results = {}
    for name in runs:
        try:
            results[name], _ = run_policy(
                scenario, name, transport_url,
                tick=progress.tick if progress else None, options=options)
        except ClusterError as exc:
            if progress is not None:
                progress.done()
            raise ClusterError('%s, policy %s: %s'
                               % (scenario.name, name, exc)) from None
    if policies_mod.ORACLE in policies:
        results[policies_mod.ORACLE] = oracle_mod.oracle(
            scenario, runner.Timeline(scenario), results)
    if progress is not None:
        progress.tick()
        progress.done()
    return results
