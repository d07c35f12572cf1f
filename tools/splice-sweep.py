#!/usr/bin/env python3
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
"""The bar's rules for a variant of the default configuration, without
re-running every policy.

    nova-numa-overhead simulate --sweep 50 --seed 101 --format json \\
        > full.json
    nova-numa-overhead simulate --sweep 50 --seed 101 --format json \\
        --policies nova-default,overhead-aware \\
        --set numa_overhead_agent.guest_floor=0.93 > variant.json
    .venv/bin/python tools/splice-sweep.py full.json variant.json

Several pairs may be given (FULL VARIANT FULL VARIANT ...: one per seed).
It prints, over all their scenarios, how many break each rule and the
bar (nova_numa_overhead.sim.rules; in how many every rule broken looks
out of reach, rules.out_of_reach, and in the others how many break each
rule where it does not look so: sim.sweep.bar), the mean of the
variant's means against Nova's default, the worst-guest count and the
memory moved, with the other policies and the oracle of the full run
(nova_numa_overhead.sim.rules.splice says what that approximates).
"""

import json
import sys

from nova_numa_overhead.sim import rules
from nova_numa_overhead.sim import sweep


def _rows(path) -> dict:
    """Scenario name -> row of a ``simulate --sweep`` (or ``--all``)
    JSON file; ValueError, one line, for anything else.
    """
    with open(path) as f:
        try:
            data = json.load(f)
            return {r['name']: r for r in data['scenarios']}
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError('%s: not the JSON of simulate --sweep or --all '
                             '(%s)' % (path, exc))


def main(argv) -> int:
    if not argv or len(argv) % 2:
        print(__doc__, file=sys.stderr)
        return 2
    rows = []
    means = []
    guests = 0
    moved_mb = 0.0
    for full_path, variant_path in zip(argv[::2], argv[1::2]):
        try:
            full, variant = _rows(full_path), _rows(variant_path)
        except (OSError, ValueError) as exc:
            print('splice-sweep: %s' % exc, file=sys.stderr)
            return 2
        if set(full) != set(variant):
            print('splice-sweep: %s and %s hold different scenarios'
                  % (full_path, variant_path), file=sys.stderr)
            return 2
        for name in sorted(full):
            try:
                row = rules.splice(full[name], variant[name])
            except KeyError as exc:
                print('splice-sweep: %s: no %s in its rows (a --sweep or '
                      '--all JSON of simulate?)' % (name, exc),
                      file=sys.stderr)
                return 2
            rows.append(row)
            ours = row['policies']['overhead-aware']
            means.append(ours.get('vs_nova_default') or 0.0)
            guests += sum(1 for v in ours.get('normalised', {}).values()
                          if v is not None and v < rules.GUEST)
            moved_mb += ours.get('moved_mb') or 0.0
    bar = sweep.bar(rows)
    print('scenarios %d, bar broken in %d (%s; in %d only rules that '
          'look out of reach, in the others %s); mean of the means %.4fx '
          "Nova's default; guests below %.2fx: %d; %.0f GiB moved"
          % (len(means), bar['broken'],
             ', '.join('%s %d' % (r, bar['rules'][r]) for r in rules.RULES),
             bar['only_out_of_reach'],
             ', '.join('%s %d' % (r, bar['within_reach'][r])
                       for r in rules.RULES),
             sum(means) / max(len(means), 1), rules.GUEST, guests,
             moved_mb / 1024.0))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
