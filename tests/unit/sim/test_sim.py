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

import json
import os

import fixtures
import testtools

from nova_numa_overhead.cmd import main as cli_main
from nova_numa_overhead.compute import hypervisor as hv_mod
from nova_numa_overhead.sim import backend
from nova_numa_overhead.sim import model
from nova_numa_overhead.sim import policies
from nova_numa_overhead.sim import presets
from nova_numa_overhead.sim import report
from nova_numa_overhead.sim import runner
from nova_numa_overhead.sim import scenarios

GIB = 1024


def guest(name, cpu_node=0, pages=None, profile='ycsb', **kw):
    return model.Guest(name=name, vcpus=1, memory_mb=4 * GIB,
                       profile=presets.PROFILES[profile],
                       cpu={cpu_node: 1.0},
                       pages=pages or {cpu_node: 4 * GIB}, **kw)


class TestSimBackend(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.host = model.Host(presets.ibm_x3850(4))
        self.hv = backend.SimHypervisor(self.host)

    def test_topology_and_counters(self):
        topo = self.hv.topology()
        self.assertEqual(4, topo.size)
        self.assertEqual(tuple(range(8, 16)), topo.nodes[1].cpus)
        self.hv.start(guest('a'))
        self.hv.advance(1.0)
        self.hv.advance(1.0)
        dom = self.hv.domains()[0]
        c = self.hv.counters([dom])['a']
        self.assertGreater(c.instructions, 0)
        self.assertGreater(c.cycles, c.instructions)
        self.assertLessEqual(c.cache_misses, c.cache_references)
        self.assertEqual([0], self.hv.vcpu_cpus(dom))
        self.assertEqual({0: 4096}, self.hv.memory_per_node(dom))

    def test_moves_change_the_model(self):
        self.hv.start(guest('a'))
        dom = self.hv.domains()[0]
        before = self.host.free_mb()
        result = self.hv.move_pages(dom, [(0, 2, 1024)], None)
        self.assertEqual(1024 * 256, result.moved)
        self.assertEqual({0: 3072, 2: 1024}, self.hv.memory_per_node(dom))
        self.assertEqual(before[2] - 1024, self.host.free_mb()[2])
        self.hv.set_nodeset(dom, [1])
        self.assertEqual({1: 4096}, self.hv.memory_per_node(dom))
        result = self.hv.move_pages(self.hv.domains()[0], [(1, 3, 512)],
                                    None)
        self.assertEqual(0, result.moved)
        self.assertIn('EACCES', result.failed)

    def test_pinned_and_gone(self):
        self.hv.start(guest('p', pinned=True))
        dom = self.hv.domains()[0]
        self.assertTrue(dom.pinned)
        self.assertRaises(hv_mod.HypervisorError, self.hv.set_nodeset, dom,
                          [1])
        self.hv.stop('p')
        self.assertRaises(hv_mod.DomainGone, self.hv.memory_per_node, dom)

    def test_the_real_agent_places_on_the_model(self):
        policy = policies.POLICIES['overhead-aware']()
        policy.attach(self.hv)
        # Remote scenario: vCPUs on node 1, memory first-touched on node 2.
        self.hv.start(guest('a', cpu_node=1, pages={2: 4 * GIB}))
        for now in range(1, 4):
            self.hv.advance(1.0)
            policy.step(float(now))
        self.assertEqual('moved', policy.agent.decisions['a'].action)
        self.assertEqual({1: 4 * GIB}, self.host.guests['a'].pages)
        self.assertGreater(self.hv.moved_mb, 0)


class TestScenarios(testtools.TestCase):

    def test_builtin(self):
        table = scenarios.builtin()
        for name in ('llc-8', 'mc-2', 'remote-6', 'interconnect-4',
                     'mixed-16', 'memory-32g', 'sockets-8',
                     'amd-asymmetric', 'cluster'):
            self.assertEqual(name, table[name]().name)
        self.assertRaises(ValueError, scenarios.get, 'nope')

    def test_file(self):
        path = self.useFixture(fixtures.TempDir()).join('s.toml')
        with open(path, 'w') as f:
            f.write('name = "mine"\nhost = "intel-e5-4610"\nseed = 3\n'
                    'duration = 10\nmeasure = 5\n'
                    '[[guests]]\nname = "db"\ncount = 2\nprofile = "ycsb"\n'
                    'vcpu_node = 1\nfirst_touch = [2]\n'
                    'extra_specs = {"numa_overhead:max_nodes" = "2"}\n')
        s = scenarios.load(path)
        self.assertEqual(['db-1', 'db-2'], [g.name for g in s.guests])
        self.assertEqual((2,), s.guests[0].first_touch)
        self.assertEqual('intel-e5-4610', s.host.name)
        self.assertEqual(3, s.seed)

    def test_explicit_host_and_errors(self):
        tmp = self.useFixture(fixtures.TempDir())
        good = tmp.join('host.toml')
        with open(good, 'w') as f:
            f.write('[host]\nname = "tiny"\nnodes = ['
                    '{cores = 4, llc_mb = 8, memory_gb = 8, mc_gbps = 10},'
                    '{cores = 4, llc_mb = 8, memory_gb = 8, mc_gbps = 10}]\n'
                    'latency_ns = [[100, 150], [160, 100]]\n'
                    'link_gbps = [[0, 8], [6, 0]]\n'
                    'distances = [[10, 20], [20, 10]]\n'
                    '[[guests]]\nprofile = "tunkrank"\n')
        self.assertEqual(2, scenarios.load(good).host.size)
        for text, fragment in (
                ('[[guests]]\nprofile = "doom"\n', "unknown profile 'doom'"),
                ('[[guests]]\nvcpu_node = 9\n', 'node out of range'),
                ('name = \n', 'not valid TOML'),
                ('duration = 0\n[[guests]]\n', 'must be >= 1'),
                ('[host]\nnodes = []\n[[guests]]\n', 'missing or bad')):
            bad = tmp.join('bad.toml')
            with open(bad, 'w') as f:
                f.write(text)
            exc = self.assertRaises(ValueError, scenarios.load, bad)
            self.assertIn(fragment, str(exc))


class TestRunner(testtools.TestCase):

    def test_deterministic_for_a_seed(self):
        s = scenarios.get('remote-4')
        names = ('nova-default', 'overhead-aware')
        a = runner.run(s, names)
        b = runner.run(s, names)
        for name in names:
            self.assertEqual(a[name].throughput, b[name].throughput)

    def test_oracle_is_an_upper_bound_of_memory_placement(self):
        s = scenarios.get('remote-4')
        res = runner.run(s, ('nova-default', 'interleave',
                             'overhead-aware', 'oracle'))
        for name in ('nova-default', 'interleave', 'overhead-aware'):
            self.assertGreaterEqual(res['oracle'].mean + 1e-6,
                                    res[name].mean, name)

    def test_unknown_policy(self):
        self.assertRaises(ValueError, runner.run,
                          scenarios.get('llc-2'), ('magic',))


class TestCommand(testtools.TestCase):

    def run_cli(self, *argv):
        out = self.useFixture(fixtures.StringStream('stdout')).stream
        err = self.useFixture(fixtures.StringStream('stderr')).stream
        self.useFixture(fixtures.MonkeyPatch('sys.stdout', out))
        self.useFixture(fixtures.MonkeyPatch('sys.stderr', err))
        rc = cli_main.main(list(argv))
        out.seek(0)
        err.seek(0)
        return rc, out.read(), err.read()

    def test_table_fits_80_columns_and_json(self):
        png = self.useFixture(fixtures.TempDir()).join('fig.png')
        rc, out, err = self.run_cli(
            'simulate', '--scenario', 'llc-2', '--plot', png)
        self.assertEqual(0, rc, err)
        self.assertIn('throughput per guest, normalised to nova-default',
                      out)
        self.assertIn('of the oracle', out)
        self.assertEqual([], [line for line in out.splitlines()
                              if len(line) > 80])
        self.assertIn('100%', err)
        self.assertGreater(os.path.getsize(png), 1000)
        rc, out, _ = self.run_cli('simulate', '--scenario', 'remote-4',
                                  '--format', 'json', '--quiet',
                                  '--policies', 'nova-default,oracle')
        data = json.loads(out)
        self.assertEqual(1.0, data['policies']['nova-default'][
            'vs_nova_default'])
        self.assertEqual('remote-4', data['scenario'])

    def test_bad_scenario_is_one_line(self):
        rc, out, err = self.run_cli('simulate', '--scenario', 'nope')
        self.assertEqual(2, rc)
        self.assertEqual(1, len(err.strip().splitlines()))
        self.assertIn("unknown scenario 'nope'", err)

    def test_list(self):
        rc, out, _ = self.run_cli('simulate', '--list')
        self.assertEqual(0, rc)
        self.assertIn('mixed-16', out)


class TestReport(testtools.TestCase):

    def test_progress_without_a_terminal(self):
        stream = self.useFixture(fixtures.StringStream('p')).stream
        progress = report.Progress('x', stream=stream)
        progress.start(20)
        for _ in range(20):
            progress.tick()
        progress.done()
        stream.seek(0)
        lines = stream.read().splitlines()
        self.assertEqual(11, len(lines))
        self.assertIn('100%', lines[-1])
