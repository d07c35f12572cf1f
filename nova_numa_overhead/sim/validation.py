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
"""The simulator next to every published figure it can produce.

The papers' experiments ran on Xen, whose NUMA-aware placement does not
migrate pages afterwards: they are reproduced with the kernel's automatic
NUMA balancing off. Characterization figures come from Nova's default
placement of the Figure 2 scenarios, solved once with every page in
place; result figures from whole runs of Nova's default and of the
default configuration (for Liu & Li's gains), or of vTRMS and numad.
:mod:`.figures` says which figures are fitted and the tolerances.
"""

import dataclasses
import json
import math
import os

from nova_numa_overhead.sim import figures
from nova_numa_overhead.sim import host as host_mod
from nova_numa_overhead.sim import policies as policies_mod
from nova_numa_overhead.sim import runner
from nova_numa_overhead.sim import scenarios

DATA_FILE = os.path.join('shared', 'data', 'published-numa-figures.json')
BENCHMARKS = {'TunkRank_s': 'tunkrank', 'YCSB_rps': 'ycsb',
              'NPB_UA_s': 'npb-ua', 'Memcached_rps': 'memcached'}


def find_data(start: str | None = None) -> str | None:
    """``shared/data/published-numa-figures.json`` beside the checkout."""
    here = os.path.abspath(start or os.path.dirname(__file__))
    while True:
        candidate = os.path.join(here, DATA_FILE)
        if os.path.exists(candidate):
            return candidate
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def load_data(path: str | None = None) -> dict:
    path = path or find_data()
    if path is None:
        raise ValueError('published-numa-figures.json not found beside the '
                         'checkout (shared/data/)')
    with open(path) as f:
        return json.load(f)


def lookup(data: dict, key: str):
    value = data
    for part in key.split('/'):
        value = value[part]
    return value


@dataclasses.dataclass
class Metrics:
    """Nova's default placement of one Figure 2 scenario, solved."""

    perf: float        # mean throughput normalised to running alone
    hit: float         # mean LLC hit rate
    ipc: float         # mean measured IPC
    cycle_loss: float  # mean stall cycles / cycles


def characterize(kind: str, count: int, profile: str | None = None
                 ) -> Metrics:
    """Figure 2 scenario ``kind`` with ``count`` guests, memory in place,
    no NUMA balancing (Xen): the steady state.
    """
    scenario = scenarios.paper(kind, count)
    if profile is not None:
        scenario = dataclasses.replace(scenario, guests=tuple(
            dataclasses.replace(g, profile=profile)
            for g in scenario.guests))
    host = host_mod.Host(scenario.host, balancing=False)
    for plan in scenario.guests:
        guest = runner.make_guest(plan, host.spec.size)
        runner.controller_of(host, guest, guest.first_ctrl)
        host.add(guest, preallocate=True)
    result = host.solve()
    tput = host.throughput(result)
    n = len(result.names)
    cpi = result.measured_cpi
    return Metrics(
        perf=sum(tput.values()) / n,
        hit=float(result.hit.mean()),
        ipc=float((1.0 / cpi).mean()),
        cycle_loss=float((result.stall_cpi / result.cpi).mean()))


def _mean_over_profiles(kind, count):
    """The characterization averages over the four benchmarks."""
    runs = [characterize(kind, count, p)
            for p in scenarios.PROFILE_CYCLE]
    return Metrics(*(sum(getattr(m, f.name) for m in runs) / len(runs)
                     for f in dataclasses.fields(Metrics)))


def pearson(xs, ys) -> float:
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sx = math.sqrt(sum((x - mx) ** 2 for x in xs))
    sy = math.sqrt(sum((y - my) ** 2 for y in ys))
    if sx == 0 or sy == 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / (sx * sy)


def characterization() -> dict:
    """Simulated value of every characterization figure (data-file key ->
    value).
    """
    llc = {k: _mean_over_profiles('llc', k) for k in range(1, 9)}
    mc = {k: _mean_over_profiles('mc', k) for k in range(1, 9)}
    remote = {k: _mean_over_profiles('remote', k) for k in range(1, 9)}
    inter = {k: _mean_over_profiles('interconnect', k)
             for k in (1, 2, 4, 6, 8)}
    base = 'characterization_liu_li/'
    llc_drop8 = 1 - llc[8].perf / llc[1].perf
    mc_drop8 = 1 - mc[8].perf / mc[1].perf
    pair_drops = [1 - inter[k].perf / inter[k - 2].perf if k > 2 else
                  1 - inter[2].perf / inter[1].perf for k in (2, 4, 6, 8)]
    return {
        base + 'llc_contention_8vms_perf_drop': llc_drop8,
        base + 'llc_hit_rate_1vm_to_8vms': [llc[1].hit, llc[8].hit],
        base + 'llc_hit_rate_vs_perf_correlation': pearson(
            [llc[k].hit for k in llc], [llc[k].perf for k in llc]),
        base + 'mc_congestion_2vms_perf_drop': 1 - mc[2].perf / mc[1].perf,
        base + 'mc_congestion_8vms_extra_drop_vs_llc_case':
            mc_drop8 - llc_drop8,
        base + 'cycle_loss_vs_perf_correlation_mc': -pearson(
            [mc[k].cycle_loss for k in range(2, 9)],
            [mc[k].perf for k in range(2, 9)]),
        base + 'remote_ipc_1vm_to_8vms': [remote[1].ipc, remote[8].ipc],
        base + 'ipc_ratio_vs_perf_correlation': pearson(
            [remote[k].ipc / remote[1].ipc for k in range(2, 9)],
            [remote[k].perf for k in range(2, 9)]),
        base + 'interconnect_perf_drop_per_vm_pair':
            sum(pair_drops) / len(pair_drops),
        base + 'interconnect_llc_hit_rate_range': [inter[2].hit,
                                                   inter[8].hit],
        base + 'cycle_loss_vs_perf_correlation_interconnect': -pearson(
            [inter[k].cycle_loss for k in (2, 4, 6, 8)],
            [inter[k].perf for k in (2, 4, 6, 8)]),
    }


def calibration_error() -> float:
    """Sum of squared relative errors over the calibration set (what
    tools/calibrate-sim.py minimises).
    """
    data = load_data()
    sim = characterization()
    total = 0.0
    for fig in figures.FIGURES:
        if fig.role != figures.CALIBRATION:
            continue
        published = lookup(data, fig.key)
        simulated = sim[fig.key]
        pairs = zip(published, simulated) if isinstance(published, list) \
            else [(published, simulated)]
        for p, s in pairs:
            total += ((s - p) / p) ** 2
    return total


def paper_run(scenario, policies):
    """A whole run the way the papers ran it: no NUMA balancing."""
    scenario = dataclasses.replace(scenario, balancing=False)
    return runner.run(scenario, policies)


def gain(results, ours, base) -> float:
    return results[ours].mean / results[base].mean - 1.0


def results_figures() -> dict:
    """Simulated value of every result figure (slow: whole runs).

    Liu & Li's figures are reproduced with their method (the agent
    without the optimizer's vCPU moves, :class:`PaperMethod`): they
    validate the simulator, not this project's default configuration.
    """
    ours, nova = policies_mod.PaperMethod.name, policies_mod.BASELINE
    pair = (nova, ours)
    out = {}
    improvement = {}
    for kind, key in (('llc', 'llc_contention'), ('mc', 'mc_congestion'),
                      ('remote', 'remote_access'),
                      ('interconnect', 'interconnect')):
        improvement[key] = {}
        for count in (2, 4, 6, 8):
            res = paper_run(scenarios.paper(kind, count), pair)
            improvement[key][str(count)] = gain(res, ours, nova)
    out['results_liu_li/scenario_improvement_by_vm_count'] = improvement
    mixed_gain, mixed_frac = {}, {}
    for count in (8, 12, 16):
        res = paper_run(scenarios.paper('mixed', count), pair)
        mixed_gain[str(count)] = gain(res, ours, nova)
        mixed_frac[str(count)] = res[ours].mean
    out['results_liu_li/mixed_improvement_over_numa_aware'] = mixed_gain
    out['results_liu_li/mixed_fraction_of_optimal'] = mixed_frac
    out['results_liu_li/overall_16vms_4socket_improvement'] = \
        mixed_gain['16']
    out['results_liu_li/table2_memory_scaling_default_vs_optimized'] = \
        _table(('4G', '8G', '16G', '32G'),
               lambda row: scenarios.paper(
                   'mixed', 8, memory_gb=int(row[:-1])), pair)
    out['results_liu_li/table3_socket_scaling_default_vs_optimized'] = \
        _table(('2', '4', '8'),
               lambda row: scenarios.paper(
                   'mixed', {'2': 4, '4': 8, '8': 16}[row],
                   host='ibm-x3850-%ss' % row), pair)
    for name, host in (('intel', 'intel-e5-4610'), ('amd', 'amd-6376')):
        res = paper_run(scenarios.vtrms(host), ('numad', 'vtrms'))
        out['vtrms/improvement_32vms_%s' % name] = gain(res, 'vtrms',
                                                        'numad')
    return out


def _table(rows, make, pair):
    """Per row, per benchmark: [default, optimized] throughput (mean of
    the guests running that benchmark, normalised to running alone).
    """
    nova, ours = pair
    out = {}
    for row in rows:
        scenario = make(row)
        res = paper_run(scenario, pair)
        cells = {}
        for column, profile in BENCHMARKS.items():
            names = [g.name for g in scenario.guests
                     if g.profile == profile]
            values = []
            for policy in (nova, ours):
                tput = res[policy].throughput
                values.append(sum(tput[n] for n in names) / len(names))
            cells[column] = values
        out[row] = cells
    return out


@dataclasses.dataclass
class Row:
    """One published number next to the simulated one."""

    key: str
    label: str
    published: float | None
    simulated: float | None
    role: str
    agrees: bool | None
    note: str = ''


def _gain(default, optimized, unit_is_time) -> float:
    return default / optimized - 1.0 if unit_is_time else \
        optimized / default - 1.0


def _table_rows(name, published, sim, add) -> None:
    """Liu & Li's Tables 2 and 3: per benchmark, the gain and how the
    default changes from the first row.
    """
    first = next(iter(published))
    for row, cells in published.items():
        for column, (default, optimized) in cells.items():
            time_unit = column.endswith('_s')
            s_default, s_opt = sim[row][column]
            prefix = '%s %s %s' % (name.split('_')[0], row, column)
            add(prefix + ': gain', _gain(default, optimized, time_unit),
                s_opt / s_default - 1.0)
            if row != first:
                p0 = published[first][column][0]
                s0 = sim[first][column][0]
                change = p0 / default if time_unit else default / p0
                add('%s: default vs %s' % (prefix, first), change - 1.0,
                    s_default / s0 - 1.0)


def compare(data: dict, simulated: dict) -> list:
    """Every figure of :data:`figures.FIGURES` as rows, with verdicts."""
    rows = []
    for fig in figures.FIGURES:
        published = lookup(data, fig.key)
        sim = simulated.get(fig.key)
        name = fig.key.split('/')[-1]
        if fig.role == figures.NOT_SIMULATED or sim is None:
            rows.append(Row(fig.key, name, None, None, fig.role, None,
                            fig.note))
            continue

        def add(label, pub, value, fig=fig):
            rows.append(Row(fig.key, label, pub, value, fig.role,
                            figures.agrees(fig, pub, value), fig.note))

        if fig.key.endswith('_default_vs_optimized'):
            _table_rows(name, published, sim, add)
        elif isinstance(published, dict):
            for sub, value in published.items():
                if not isinstance(value, dict):
                    if sub in sim:
                        add('%s, %s guests' % (name, sub), value, sim[sub])
                    continue
                for count, v in value.items():
                    if count in sim.get(sub, {}):
                        add('%s %s, %s guests' % (name, sub, count), v,
                            sim[sub][count])
        elif isinstance(published, list):
            for label, p, s in zip(('first', 'last'), published, sim):
                add('%s (%s)' % (name, label), p, s)
        else:
            add(name, published, sim)
    return rows


def rst_table(rows) -> str:
    """The rows as the RST list-table of doc/source/user/simulator.rst."""
    out = ['.. list-table::', '   :header-rows: 1',
           '   :widths: 46 12 12 16 14',
           '', '   * - Figure', '     - Published', '     - Simulated',
           '     - Role', '     - Verdict']
    for row in rows:
        if row.published is None:
            verdict, pub, sim = 'not simulated', '', ''
        else:
            verdict = 'agrees' if row.agrees else '**disagrees**'
            pub, sim = '%.3f' % row.published, '%.3f' % row.simulated
        out.extend(['   * - ``%s``' % row.label if row.published is not None
                    else '   * - ``%s``: %s' % (row.label, row.note),
                    '     - %s' % pub, '     - %s' % sim,
                    '     - %s' % row.role, '     - %s' % verdict])
    return '\n'.join(out) + '\n'
