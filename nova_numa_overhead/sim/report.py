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
"""What ``nova-numa-overhead simulate`` prints: table, JSON, figure.

The headline is always the default configuration (the agent as the docs
recommend it for production, policy ``overhead-aware``), against Nova's
default, against the best of the other policies, and as a fraction of the
oracle.
"""

import json
import sys
import textwrap

from nova_numa_overhead.compute import optimizer
from nova_numa_overhead.sim import policies as policies_mod
from nova_numa_overhead.sim import rules

LABELS = {
    'nova-default': 'nova', 'numad': 'numad', 'interleave': 'intlv',
    'vtrms': 'vtrms', 'vprobe': 'vprob', 'vdarm': 'vdarm',
    'overhead-aware': 'ours', 'oracle': 'orcl',
}
LEGEND = ('nova = Nova default (first touch, kernel NUMA balancing), '
          'intlv = interleave,\nvprob = vProbe, ours = overhead-aware as '
          'recommended for production,\norcl = oracle')
DEFAULT = policies_mod.DEFAULT
BASELINE = policies_mod.BASELINE
ORACLE = policies_mod.ORACLE


class Progress:
    """A text progress bar on stderr."""

    def __init__(self, label: str, stream=None, width: int = 40):
        self.label = label
        self.stream = stream or sys.stderr
        self.width = width
        self.total = 1
        self.count = 0
        self._shown = -1

    def start(self, total: int) -> None:
        self.total = max(1, total)
        self.count = 0
        self._show()

    def tick(self) -> None:
        self.count += 1
        self._show()

    def _show(self) -> None:
        tty = getattr(self.stream, 'isatty', lambda: False)()
        percent = 100 * self.count // self.total
        step = 1 if tty else 10
        if percent // step == self._shown:
            return
        self._shown = percent // step
        filled = self.width * self.count // self.total
        bar = '#' * filled + '.' * (self.width - filled)
        end = '\r' if tty else '\n'
        self.stream.write('%s [%s] %3d%%%s' % (self.label, bar, percent,
                                               end))
        self.stream.flush()

    def done(self) -> None:
        if getattr(self.stream, 'isatty', lambda: False)():
            self.stream.write('\n')
        self.stream.flush()


def _r(value, digits=4):
    return None if value is None else round(value, digits)


def summary(scenario, results: dict) -> dict:
    """The numbers of one run, as plain data (the JSON output)."""
    base = results.get(BASELINE)
    oracle = results.get(ORACLE)
    policies = {}
    for name, res in results.items():
        norm = {g: (v / base.throughput[g]
                    if base and base.throughput.get(g) else None)
                for g, v in res.throughput.items()}
        worst = [v for v in norm.values() if v is not None]
        policies[name] = {
            'mean_throughput': _r(res.mean),
            'vs_nova_default': _r(res.mean / base.mean)
            if base and base.mean else None,
            'throughput': {g: _r(v) for g, v in
                           sorted(res.throughput.items())},
            'normalised': {g: _r(v) for g, v in sorted(norm.items())},
            'worst_guest': _r(min(worst)) if worst else None,
            'moved_mb': round(res.moved_mb, 1),
            'moved_by': {k: round(v, 1) for k, v in
                         sorted(res.moved_by.items())},
            'oom_kills': res.oom_kills,
            'fraction_of_oracle': _r(res.mean / oracle.mean)
            if oracle and oracle.mean else None,
        }
    data = {
        'scenario': scenario.name, 'description': scenario.description,
        'host': scenario.host.name, 'hosts': scenario.hosts,
        'seed': scenario.seed, 'balancing': scenario.balancing,
        'counters': scenario.counters,
        'default': DEFAULT,
        'guests': {g.name: {
            'profile': g.profile, 'vcpus': g.vcpus,
            'memory_mb': g.memory_mb, 'vcpu_nodes': list(g.vcpu_nodes),
            'leave_at': g.leave_at,
            'phases': [[p.at, p.profile] for p in g.phases]}
            for g in scenario.guests},
        'policies': policies,
    }
    if oracle is not None:
        data['oracle'] = {k: v for k, v in oracle.extra.items()}
    if DEFAULT in policies:
        ours = policies[DEFAULT]
        data['fraction_of_oracle'] = ours['fraction_of_oracle']
        others = [n for n in results
                  if n != DEFAULT and n not in rules.NOT_OTHERS]
        if others:
            best = max(others, key=lambda n: results[n].mean)
            data['best_other'] = best
            data['vs_best_other'] = _r(
                results[DEFAULT].mean / results[best].mean - 1.0) \
                if results[best].mean else None
        data['worst_guest'] = ours['worst_guest']
        fair = oracle.extra.get('fair_mean') if oracle else None
        if fair and oracle.mean:
            # How much of the oracle a placement that harms no guest
            # reaches (sim.oracle's fair oracle), and ours of that.
            data['fair_of_oracle'] = _r(min(fair / oracle.mean, 1.0))
            data['fraction_of_fair_oracle'] = _r(results[DEFAULT].mean /
                                                 fair)
        extra = dict(results[DEFAULT].extra)
        pairs = extra.pop('predictions', None)
        steady = extra.pop('steady', None)
        if 'decisions' in extra:
            data['agent'] = extra
        if pairs is not None:
            # What the optimizer's cost model predicted for the moves it
            # judged, beside what was measured.
            data['predictions'] = pairs
            data['calibration'] = calibration(pairs)
        if steady is not None:
            # The same predictions, of every move made, beside the
            # steady state the simulator's physics gives the move: the
            # cost model's own error, without the transients, the noise
            # and the other moves the verdicts also measure.
            data['steady'] = steady
            data['steady_calibration'] = calibration(steady)
    return data


def calibration(pairs: dict) -> dict:
    """kind -> optimizer.calibration_summary of its [[predicted,
    measured], ...].
    """
    return {kind: optimizer.calibration_summary(values)
            for kind, values in pairs.items()}


def calibration_text(c: dict) -> str:
    """One paragraph: how the optimizer's predictions came true."""
    text = optimizer.calibration_text(c)
    if not text:
        return 'cost model: no verdict to compare predictions with'
    return _paragraph('cost model at the verdicts: ' + text)


def steady_text(c: dict) -> str:
    """One paragraph: the optimizer's predictions against the steady
    state the simulator's physics gives its moves ('' without a move).
    """
    text = optimizer.calibration_text(c, measured='simulated')
    return _paragraph('cost model against the simulated steady state of '
                      'its moves: ' + text) if text else ''


def _paragraph(text: str) -> str:
    return textwrap.fill(text, width=79, subsequent_indent='  ')


def table(data: dict) -> str:
    """An 80-column table of the summary."""
    names = list(data['policies'])
    head = '%-14s' % 'guest  profile' + ''.join(
        '%6s' % LABELS.get(n, n[:5]) for n in names)
    lines = [data['scenario'],
             '%s (seed %d%s)' % (data['description'], data['seed'],
                                 '' if data['balancing'] else
                                 ', NUMA balancing off'),
             'throughput per guest, normalised to nova-default',
             head, '-' * len(head)]
    for guest, info in data['guests'].items():
        row = '%-7s%-7s' % (guest[:6], info['profile'][:6])
        for n in names:
            value = data['policies'][n]['normalised'].get(guest)
            row += '%6s' % ('-' if value is None else '%.2f' % value)
        lines.append(row)
    lines.append('-' * len(head))

    def row(label, key, fmt, scale=1.0):
        cells = []
        for n in names:
            value = data['policies'][n].get(key)
            cells.append('%6s' % ('-' if value is None
                                  else fmt % (value * scale)))
        return '%-14s' % label + ''.join(cells)

    lines.append(row('mean', 'vs_nova_default', '%.2f'))
    lines.append(row('worst guest', 'worst_guest', '%.2f'))
    lines.append(row('moved GiB', 'moved_mb', '%.0f', 1 / 1024.0))
    lines.append(LEGEND)
    if DEFAULT in data['policies']:
        ours = data['policies'][DEFAULT]
        lines.append('')
        parts = ['default configuration (%s): %+.1f%% vs Nova default'
                 % (LABELS[DEFAULT],
                    100 * ((ours['vs_nova_default'] or 0) - 1.0))]
        if 'best_other' in data:
            parts.append('%+.1f%% vs the best other (%s)'
                         % (100 * data['vs_best_other'],
                            data['best_other']))
        lines.append(',\n  '.join(parts))
        tail = '  worst single guest %.2fx Nova default' % (
            ours['worst_guest'] or 0)
        if data.get('fraction_of_oracle'):
            tail += ', %.1f%% of the oracle (%s)' % (
                100 * data['fraction_of_oracle'],
                data.get('oracle', {}).get('kind', ''))
        if data.get('fair_of_oracle'):
            tail += (';\n  the best placement found that holds every guest '
                     'at >= %.2fx reaches\n  %.1f%% of the oracle; ours is '
                     '%.1f%% of it' % (rules.GUEST,
                                       100 * data['fair_of_oracle'],
                                       100 * data['fraction_of_fair_oracle']))
        lines.append(tail)
        if data.get('calibration'):
            lines.append(calibration_text(data['calibration']))
        steady = steady_text(data.get('steady_calibration') or {})
        if steady:
            lines.append(steady)
    return '\n'.join(lines)


def to_json(data: dict) -> str:
    return json.dumps(data, indent=2, sort_keys=True)


def plot(data: dict, path: str) -> None:
    """Mean throughput of the default configuration against Nova's
    default, the best other policy and the oracle, and every guest's
    throughput under it (sorted), on one figure.
    """
    import matplotlib
    matplotlib.use('Agg')
    from matplotlib import pyplot

    pols = data['policies']
    shown = [BASELINE]
    if data.get('best_other') and data['best_other'] != BASELINE:
        shown.append(data['best_other'])
    shown.append(DEFAULT)
    if ORACLE in pols:
        shown.append(ORACLE)
    shown = [p for p in shown if p in pols]
    colours = {BASELINE: '#999999', DEFAULT: '#1f77b4', ORACLE: '#2ca02c'}
    fig, (left, right) = pyplot.subplots(
        1, 2, figsize=(11, 4.2), gridspec_kw={'width_ratios': [1, 2]})
    values = [pols[p]['vs_nova_default'] or 0 for p in shown]
    bars = left.bar(range(len(shown)), values,
                    color=[colours.get(p, '#ff7f0e') for p in shown])
    for bar, value in zip(bars, values):
        left.text(bar.get_x() + bar.get_width() / 2, value, '%.2f' % value,
                  ha='center', va='bottom', fontsize=9)
    left.set_xticks(range(len(shown)))
    left.set_xticklabels([LABELS.get(p, p) for p in shown])
    left.set_ylim(0, max(values + [1.0]) * 1.18)
    left.axhline(1.0, color='black', linewidth=0.8)
    left.set_ylabel('mean throughput vs Nova default')
    left.set_title('mean', fontsize=10)
    for p in shown:
        norm = sorted(v for v in pols[p]['normalised'].values()
                      if v is not None)
        right.plot(range(1, len(norm) + 1), norm, marker='o', markersize=3,
                   label=LABELS.get(p, p), color=colours.get(p, '#ff7f0e'))
    right.axhline(1.0, color='black', linewidth=0.8)
    right.set_xlabel('guests, sorted by their throughput vs Nova default')
    right.set_ylabel('throughput vs Nova default')
    right.set_title('every guest', fontsize=10)
    right.legend(fontsize=8, loc='upper left')
    fig.suptitle('%s: %s' % (data['scenario'], data['description']),
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot.close(fig)
