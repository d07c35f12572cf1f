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
"""Shared test helpers."""

import fixtures
import hypothesis
from oslo_config import cfg
from oslo_config import fixture as config_fixture
import testtools

from nova_numa_overhead import conf as plugin_conf
from nova_numa_overhead.overhead import estimator
from nova_numa_overhead import report as report_mod


def fuzz(examples: int, **extra) -> hypothesis.settings:
    """Hypothesis settings for the unit tests: the same examples on every
    run (CI must not turn red by chance), no database, no deadline (this
    machine is shared and its timings are noise).
    """
    return hypothesis.settings(
        max_examples=examples, derandomize=True, database=None,
        deadline=None, print_blob=True,
        suppress_health_check=[hypothesis.HealthCheck.too_slow,
                               hypothesis.HealthCheck.data_too_large,
                               hypothesis.HealthCheck.filter_too_much],
        **extra)


class TestCase(testtools.TestCase):
    """Base test case: plugin options on a private ConfigOpts."""

    def setUp(self):
        super().setUp()
        self.conf = plugin_conf.register_opts(cfg.ConfigOpts())
        self.useFixture(config_fixture.Config(self.conf))
        self.conf([], project='nova')
        self.logger = self.useFixture(fixtures.FakeLogger(level='DEBUG'))

    def flags(self, group='numa_overhead', **kwargs):
        for name, value in kwargs.items():
            self.conf.set_override(name, value, group=group)


def make_report(host='host1', nodes=2, free_mb=16384, total_mb=32768,
                guests=1, llc=None, mc=None, inter=None, rml=None,
                distances=None, seq=1, agent_id='agent-1', age=0.0,
                cpus=8, policy=None, max_nodes=4) -> dict:
    """A valid report as it travels on the wire; with ``policy``, planned
    by the agent for that policy and ``max_nodes`` (format 1.1).
    """
    n = nodes

    def per_node(value, default):
        if value is None:
            value = default
        return list(value) if isinstance(value, (list, tuple)) \
            else [value] * n

    topo = estimator.Topology.uniform(n) if distances is None else \
        estimator.Topology(tuple(tuple(r) for r in distances))
    static = estimator.static_levels(topo)
    levels = estimator.Levels(
        llc=per_node(llc, 0), mc=per_node(mc, 0),
        inter=inter if inter is not None else static.inter,
        rml=rml if rml is not None else static.rml)
    return report_mod.build(
        host, agent_id, '0.1.0', seq, levels,
        total_mb=per_node(total_mb, 0), free_mb=per_node(free_mb, 0),
        guests=per_node(guests, 0), cpus=per_node(cpus, 0),
        distances=topo.distances, age=age, policy=policy,
        max_nodes=max_nodes).to_dict()
