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
"""The bar the default configuration is held to, per scenario.

* harm: its mean throughput below 0.99x Nova's default;
* guest: a guest below 0.90x its Nova-default throughput;
* win: more than 0.5% behind the best other policy;
* oracle: below 90% of the oracle (97% on the papers' scenarios);
* economy: more memory moved than the guests have in all.

:func:`broken` reads one scenario's row of ``simulate --all`` or
``--sweep`` JSON (:func:`nova_numa_overhead.sim.report.summary`);
:func:`splice` puts a quicker run of ours (``--policies
nova-default,overhead-aware --set ...``) into a full run's row
(``tools/splice-sweep.py``).

:func:`unattainable` says where the fair oracle (the oracle's search
with every guest held at >= GUEST of its Nova-default throughput,
:mod:`nova_numa_overhead.sim.oracle`) stays below the oracle rule's floor:
the best placement known that keeps the guest rule misses the oracle rule
there. The search being a heuristic, that is evidence that no policy can
keep both, not proof. :func:`win_unattainable` says the same of the win
rule where the best other policy gets ahead by sacrificing guests and no
placement known that keeps them (the fair oracle's, or any run's that
kept every guest) comes within the rule's margin of it;
:func:`out_of_reach` lists the rules broken in a row that look so.
"""

HARM = 0.99
GUEST = 0.90
WIN = -0.005
ORACLE = 0.90
ORACLE_PAPER = 0.97
# The built-in scenarios of Liu & Li's and vTRMS's experiments.
PAPER = ('llc-', 'mc-', 'remote-', 'interconnect-', 'mixed-', 'memory-',
         'sockets-', 'vtrms-')
RULES = ('harm', 'guest', 'win', 'oracle', 'economy')
# Nova's default: every guest's yardstick.
BASELINE = 'nova-default'
# Not other policies to beat: the oracle (an upper bound) and liu-li (the
# default configuration without its optimizer).
NOT_OTHERS = ('oracle', 'liu-li')


def broken(row: dict, policy: str = 'overhead-aware') -> list:
    """The rules ``policy`` breaks in one scenario's row, in RULES order."""
    ours = row['policies'][policy]
    out = []
    if (ours.get('vs_nova_default') or 0.0) < HARM:
        out.append('harm')
    if (ours.get('worst_guest') or 0.0) < GUEST:
        out.append('guest')
    if row.get('vs_best_other') is not None and \
            row['vs_best_other'] < WIN:
        out.append('win')
    if row.get('fraction_of_oracle') is not None and \
            row['fraction_of_oracle'] < oracle_floor(row):
        out.append('oracle')
    guests = row.get('scenario', {}).get('guests') or ()
    total_gb = sum(g.get('memory_gb', 0.0) for g in guests)
    if guests and (ours.get('moved_mb') or 0.0) / 1024.0 > total_gb:
        out.append('economy')
    return out


def table(rows) -> dict:
    """Scenario name -> the rules broken there (only where some are)."""
    out = {}
    for row in rows:
        rules = broken(row)
        if rules:
            out[row['name']] = rules
    return out


def _keeps(name: str, cell: dict) -> bool:
    """Whether a policy's run in a row kept every guest at GUEST of its
    Nova-default throughput or more: Nova's default by definition (every
    guest's yardstick), any other where its worst guest says so.
    """
    if name == BASELINE:
        return True
    worst = cell.get('worst_guest')
    return worst is not None and worst >= GUEST


def unattainable(row: dict) -> bool:
    """Whether the fair oracle stays below the oracle rule's floor in this
    row, and no run there (the oracle's own and ours included) that kept
    every guest reached it: the guest and oracle rules look incompatible
    (as far as the search knows).
    """
    fair = row.get('fair_of_oracle')
    floor = oracle_floor(row)
    if fair is None or not fair < floor:
        return False
    return not any(_keeps(name, cell) and
                   (cell.get('fraction_of_oracle') or 0.0) >= floor
                   for name, cell in row.get('policies', {}).items())


def win_unattainable(row: dict) -> bool:
    """Whether, in this row, no placement known that keeps the guest rule
    comes within the win rule's margin of the best other policy: the
    fair oracle's mean and the means of the runs that kept every guest
    at GUEST or more (every policy's, the oracle's and ours included) all
    stay more than -WIN behind it (the best other policy reaches its mean
    by sacrificing guests). Evidence, not proof, as :func:`unattainable`.
    """
    fair = (row.get('oracle') or {}).get('fair_mean')
    policies = row.get('policies', {})
    best = policies.get(row.get('best_other'))
    if fair is None or best is None or not best.get('mean_throughput'):
        return False
    reach = [fair] + [cell.get('mean_throughput') or 0.0
                      for name, cell in policies.items()
                      if _keeps(name, cell)]
    return max(reach) < best['mean_throughput'] * (1.0 + WIN)


def out_of_reach(row: dict, policy: str = 'overhead-aware',
                 found=None) -> list:
    """The rules ``policy`` breaks in this row (``found``, if its
    :func:`broken` is at hand) that look out of reach for any policy
    keeping the guest rule: ``oracle`` where :func:`unattainable`, ``win``
    where :func:`win_unattainable`.
    """
    out = []
    for rule in broken(row, policy) if found is None else found:
        if (rule == 'oracle' and unattainable(row)) or \
                (rule == 'win' and win_unattainable(row)):
            out.append(rule)
    return out


def splice(full: dict, variant: dict, policy: str = 'overhead-aware'
           ) -> dict:
    """``full``'s row with ``variant``'s results for ``policy`` (rows of
    the same scenario: ``variant`` run with fewer policies, as
    ``simulate --policies nova-default,overhead-aware --set ...``), its
    standing against the other policies and the oracle recomputed from
    their means, which the JSON rounds to four digits (a scenario within
    a rounding of a rule's edge may count on the other side of it). The
    oracle is ``full``'s: where it took our placement for some seconds
    (it tries every policy's), the variant's would change it a little.
    ``vs_nova_default`` and ``worst_guest`` are the variant's own.
    """
    if full.get('name') != variant.get('name'):
        raise ValueError('rows of different scenarios: %s, %s'
                         % (full.get('name'), variant.get('name')))
    ours = variant['policies'][policy]
    policies = dict(full['policies'], **{policy: ours})
    row = dict(full, policies=policies)
    others = [p for p in policies if p != policy and p not in NOT_OTHERS]
    if others:
        best = max(others, key=lambda p: policies[p]['mean_throughput'])
        row['best_other'] = best
        row['vs_best_other'] = (
            ours['mean_throughput'] / policies[best]['mean_throughput'] -
            1.0) if policies[best]['mean_throughput'] else None
    oracle = policies.get('oracle')
    if oracle and oracle.get('mean_throughput'):
        row['fraction_of_oracle'] = \
            ours['mean_throughput'] / oracle['mean_throughput']
    row['worst_guest'] = ours.get('worst_guest')
    # The variant's own predictions (none where it ran without them).
    for key in ('predictions', 'calibration', 'steady',
                'steady_calibration', 'agent'):
        row.pop(key, None)
        if key in variant:
            row[key] = variant[key]
    return row


def oracle_floor(row: dict) -> float:
    """The share of the oracle the oracle rule asks for in this row."""
    return ORACLE_PAPER if row['name'].startswith(PAPER) else ORACLE
