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
"""What ``nova-numa-overhead simulate`` prints: table, JSON, figure."""

import json
import sys

LABELS = {
    'nova-default': 'nova', 'numad': 'numad', 'interleave': 'intlv',
    'vtrms': 'vtrms', 'vprobe': 'vprob', 'vdarm': 'vdarm',
    'overhead-aware': 'ours', 'overhead-aware+fifo': 'o+f',
    'overhead-aware+vcpu': 'o+v', 'oracle': 'orcl',
}
LEGEND = ('nova = Nova default (first touch), intlv = interleave, '
          'vprob = vProbe,\nours = overhead-aware, o+f = with swap-FIFO '
          'rebalancing, o+v = with\nvCPU co-location, orcl = oracle')
OURS = ('overhead-aware', 'overhead-aware+fifo', 'overhead-aware+vcpu')
BASELINE = 'nova-default'


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


def summary(scenario, results: dict) -> dict:
    """The numbers of one run, as plain data (the JSON output)."""
    base = results.get(BASELINE)
    policies = {}
    for name, res in results.items():
        norm = {g: (v / base.throughput[g] if base and base.throughput[g]
                    else v) for g, v in res.throughput.items()}
        policies[name] = {
            'mean_throughput': round(res.mean, 4),
            'vs_nova_default': round(res.mean / base.mean, 4)
            if base else None,
            'throughput': {g: round(v, 4) for g, v in
                           sorted(res.throughput.items())},
            'normalised': {g: round(v, 4) for g, v in sorted(norm.items())},
            'moved_mb': round(res.moved_mb, 1),
            'hottest_level': res.hottest_level,
            'mean_level': round(res.mean_level, 2),
        }
    data = {
        'scenario': scenario.name, 'description': scenario.description,
        'host': scenario.host.name, 'seed': scenario.seed,
        'guests': {g.name: {'profile': g.profile, 'vcpus': g.vcpus,
                            'memory_mb': g.memory_mb,
                            'vcpu_node': g.vcpu_node}
                   for g in scenario.guests},
        'policies': policies,
    }
    ours = [p for p in OURS if p in results]
    if ours:
        best = max(ours, key=lambda p: results[p].mean)
        data['ours'] = best
        data['gain_over'] = {
            name: round(results[best].mean / res.mean - 1.0, 4)
            for name, res in results.items() if name not in OURS}
        if 'oracle' in results:
            data['fraction_of_oracle'] = round(
                results[best].mean / results['oracle'].mean, 4)
    return data


def table(data: dict) -> str:
    """An 80-column table of the summary."""
    names = list(data['policies'])
    head = '%-14s' % 'guest  profile' + ''.join(
        '%6s' % LABELS.get(n, n[:5]) for n in names)
    lines = [data['scenario'],
             '%s (seed %d)' % (data['description'], data['seed']),
             'throughput per guest, normalised to nova-default',
             head, '-' * len(head)]
    for guest, info in data['guests'].items():
        row = '%-7s%-7s' % (guest[:6], info['profile'][:6])
        for n in names:
            row += '%6.2f' % data['policies'][n]['normalised'].get(guest, 0)
        lines.append(row)
    lines.append('-' * len(head))
    lines.append('%-14s' % 'mean' + ''.join(
        '%6.2f' % (data['policies'][n]['vs_nova_default'] or 0)
        for n in names))
    lines.append('%-14s' % 'hottest level' + ''.join(
        '%6.0f' % data['policies'][n]['hottest_level'] for n in names))
    lines.append('%-14s' % 'moved GiB' + ''.join(
        '%6.0f' % (data['policies'][n]['moved_mb'] / 1024.0)
        for n in names))
    lines.append(LEGEND)
    if 'gain_over' in data:
        lines.append('')
        gains = ['%s %+.1f%%' % (LABELS.get(n, n), 100 * g)
                 for n, g in data['gain_over'].items()]
        lines.append('%s vs each:' % LABELS[data['ours']])
        for i in range(0, len(gains), 5):
            lines.append('  ' + ', '.join(gains[i:i + 5]))
        if 'fraction_of_oracle' in data:
            lines.append('%s reaches %.1f%% of the oracle'
                         % (LABELS[data['ours']],
                            100 * data['fraction_of_oracle']))
    return '\n'.join(lines)


def to_json(data: dict) -> str:
    return json.dumps(data, indent=2, sort_keys=True)


def plot(data: dict, path: str) -> None:
    """A grouped bar chart in the style of Liu & Li's Figures 7 and 8."""
    import matplotlib
    matplotlib.use('Agg')
    from matplotlib import pyplot

    names = list(data['policies'])
    guests = list(data['guests']) + ['mean']
    width = 0.8 / len(names)
    fig, ax = pyplot.subplots(figsize=(max(8, len(guests) * 0.9), 4.5))
    for i, name in enumerate(names):
        values = [data['policies'][name]['normalised'].get(g, 0)
                  for g in guests[:-1]]
        values.append(data['policies'][name]['vs_nova_default'] or 0)
        ax.bar([x + i * width for x in range(len(guests))], values, width,
               label=LABELS.get(name, name))
    ax.axhline(1.0, color='black', linewidth=0.8)
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(guests))])
    ax.set_xticklabels(['%s\n%s' % (g, data['guests'][g]['profile'])
                        if g in data['guests'] else g for g in guests],
                       fontsize=8)
    ax.set_ylabel('throughput vs nova-default')
    ax.set_title('%s: %s' % (data['scenario'], data['description']),
                 fontsize=10)
    ax.legend(ncol=5, fontsize=8, loc='upper left')
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot.close(fig)
