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
"""Regenerate the published-vs-simulated table of the simulator guide.

    .venv/bin/python tools/sim-figures.py

Runs every validation experiment (a few minutes) and writes
doc/source/user/published-vs-simulated.inc (the table) and
doc/source/user/published-vs-simulated.json (the simulated values, which
tests/unit/sim/test_validation.py checks against the simulator).
"""

import json
import os
import sys

from nova_numa_overhead.sim import validation

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(TOP, 'doc', 'source', 'user', 'published-vs-simulated')


def main():
    data = validation.load_data()
    simulated = dict(validation.characterization())
    simulated.update(validation.results_figures())
    rows = validation.compare(data, simulated)
    with open(OUT + '.inc', 'w') as f:
        f.write(validation.rst_table(rows))
    with open(OUT + '.json', 'w') as f:
        json.dump(simulated, f, indent=1, sort_keys=True)
        f.write('\n')
    agree = sum(1 for r in rows if r.agrees)
    judged = sum(1 for r in rows if r.agrees is not None)
    print('%d of %d published figures agree within tolerance (%d not '
          'simulated)' % (agree, judged, len(rows) - judged))
    for role in ('calibration', 'validation'):
        part = [r for r in rows if r.role == role and r.agrees is not None]
        print('  %s: %d of %d agree' % (role, sum(r.agrees for r in part),
                                        len(part)))
    return 0


if __name__ == '__main__':
    sys.exit(main())
