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
"""``simulate --sweep N --seed S``: N scenarios nobody tuned for.

Scenario k of seed S is drawn from its own generator (seeded with S and
k), from these distributions (doc/source/user/simulator.rst):

* host: one of the presets (half the time), else a random host of 2, 3,
  4, 6 or 8 nodes: 4-16 cores (with or without SMT), 8-40 MB of LLC,
  16-128 GB and 1, 2 or 4 controllers (10-60 GB/s) per node, 80-140 ns
  local latency, remote latency 1.2-2.2x local by hop count (ring, full
  mesh or two groups) with up to 15% asymmetry, links of 6-40 GB/s with
  up to 25% asymmetry, SLIT from the latencies (symmetric, as firmware
  reports it);
* guests: 1, 2, 4 or 8 vCPUs; 1-64 GiB (powers of two, smaller ones
  likelier); every profile, CPU-bound included, equally likely; added
  until the memory reaches a fill of 30-95% (at most 40 guests per host);
* vCPU layout: balanced (round robin over the nodes), crowded (on a
  quarter to half of the nodes) or random, a third each, where the vCPUs
  start; in half the scenarios they stay there (pinned to a node, as in
  the papers), in the other half they float and the kernel places them;
  first touch on the vCPU node;
* time: arrivals every 2-5 s, 60-120 s after the last, the last 30-60
  measured; a quarter of the scenarios have guests leaving, a quarter
  have guests changing profile;
* one scenario in ten is a cluster of 2-4 hosts scheduled by Nova's
  filter and weigher handlers;
* counters: perf (60%), perf+stalls (20%) or resctrl (20%); the kernel's
  NUMA balancing on (90%) or off.
"""

import dataclasses
import random
import textwrap

from nova_numa_overhead.overhead import samples
from nova_numa_overhead.sim import backend
from nova_numa_overhead.sim import model
from nova_numa_overhead.sim import presets
from nova_numa_overhead.sim import scenarios

GIB = 1024
MAX_GUESTS = 40
SIZES_GB = (1, 2, 4, 8, 16, 32, 64)
SIZE_WEIGHTS = (4, 5, 6, 5, 3, 2, 1)


def random_host(rng, name) -> model.HostSpec:
    n = rng.choice((2, 3, 4, 6, 8))
    cores = rng.choice((4, 8, 12, 16))
    threads = rng.choice((1, 2))
    llc = rng.uniform(8, 40)
    memory = rng.choice((16, 32, 64, 128))
    ctrls = rng.choice((1, 2, 4))
    mc = rng.uniform(10, 60)
    local = rng.uniform(80, 140)
    shape = rng.choice(('ring', 'mesh', 'groups'))

    def hops(a, b):
        if a == b:
            return 0
        if shape == 'mesh':
            return 1
        if shape == 'ring':
            d = abs(a - b)
            return min(d, n - d)
        return 1 if (a < n // 2) == (b < n // 2) else 2

    per_hop = rng.uniform(1.2, 2.2) - 1.0
    latency = [[local * (1 + per_hop * hops(a, b) ** 0.8) *
                (1 if a == b else rng.uniform(0.85, 1.15))
                for b in range(n)] for a in range(n)]
    link = [[0.0 if a == b else rng.uniform(6, 40) / max(1, hops(a, b)) *
             rng.uniform(0.75, 1.25) for b in range(n)] for a in range(n)]
    slit = [[10 if a == b else max(11, int(round(
        10 * (latency[a][b] + latency[b][a]) / (latency[a][a] +
                                                latency[b][b]))))
             for b in range(n)] for a in range(n)]
    nodes = tuple(model.NodeSpec(cores=cores, threads=threads, llc_mb=llc,
                                 memory_mb=memory * GIB, mc_gbps=mc,
                                 controllers=ctrls) for _ in range(n))
    return model.HostSpec(
        name=name, nodes=nodes,
        latency_ns=tuple(tuple(r) for r in latency),
        link_gbps=tuple(tuple(r) for r in link),
        distances=tuple(tuple(r) for r in slit), ghz=rng.uniform(2.0, 3.0))


def generate(seed: int, index: int) -> scenarios.Scenario:
    """Scenario ``index`` of sweep ``seed``."""
    rng = random.Random('%d/%d' % (seed, index))
    name = 'sweep-%d-%d' % (seed, index)
    if rng.random() < 0.5:
        spec = presets.host(rng.choice(sorted(presets.HOSTS)))
    else:
        spec = random_host(rng, 'random-%d-%d' % (seed, index))
    hosts = rng.randint(2, 4) if rng.random() < 0.1 else 1
    n = spec.size
    node_mb = min(node.memory_mb for node in spec.nodes)
    capacity = sum(node.memory_mb for node in spec.nodes) * hosts
    fill = rng.uniform(0.3, 0.95)
    layout = rng.choice(('balanced', 'crowded', 'random'))
    crowd = rng.sample(range(n), max(1, rng.randint(n // 4, n // 2)))
    floating = rng.random() < 0.5
    leaving = rng.random() < 0.25
    changing = rng.random() < 0.25
    profiles = sorted(presets.PROFILES)
    guests = []
    used = 0
    k = 0
    while len(guests) < MAX_GUESTS * hosts:
        size = rng.choices(SIZES_GB, SIZE_WEIGHTS)[0] * GIB
        size = min(size, node_mb * max(1, n // 2))
        if used + size > fill * capacity:
            if size <= GIB or len(guests) >= 2:
                break
            continue
        vcpus = min(rng.choice((1, 2, 4, 8)), spec.nodes[0].cpus)
        if layout == 'balanced':
            node = k % n
        elif layout == 'crowded':
            node = crowd[k % len(crowd)]
        else:
            node = rng.randrange(n)
        profile = rng.choice(profiles)
        leave = None
        if leaving and rng.random() < 0.4:
            leave = rng.randint(30, 150)
        phases = ()
        if changing and rng.random() < 0.5:
            at = rng.randint(20, 120)
            if leave is None or at < leave:
                phases = (scenarios.Phase(at, rng.choice(profiles)),)
        guests.append(scenarios.GuestPlan(
            name='vm%d' % (k + 1), profile=profile, vcpus=vcpus,
            memory_mb=size, vcpu_nodes=(node,), first_touch=(node,),
            leave_at=leave, phases=phases, floating=floating))
        used += size
        k += 1
    counters = rng.choices((backend.PERF, backend.PERF_STALLS,
                            backend.RESCTRL), (6, 2, 2))[0]
    interval = rng.randint(2, 5)
    duration = rng.randint(60, 120)
    scenario = scenarios.Scenario(
        name=name, description='sweep %d, scenario %d: %d guests on %s%s'
        % (seed, index, len(guests), spec.name,
           ' x%d' % hosts if hosts > 1 else ''),
        host=spec, guests=tuple(guests), seed=rng.randrange(1 << 30),
        duration=duration, arrival_interval=interval,
        measure=min(duration, rng.randint(30, 60)), hosts=hosts,
        balancing=rng.random() < 0.9, counters=counters)
    try:
        return scenario.validate()
    except ValueError:
        # Departures make the peak the measure: drop guests until it fits.
        while len(scenario.guests) > 1:
            scenario = dataclasses.replace(scenario,
                                           guests=scenario.guests[:-1])
            try:
                return scenario.validate()
            except ValueError:
                continue
        raise


def _run_one(job):
    from nova_numa_overhead.sim import cli
    from nova_numa_overhead.sim import report
    kind, ref, policies, options = job
    if kind == 'sweep':
        scenario = generate(*ref)
    else:
        scenario = scenarios.get(ref)
    results = cli.simulate(scenario, policies, options=options)
    data = report.summary(scenario, results)
    data['name'] = data.pop('scenario')
    data['scenario'] = to_dict(scenario)
    return data


def run_jobs(jobs, workers: int = 2, progress=None) -> dict:
    """Run scenarios on ``workers`` processes: ``{"scenarios": [...]}``."""
    rows = []
    if progress is not None:
        progress.start(len(jobs))
    if workers > 1 and len(jobs) > 1:
        import multiprocessing
        ctx = multiprocessing.get_context('fork')
        with ctx.Pool(workers) as pool:
            for row in pool.imap(_run_one, jobs):
                rows.append(row)
                if progress is not None:
                    progress.tick()
    else:
        for job in jobs:
            rows.append(_run_one(job))
            if progress is not None:
                progress.tick()
    if progress is not None:
        progress.done()
    return {'scenarios': rows}


def run(count: int, seed: int, policies=None, workers: int = 2,
        progress=None, options=None) -> dict:
    """Sweep ``seed``: ``count`` generated scenarios (``options``:
    :func:`nova_numa_overhead.sim.runner.run`'s).
    """
    return run_jobs([('sweep', (seed, i), policies, options)
                     for i in range(count)], workers, progress)


def run_builtin(policies=None, workers: int = 2, progress=None,
                options=None) -> dict:
    """Every built-in scenario."""
    return run_jobs([('builtin', name, policies, options)
                     for name in sorted(scenarios.builtin())],
                    workers, progress)


def lines(sweep: dict) -> str:
    """One line per scenario: the default configuration against Nova's
    default, the best other policy and the oracle.
    """
    out = ['%-15s %6s %-6s %6s %7s %6s %6s %5s' % (
        'scenario', 'ours', 'best', '', 'ours vs', 'of', 'worst', 'GiB'),
        '%-15s %6s %-6s %6s %7s %6s %6s %5s' % (
        '', 'vs nova', 'other', 'vs nova', 'best', 'oracle', 'guest',
        'moved')]
    from nova_numa_overhead.sim import report
    for row in sweep['scenarios']:
        ours = row['policies'].get(report.DEFAULT, {})
        best = row.get('best_other')
        other = row['policies'].get(best, {}) if best else {}
        out.append('%-15s %6.3f %-6s %6.3f %+6.1f%% %5.1f%% %6.2f %5.0f' % (
            row['name'][:15], ours.get('vs_nova_default') or 0,
            report.LABELS.get(best, best or '-')[:6],
            other.get('vs_nova_default') or 0,
            100 * (row.get('vs_best_other') or 0),
            100 * (row.get('fraction_of_oracle') or 0),
            ours.get('worst_guest') or 0,
            (ours.get('moved_mb') or 0) / 1024.0))
    return '\n'.join(out)


def distribution(sweep: dict) -> dict:
    """Per policy: min, p5 and median of its mean vs Nova's default, its
    worst single guest, its fraction of the oracle and GiB moved; and the
    default configuration against the best other policy.
    """
    rows = sweep['scenarios']
    policies = []
    for row in rows:
        for name in row['policies']:
            if name not in policies:
                policies.append(name)
    out = {'scenarios': len(rows), 'policies': {}}
    for name in policies:
        cells = [row['policies'][name] for row in rows
                 if name in row['policies']]

        def stats(key, cells=cells):
            values = [c[key] for c in cells if c.get(key) is not None]
            if not values:
                return None
            return {'min': round(min(values), 4),
                    'p5': round(samples.percentile(values, 5), 4),
                    'median': round(samples.percentile(values, 50), 4)}

        moved = [c['moved_mb'] / 1024.0 for c in cells]
        out['policies'][name] = {
            'vs_nova_default': stats('vs_nova_default'),
            'worst_guest': stats('worst_guest'),
            'fraction_of_oracle': stats('fraction_of_oracle'),
            'moved_gib': {'median': round(samples.percentile(moved, 50), 1),
                          'max': round(max(moved), 1)} if moved else None,
        }
    best = [row['vs_best_other'] for row in rows
            if row.get('vs_best_other') is not None]
    if best:
        out['default_vs_best_other'] = {
            'min': round(min(best), 4),
            'p5': round(samples.percentile(best, 5), 4),
            'median': round(samples.percentile(best, 50), 4),
            'wins': sum(1 for b in best if b >= -0.005),
        }
    from nova_numa_overhead.sim import report
    for key, summary in (('predictions', 'calibration'),
                         ('steady', 'steady_calibration')):
        pairs = {}
        for row in rows:
            for kind, values in (row.get(key) or {}).items():
                pairs.setdefault(kind, []).extend(values)
        if pairs:
            out[summary] = report.calibration(pairs)
    fair = [row['fair_of_oracle'] for row in rows
            if row.get('fair_of_oracle') is not None]
    if fair:
        from nova_numa_overhead.sim import rules
        out['fair_oracle'] = {
            'of_oracle': {'min': round(min(fair), 4),
                          'p5': round(samples.percentile(fair, 5), 4),
                          'median': round(samples.percentile(fair, 50), 4)},
            'unattainable': sum(1 for row in rows
                                if rules.unattainable(row)),
            'win_unattainable': sum(1 for row in rows
                                    if rules.win_unattainable(row)),
        }
    out['bar'] = bar(rows)
    return out


def bar(rows) -> dict:
    """The bar (:mod:`.rules`) over ``rows``: the scenarios where the
    default configuration breaks it and how many break each rule; of
    those, how many break only rules that look out of reach
    (:func:`.rules.out_of_reach`), and in the others how many break each
    rule where it does not look so (the work left).
    """
    from nova_numa_overhead.sim import rules
    out = {'broken': 0, 'rules': dict.fromkeys(rules.RULES, 0),
           'only_out_of_reach': 0,
           'within_reach': dict.fromkeys(rules.RULES, 0)}
    for row in rows:
        found = rules.broken(row)
        if not found:
            continue
        out['broken'] += 1
        unreachable = rules.out_of_reach(row, found=found)
        for rule in found:
            out['rules'][rule] += 1
            if rule not in unreachable:
                out['within_reach'][rule] += 1
        if unreachable == found:
            out['only_out_of_reach'] += 1
    return out


def table(sweep: dict) -> str:
    dist = distribution(sweep)
    from nova_numa_overhead.sim import report
    lines = ['sweep of %d scenarios' % dist['scenarios'],
             '%-10s %-20s %-15s %-15s %s' % (
                 'policy', 'vs Nova: min/p5/med', 'worst guest min/p5',
                 'oracle min/p5', 'GiB moved med/max')]
    for name, s in dist['policies'].items():
        def f3(d, keys=('min', 'p5', 'median')):
            if not d:
                return '-'
            return '/'.join('%.2f' % d[k] for k in keys)
        lines.append('%-10s %-20s %-15s %-15s %s' % (
            report.LABELS.get(name, name)[:10], f3(s['vs_nova_default']),
            f3(s['worst_guest'], ('min', 'p5')),
            f3(s['fraction_of_oracle'], ('min', 'p5')),
            '%.0f/%.0f' % (s['moved_gib']['median'], s['moved_gib']['max'])
            if s['moved_gib'] else '-'))
    b = dist.get('default_vs_best_other')
    if b:
        lines.append('')
        lines.append('default configuration vs the best other policy of '
                     'each scenario: min %+.1f%%, p5 %+.1f%%, median '
                     '%+.1f%%; within 0.5%% or ahead in %d of %d' % (
                         100 * b['min'], 100 * b['p5'], 100 * b['median'],
                         b['wins'], dist['scenarios']))
    c = dist.get('calibration')
    if c:
        lines.append(report.calibration_text(c))
    steady = report.steady_text(dist.get('steady_calibration') or {})
    if steady:
        lines.append(steady)
    f = dist.get('fair_oracle')
    if f:
        from nova_numa_overhead.sim import rules
        lines.append(_wrap(
            'best placement found holding every guest >= %.2fx Nova (fair '
            'oracle): %.1f%% of the oracle at the median, %.1f%% at p5; '
            'below the oracle rule (the guest and oracle rules look '
            'incompatible) in %d of %d' % (
                rules.GUEST, 100 * f['of_oracle']['median'],
                100 * f['of_oracle']['p5'], f['unattainable'],
                dist['scenarios'])))
        lines.append(_wrap('another policy ahead only by sacrificing '
                           'guests, beyond the fair oracle and every run '
                           'keeping them (the guest and win rules look '
                           'incompatible): in %d of %d' % (
                               f['win_unattainable'], dist['scenarios'])))
    b = dist.get('bar')
    if b:
        from nova_numa_overhead.sim import rules
        lines.append(_wrap(
            'the bar broken in %d of %d (%s); in %d of them only rules '
            'that look out of reach; in the others %s' % (
                b['broken'], dist['scenarios'],
                ', '.join('%s %d' % (r, b['rules'][r]) for r in rules.RULES),
                b['only_out_of_reach'],
                ', '.join('%s %d' % (r, b['within_reach'][r])
                          for r in rules.RULES))))
    return '\n'.join(lines)


def _wrap(text: str) -> str:
    """A line of :func:`table`, wrapped as the calibration's."""
    return textwrap.fill(text, width=79, subsequent_indent='  ')


# -- scenarios as data (the sweep's JSON, and files to replay them) --------

def to_dict(scenario) -> dict:
    """The scenario in the scenario-file format (TOML-able)."""
    spec = scenario.host
    if spec.name in presets.HOSTS and presets.host(spec.name) == spec:
        host = spec.name
    else:
        host = {
            'name': spec.name, 'ghz': round(spec.ghz, 4),
            'nodes': [{'cores': n.cores, 'threads': n.threads,
                       'llc_mb': round(n.llc_mb, 3),
                       'memory_gb': n.memory_mb / GIB,
                       'mc_gbps': round(n.mc_gbps, 3),
                       'controllers': n.controllers} for n in spec.nodes],
            'latency_ns': [[round(v, 3) for v in r]
                           for r in spec.latency_ns],
            'link_gbps': [[round(v, 3) for v in r] for r in spec.link_gbps],
            'distances': [list(r) for r in spec.distances],
        }
    guests = []
    for g in scenario.guests:
        entry = {'name': g.name, 'profile': g.profile, 'vcpus': g.vcpus,
                 'memory_gb': g.memory_mb / GIB,
                 'vcpu_node': list(g.vcpu_nodes),
                 'first_touch': list(g.first_touch)}
        if g.first_controller is not None:
            entry['first_controller'] = g.first_controller
        if g.extra_specs:
            entry['extra_specs'] = dict(g.extra_specs)
        if g.pinned:
            entry['pinned'] = True
        if g.leave_at is not None:
            entry['leave_at'] = g.leave_at
        if g.phases:
            entry['phases'] = [{'at': p.at, 'profile': p.profile}
                               for p in g.phases]
        if g.preallocate:
            entry['preallocate'] = True
        if g.floating:
            entry['vcpu_affinity'] = 'host'
        guests.append(entry)
    return {'name': scenario.name, 'description': scenario.description,
            'host': host, 'seed': scenario.seed,
            'duration': scenario.duration,
            'arrival_interval': scenario.arrival_interval,
            'measure': scenario.measure, 'hosts': scenario.hosts,
            'balancing': scenario.balancing,
            'counters': scenario.counters, 'guests': guests}


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return 'true' if value else 'false'
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"%s"' % value.replace('\\', '\\\\').replace('"', '\\"')
    if isinstance(value, list):
        return '[%s]' % ', '.join(_toml_value(v) for v in value)
    if isinstance(value, dict):
        return '{%s}' % ', '.join('%s = %s' % (_key(k), _toml_value(v))
                                  for k, v in value.items())
    raise TypeError(type(value))


def _key(key: str) -> str:
    return key if key.replace('_', '').replace('-', '').isalnum() \
        else _toml_value(key)


def to_toml(data: dict) -> str:
    """A scenario dict (:func:`to_dict`) as a scenario file."""
    lines = []
    tables = []
    for key, value in data.items():
        if key == 'guests':
            continue
        if key == 'host' and isinstance(value, dict):
            tables.append(value)
            continue
        lines.append('%s = %s' % (key, _toml_value(value)))
    for host in tables:
        lines.append('')
        lines.append('[host]')
        for key, value in host.items():
            if key != 'nodes':
                lines.append('%s = %s' % (key, _toml_value(value)))
        for node in host['nodes']:
            lines.append('')
            lines.append('[[host.nodes]]')
            lines.extend('%s = %s' % (k, _toml_value(v))
                         for k, v in node.items())
    for guest in data['guests']:
        lines.append('')
        lines.append('[[guests]]')
        lines.extend('%s = %s' % (_key(k), _toml_value(v))
                     for k, v in guest.items())
    return '\n'.join(lines) + '\n'
