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
"""The agent's configuration check (``conf.agent.check``): what stops the
agent at start with one line naming the option.
"""

from oslo_config import cfg

from nova_numa_overhead.conf import agent as agent_conf
from nova_numa_overhead.conf import numa_overhead
from nova_numa_overhead.overhead import estimator
from tests import base

AGENT = 'numa_overhead_agent'


class TestSimulator(base.TestCase):

    def test_sim_host_choices_are_the_presets(self):
        from nova_numa_overhead.sim import presets
        self.assertEqual(sorted(presets.HOSTS),
                         sorted(name for name, _ in agent_conf.SIM_HOSTS))

    def test_unknown_sim_host_is_refused(self):
        self.assertRaises(ValueError, self.flags, group=AGENT,
                          sim_host='nope')

    def test_unknown_sim_scenario_is_refused_with_sim(self):
        self.flags(group=AGENT, sim_scenario='nope')
        # Not used by the libvirt backend.
        agent_conf.check(self.conf)
        self.flags(group=AGENT, hypervisor='sim')
        exc = self.assertRaises(ValueError, agent_conf.check, self.conf)
        self.assertIn("[numa_overhead_agent] sim_scenario: unknown scenario "
                      "'nope' (built-in ones: ", str(exc))
        self.assertIn('mixed-8', str(exc))
        self.flags(group=AGENT, sim_scenario='churn')
        agent_conf.check(self.conf)


class TestFinite(base.TestCase):

    def float_options(self):
        for group, opts in (('numa_overhead', numa_overhead.OPTS),
                            (AGENT, agent_conf.OPTS)):
            for opt in opts:
                kind = opt.type
                if isinstance(kind, cfg.types.Float):
                    yield group, opt.name, 'nan'
                elif isinstance(kind, cfg.types.List) and \
                        isinstance(kind.item_type, cfg.types.Float):
                    yield group, opt.name, '1,nan'

    def test_nan_and_infinity_are_refused_naming_the_option(self):
        checked = set()
        for group, name, value in self.float_options():
            # oslo.config's min and max let NaN through, and infinity
            # where there is no bound on its side.
            self.conf.set_override(name, value, group=group)
            for bad in (value, value.replace('nan', 'inf'),
                        value.replace('nan', '-inf')):
                try:
                    self.conf.set_override(name, bad, group=group)
                except ValueError:
                    continue
                exc = self.assertRaises(ValueError, agent_conf.check,
                                        self.conf)
                self.assertTrue(str(exc).startswith(
                    '[%s] %s: ' % (group, name)), str(exc))
                self.assertIn('is not a finite number', str(exc))
                self.conf.clear_override(name, group=group)
            checked.add(name)
        agent_conf.check(self.conf)
        self.assertTrue({'guest_floor', 'undo_threshold', 'gain_margin',
                         'min_gain', 'migrate_rate_mb_per_s',
                         'llc_high_bound', 'weight_of_unknown',
                         'weight_multiplier', 'claim_penalty',
                         'rml_thresholds'} <= checked, checked)

    def test_thresholds_must_be_finite(self):
        for values in ((1.3, float('nan')), (1.3, float('inf')),
                       (float('nan'), 1.3)):
            exc = self.assertRaises(ValueError, estimator.check_thresholds,
                                    'rml', values)
            self.assertIn('rml thresholds must be finite numbers', str(exc))
        self.assertEqual((1.3, 2.0),
                         estimator.check_thresholds('rml', [1.3, 2]))
