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
"""The bar (sim/rules.py) on the built-ins and one fixed sweep.

The default configuration does not meet it everywhere yet: the tables
below are where it does not, rule by rule, as the README says. A change
that breaks a rule somewhere else fails here; so does one that mends a
scenario (take it off the table, and off the README's list).
"""

import testtools

from nova_numa_overhead.sim import rules
from nova_numa_overhead.sim import sweep

SWEEP_SEED = 101
SWEEP_COUNT = 10

# Where the default configuration breaks the bar on the built-ins.
KNOWN_BUILTIN = {
    'churn': ('win',),
    'llc-2': ('oracle',),
    'mc-2': ('oracle',),
    'mc-8': ('win', 'oracle'),
    'memory-16g': ('win', 'oracle'),
    'memory-32g': ('win', 'oracle'),
    'memory-8g': ('win', 'oracle'),
    'mixed-12': ('win', 'oracle'),
    'mixed-16': ('win', 'oracle'),
    'mixed-8': ('win', 'oracle'),
    'phases': ('win',),
    'sockets-2': ('win', 'oracle'),
    'sockets-8': ('win', 'oracle'),
    'vtrms-amd-6376': ('win',),
}

# ... and on ``simulate --sweep 10 --seed 101``.
KNOWN_SWEEP = {
    'sweep-101-0': ('oracle',),
    'sweep-101-2': ('oracle',),
    'sweep-101-4': ('oracle',),
    'sweep-101-5': ('win', 'oracle'),
    'sweep-101-7': ('oracle',),
    'sweep-101-9': ('oracle',),
}

# Where the fair oracle (every guest >= 0.90x Nova) stays below 90% of the
# oracle in that sweep: there no policy can keep both the guest and the
# oracle rule, as far as the search knows.
UNATTAINABLE_SWEEP = {'sweep-101-0', 'sweep-101-2', 'sweep-101-4',
                      'sweep-101-5', 'sweep-101-7', 'sweep-101-9'}
# And where another policy gets ahead by sacrificing guests, beyond every
# placement known that keeps them (the guest and win rules look
# incompatible).
WIN_UNATTAINABLE_SWEEP = set()


def row(name='s', vs_nova=1.0, worst=1.0, vs_best=0.0, oracle=1.0,
        moved_mb=0.0, memory_gb=(4.0,)):
    return {'name': name, 'vs_best_other': vs_best,
            'fraction_of_oracle': oracle,
            'scenario': {'guests': [{'memory_gb': m} for m in memory_gb]},
            'policies': {'overhead-aware': {
                'vs_nova_default': vs_nova, 'worst_guest': worst,
                'moved_mb': moved_mb}}}


class TestBroken(testtools.TestCase):

    def test_none(self):
        self.assertEqual([], rules.broken(row()))

    def test_each_rule(self):
        self.assertEqual(['harm'], rules.broken(row(vs_nova=0.98)))
        self.assertEqual(['guest'], rules.broken(row(worst=0.89)))
        self.assertEqual(['win'], rules.broken(row(vs_best=-0.006)))
        self.assertEqual(['oracle'], rules.broken(row(oracle=0.89)))
        self.assertEqual(['economy'], rules.broken(row(moved_mb=4097)))

    def test_papers_scenarios_ask_more_of_the_oracle(self):
        self.assertEqual([], rules.broken(row('sweep-1-0', oracle=0.95)))
        self.assertEqual(['oracle'],
                         rules.broken(row('mc-4', oracle=0.95)))

    def test_unattainable(self):
        self.assertFalse(rules.unattainable(row()))
        fair = dict(row(), fair_of_oracle=0.85)
        self.assertTrue(rules.unattainable(fair))
        fair = dict(row('sweep-1-0'), fair_of_oracle=0.95)
        self.assertFalse(rules.unattainable(fair))
        fair = dict(row('mc-4'), fair_of_oracle=0.95)
        self.assertTrue(rules.unattainable(fair))

    def test_unattainable_unless_a_run_keeping_every_guest_reaches(self):
        r = dict(full_row(1.0), fair_of_oracle=0.85)
        r['policies']['oracle']['worst_guest'] = 0.5
        self.assertTrue(rules.unattainable(r))
        # A run that kept every guest reached the oracle's bar there.
        for name in ('numad', 'overhead-aware', 'oracle'):
            ok = dict(r, policies={
                n: dict(c, worst_guest=0.5) for n, c in
                r['policies'].items() if n != 'nova-default'})
            ok['policies'][name] = dict(r['policies'][name],
                                        worst_guest=0.95,
                                        fraction_of_oracle=0.9)
            self.assertFalse(rules.unattainable(ok), name)

    def test_win_unattainable(self):
        def with_fair(fair, numad_worst=0.5, vdarm=(1.0, 1.0)):
            r = dict(full_row(1.0), best_other='numad',
                     oracle={'fair_mean': fair})
            # liu-li (2.0) and the oracle (1.5) sacrifice guests here.
            for name in ('liu-li', 'oracle'):
                r['policies'][name]['worst_guest'] = 0.5
            r['policies']['numad']['worst_guest'] = numad_worst
            r['policies']['vdarm'] = {'mean_throughput': vdarm[0],
                                      'worst_guest': vdarm[1]}
            return r
        # numad 1.2 by sacrificing a guest; the fair oracle 1.1: no
        # placement known that keeps every guest comes within 0.5%.
        self.assertTrue(rules.win_unattainable(with_fair(1.1)))
        self.assertEqual(['win'], rules.out_of_reach(with_fair(1.1)))
        # Within the margin: attainable.
        self.assertFalse(rules.win_unattainable(with_fair(1.195)))
        # numad keeps every guest: its own placement reaches it.
        self.assertFalse(rules.win_unattainable(with_fair(1.1, 0.9)))
        # Another policy keeping every guest comes within the margin.
        self.assertFalse(rules.win_unattainable(
            with_fair(1.1, vdarm=(1.195, 0.95))))
        # ... but not one that sacrifices a guest too, nor one whose worst
        # guest is not known.
        self.assertTrue(rules.win_unattainable(
            with_fair(1.1, vdarm=(1.195, 0.85))))
        self.assertTrue(rules.win_unattainable(
            with_fair(1.1, vdarm=(1.195, None))))
        # Any run that kept every guest counts: the oracle's, liu-li's,
        # ours.
        for name in ('oracle', 'liu-li', 'overhead-aware'):
            r = with_fair(1.1)
            r['policies'][name].update(mean_throughput=1.25,
                                       worst_guest=0.95)
            self.assertFalse(rules.win_unattainable(r), name)
        # Nova's default keeps every guest by definition, its worst guest
        # known or not: ahead of it, nothing is out of reach.
        r = with_fair(0.9)
        r['best_other'] = 'nova-default'
        del r['policies']['nova-default']['worst_guest']
        self.assertFalse(rules.win_unattainable(r))
        r = with_fair(0.9)
        r['policies']['nova-default'].update(mean_throughput=1.2,
                                             worst_guest=None)
        self.assertFalse(rules.win_unattainable(r))
        # No fair oracle, no best other, a NaN: nothing said.
        self.assertFalse(rules.win_unattainable(full_row(1.0)))
        self.assertFalse(rules.win_unattainable(
            dict(full_row(1.0), oracle={'fair_mean': 1.0})))
        self.assertFalse(rules.win_unattainable(with_fair(float('nan'))))

    def test_bar(self):
        out = dict(full_row(1.0), best_other='numad',
                   oracle={'fair_mean': 1.1}, fraction_of_oracle=0.95)
        for name in ('numad', 'liu-li', 'oracle'):
            out['policies'][name]['worst_guest'] = 0.5
        behind = dict(out, oracle={'fair_mean': 1.2})
        ahead = dict(full_row(1.3), fraction_of_oracle=0.95)
        self.assertEqual({
            'broken': 2,
            'rules': {'harm': 0, 'guest': 0, 'win': 2, 'oracle': 0,
                      'economy': 0},
            'only_out_of_reach': 1,
            'within_reach': {'harm': 0, 'guest': 0, 'win': 1, 'oracle': 0,
                             'economy': 0}},
            sweep.bar([out, behind, ahead]))

    def test_baseline_is_the_simulators(self):
        from nova_numa_overhead.sim import policies
        self.assertEqual(policies.BASELINE, rules.BASELINE)

    def test_out_of_reach(self):
        r = dict(full_row(1.0), best_other='numad',
                 oracle={'fair_mean': 1.1}, fair_of_oracle=0.8)
        for name in ('numad', 'liu-li', 'oracle'):
            r['policies'][name]['worst_guest'] = 0.5
        r['policies']['overhead-aware']['worst_guest'] = 0.8
        # guest is never out of reach; win and oracle look so here.
        self.assertEqual(['guest', 'win', 'oracle'], rules.broken(r))
        self.assertEqual(['win', 'oracle'], rules.out_of_reach(r))
        self.assertEqual(['win'], rules.out_of_reach(r, found=['win']))
        self.assertEqual([], rules.out_of_reach(full_row(1.3)))

    def test_edges_pass(self):
        self.assertEqual([], rules.broken(row(
            vs_nova=0.99, worst=0.90, vs_best=-0.005, oracle=0.90,
            moved_mb=4096)))


def full_row(ours_mean=1.0):
    def policy(mean, worst=1.0):
        return {'mean_throughput': mean, 'vs_nova_default': mean,
                'worst_guest': worst, 'moved_mb': 0.0}
    return {'name': 's', 'scenario': {'guests': [{'memory_gb': 4.0}]},
            'vs_best_other': ours_mean / 1.2 - 1.0,
            'fraction_of_oracle': ours_mean / 1.5, 'worst_guest': 1.0,
            'policies': {'nova-default': policy(1.0),
                         'numad': policy(1.2), 'liu-li': policy(2.0),
                         'overhead-aware': policy(ours_mean),
                         'oracle': policy(1.5)}}


class TestSplice(testtools.TestCase):

    def test_the_variant_against_the_full_runs_others(self):
        variant = {'name': 's', 'policies': {
            'nova-default': {'mean_throughput': 1.0},
            'overhead-aware': {'mean_throughput': 1.35,
                               'vs_nova_default': 1.35,
                               'worst_guest': 0.85, 'moved_mb': 0.0}}}
        full = full_row(1.1)
        row = rules.splice(full, variant)
        # liu-li is not another policy to beat; the oracle is the full
        # run's.
        self.assertEqual('numad', row['best_other'])
        self.assertAlmostEqual(1.35 / 1.2 - 1.0, row['vs_best_other'])
        self.assertAlmostEqual(0.9, row['fraction_of_oracle'])
        self.assertEqual(0.85, row['worst_guest'])
        self.assertEqual(['guest'], rules.broken(row))
        self.assertEqual(['win', 'oracle'], rules.broken(full))
        # The full run's row is left as it was.
        self.assertEqual(1.1, full['policies']['overhead-aware'][
            'mean_throughput'])
        # The variant's predictions, not the full run's.
        full['predictions'] = {'guest': [[1.1, 1.0]]}
        full['calibration'] = {'guest': {'judged': 1}}
        full['steady'] = {'guest': [[1.1, 1.2]]}
        full['steady_calibration'] = {'guest': {'judged': 1}}
        row = rules.splice(full, variant)
        for key in ('predictions', 'calibration', 'steady',
                    'steady_calibration'):
            self.assertNotIn(key, row)
        variant['predictions'] = {'guest': []}
        variant['steady'] = {'guest': [[1.0, 1.0]]}
        row = rules.splice(full, variant)
        self.assertEqual({'guest': []}, row['predictions'])
        self.assertEqual({'guest': [[1.0, 1.0]]}, row['steady'])

    def test_not_others_are_the_oracle_and_liu_li(self):
        from nova_numa_overhead.sim import policies
        self.assertEqual((policies.ORACLE, policies.PaperMethod.name),
                         rules.NOT_OTHERS)

    def test_rows_of_different_scenarios(self):
        variant = dict(full_row(), name='t')
        self.assertRaises(ValueError, rules.splice, full_row(), variant)


class TestTheBar(testtools.TestCase):
    """Whole runs (about half a minute on two workers)."""

    def test_builtins(self):
        data = sweep.run_builtin(workers=2)
        self.assertEqual(KNOWN_BUILTIN, {
            k: tuple(v) for k, v in rules.table(data['scenarios']).items()})

    def test_fixed_sweep(self):
        data = sweep.run(SWEEP_COUNT, SWEEP_SEED, workers=2)
        self.assertEqual(KNOWN_SWEEP, {
            k: tuple(v) for k, v in rules.table(data['scenarios']).items()})
        self.assertEqual(UNATTAINABLE_SWEEP, {
            r['name'] for r in data['scenarios'] if rules.unattainable(r)})
        self.assertEqual(WIN_UNATTAINABLE_SWEEP, {
            r['name'] for r in data['scenarios']
            if rules.win_unattainable(r)})
        dist = sweep.distribution(data)
        self.assertEqual(len(UNATTAINABLE_SWEEP),
                         dist['fair_oracle']['unattainable'])
        self.assertEqual(len(WIN_UNATTAINABLE_SWEEP),
                         dist['fair_oracle']['win_unattainable'])
        # Of the scenarios where the bar is broken, all but sweep-101-5
        # break only rules that look out of reach there (it is 5.3%
        # behind numad, which the fair oracle's placement is not).
        self.assertEqual((len(KNOWN_SWEEP), len(KNOWN_SWEEP) - 1),
                         (dist['bar']['broken'],
                          dist['bar']['only_out_of_reach']))
        self.assertEqual(
            {'harm': 0, 'guest': 0, 'win': 1, 'oracle': 0, 'economy': 0},
            dist['bar']['within_reach'])
        self.assertIn('the bar broken in 6 of 10 (harm 0, guest 0, win 1, '
                      'oracle 6, economy 0); in 5 of them only rules that '
                      'look out of reach; in the others harm 0, guest 0, '
                      'win 1, oracle 0, economy 0',
                      ' '.join(sweep.table(data).split()))
