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
"""The scripted demo: hosts report, Nova's filter and weigher handlers pick.

Four simulated compute hosts estimate their per-node overhead levels from
synthetic counter observations (the shared model), cast their reports over
oslo.messaging (the in-memory ``fake://`` transport unless
``--transport-url`` is given), a scheduler-side store receives them, and
Nova's HostFilterHandler and HostWeightHandler run NUMAOverheadFilter,
RAMWeigher and NUMAOverheadWeigher for a few flavors.
"""

import time

from nova_numa_overhead.overhead import estimator
from nova_numa_overhead.overhead import planner
from nova_numa_overhead import report as report_mod

GIB = 1024


def _obs(hit, loss, ipc, cpu, memory):
    return estimator.Observation(llc_hit_rate=hit, cycle_loss=loss, ipc=ipc,
                                 cpu={cpu: 1.0}, memory=memory)


# name -> (nodes, memory per node in GiB, observations, guests per node,
#          description)
HOSTS = {
    'cmp-idle': (2, 6, [], [0, 0], 'two small empty nodes (6 GiB each)'),
    'cmp-llc': (4, 128, [_obs(0.30, 0.68, 0.5, n % 4, {n % 4: 1.0})
                         for n in range(8)], [2, 2, 2, 2],
                'LLC contention on every socket; the most free memory'),
    'cmp-mc': (4, 64, [_obs(0.45, 0.84, 0.4, n, {n: 1.0})
                       for n in range(4)] * 2, [2, 2, 2, 2],
               'memory controllers congested on every node'),
    'cmp-remote': (4, 32, [_obs(0.5, 0.86, 0.3, n, {(n + 1) % 4: 1.0})
                           for n in range(4)], [1, 1, 1, 1],
                   'guests running remote from their memory'),
}
# A host without an agent: Nova's view of its free RAM, in GiB.
NO_AGENT = ('cmp-noagent', 64)
FLAVORS = [
    ('m1.medium', 4 * GIB, {}, {}),
    ('m1.large (max_level=3)', 8 * GIB,
     {'numa_overhead:max_level': '3'}, {}),
    ('m1.large + hint max_level=1', 8 * GIB,
     {'numa_overhead:max_level': '3'}, {'numa_overhead_max_level': '1'}),
    ('m1.xlarge (policy=spread)', 16 * GIB,
     {'numa_overhead:policy': 'spread'}, {}),
]
# Seconds the demo waits for the hosts' reports to arrive.
REPORT_WAIT = 10


def host_reports(seq=1):
    """The demo hosts' reports, estimated with the shared model."""
    reports = {}
    for name, (nodes, gib, observations, guests, _) in HOSTS.items():
        topo = estimator.Topology.uniform(nodes)
        levels = estimator.estimate(observations, topo)
        used = [min(g * 4 * GIB, gib * GIB) for g in guests]
        reports[name] = report_mod.build(
            name, 'demo-' + name, '0.1.0', seq, levels,
            total_mb=[gib * GIB] * nodes,
            free_mb=[gib * GIB - u for u in used], guests=guests,
            cpus=[16] * nodes, distances=topo.distances)
    return reports


def _spec(objects, memory_mb, extra_specs, hints):
    return objects.RequestSpec(
        flavor=objects.Flavor(memory_mb=memory_mb, vcpus=4, root_gb=20,
                              extra_specs=extra_specs),
        instance_uuid='00000000-0000-4000-8000-000000000000',
        scheduler_hints={k: [v] for k, v in hints.items()})


def run(transport_url=None, out=print) -> int:
    import warnings
    warnings.simplefilter('ignore')
    import nova.conf
    from nova import objects
    from nova.scheduler import filters as nova_filters
    from nova.scheduler import host_manager
    from nova.scheduler import weights as nova_weights
    from nova.scheduler.weights import ram

    from nova_numa_overhead import conf as plugin_conf
    from nova_numa_overhead import rpc
    from nova_numa_overhead.scheduler import filters
    from nova_numa_overhead.scheduler import store
    from nova_numa_overhead.scheduler import weighers

    objects.register_all()
    conf = nova.conf.CONF
    plugin_conf.register_opts(conf)
    conf([], project='nova', default_config_files=[])
    conf.set_override('transport_url', transport_url or 'fake://',
                      group='numa_overhead')
    conf.set_override('report_topic', 'numa-overhead-demo',
                      group='numa_overhead')

    no_agent, no_agent_gib = NO_AGENT
    out('nova-numa-overhead demo: %d hosts report over oslo.messaging, '
        'one has no agent; Nova\'s filter and weigher pick (the '
        'NUMAOverheadWeigher off, as by default: weight_multiplier = 0)\n'
        % len(HOSTS))
    reports = host_reports()
    # The scheduler side starts listening (and asks for a sync) in the
    # background when Nova loads the filter; start it now and wait for it
    # so that the casts below land.
    received = store.get_store(conf)
    if not store.listener().wait(REPORT_WAIT):
        store.reset_store()
        raise RuntimeError('the report listener did not start within %d s'
                           % REPORT_WAIT)
    publisher = rpc.ReportPublisher(conf)
    for report in reports.values():
        publisher.publish(report)
    deadline = time.monotonic() + REPORT_WAIT
    while len(received.hosts()) < len(reports) and \
            time.monotonic() < deadline:
        time.sleep(0.05)
    missing = [name for name in reports if received.get(name) is None]
    if missing:
        rpc.stop_listeners()
        raise RuntimeError('no report from %s arrived within %d s'
                           % (', '.join(missing), REPORT_WAIT))

    out('%-11s %-52s %s' % ('host', 'what it reported', 'overhead per '
                            'node, from the best local node'))
    for name, (_, _, _, _, desc) in HOSTS.items():
        entry = received.get(name)
        best = min(range(entry.report.size),
                   key=lambda n: sum(entry.view.overhead[n]))
        out('%-11s %-52s %s' % (name, desc, entry.view.overhead[best]))
    out('%-11s %-52s %s\n' % (no_agent, 'no agent: no report', '(unknown)'))

    hosts = []
    for name in list(HOSTS) + [no_agent]:
        state = host_manager.HostState(name, name, 'cell1')
        # Nova's view of free RAM: what the host reported (the host
        # without an agent has its own).
        state.free_ram_mb = (sum(n.free_mb for n in reports[name].nodes)
                             if name in reports else no_agent_gib * GIB)
        state.num_instances = 4
        state.aggregates = []
        hosts.append(state)

    filter_handler = nova_filters.HostFilterHandler()
    weight_handler = nova_weights.HostWeightHandler()
    the_filter = filters.NUMAOverheadFilter()
    weighers_ = [ram.RAMWeigher(), weighers.NUMAOverheadWeigher()]

    def schedule(memory_mb, specs, hints):
        spec = _spec(objects, memory_mb, specs, hints)
        passed = filter_handler.get_filtered_objects([the_filter], hosts,
                                                     spec) or []
        return weight_handler.get_weighed_objects(weighers_, passed, spec)

    def pick(weighed):
        return weighed[0].obj.host if weighed else 'no host (NoValidHost)'

    for flavor, memory_mb, specs, hints in FLAVORS:
        query = received.query(memory_mb, specs.get(
            'numa_overhead:policy', planner.PROPORTIONAL),
            planner.DEFAULT_MAX_NODES)
        weighed = schedule(memory_mb, specs, hints)
        out('flavor %s: %d GiB, extra specs %s, hints %s'
            % (flavor, memory_mb // GIB, specs or '{}', hints or '{}'))
        names = {w.obj.host: w.weight for w in weighed}
        for state in hosts:
            planned = query.overhead(state.host)
            shown = ('unknown' if planned is None else
                     'no room' if planned == float('inf') else
                     '%.2f' % planned)
            out('  %-11s planned overhead %-7s %-6s %s'
                % (state.host, shown,
                   'passes' if state.host in names else 'fails',
                   'weight %.2f' % names[state.host]
                   if state.host in names else ''))
        chosen = pick(weighed)
        without = pick(schedule(memory_mb, specs, {})) if hints else chosen
        out('  -> Nova picks %s%s\n' % (
            chosen, '' if without == chosen else
            ' (without the hint: %s)' % without))
    rpc.stop_listeners()
    return 0
