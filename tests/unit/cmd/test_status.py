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
"""``nova-numa-overhead status`` on libvirt's test driver and a fake host.

``test:///default`` has two cells (CPUs 0-7 and 8-15, 2 and 4 GiB) and a
running non-Nova guest called 'test'; its getCellsFreeMemory returns KiB
where the API promises bytes, so free memory reads 2 and 4 MiB.
"""

import argparse
import collections
import dataclasses
import io
import json
import os
import subprocess
import sys
import time

import fixtures
import libvirt
from oslo_config import cfg

from nova_numa_overhead.cmd import status
from nova_numa_overhead.compute import hypervisor as hv_mod
from nova_numa_overhead.compute import kernel as kernel_mod
from tests import base
from tests.unit.compute import fakes
from tests.unit.compute import libvirt_fixtures

URI = 'test:///default'
GIB = 1024


def parse(*argv):
    parser = argparse.ArgumentParser(prog='nova-numa-overhead')
    status.add_parser(parser.add_subparsers(dest='command', required=True))
    return parser.parse_args(['status'] + list(argv))


class StatusTestCase(base.TestCase):

    def setUp(self):
        super().setUp()
        self.stdout = self.useFixture(
            fixtures.MonkeyPatch('sys.stdout', io.StringIO())).new_value
        self.stderr = self.useFixture(
            fixtures.MonkeyPatch('sys.stderr', io.StringIO())).new_value
        # Without --config-file status reads ~/.nova/nova.conf: not the
        # developer's.
        self.home = self.useFixture(fixtures.TempDir()).path
        self.useFixture(fixtures.EnvironmentVariable('HOME', self.home))

    def run_status(self, *argv):
        return status.run(parse(*argv))

    def text_again(self, conf):
        """The table output of another run, whitespace folded."""
        self.stdout.seek(0)
        self.stdout.truncate()
        self.assertEqual(0, self.run_status('--connect', URI, '--sample',
                                            '0', '--config-file', conf))
        return ' '.join(self.stdout.getvalue().split())

    def write_conf(self, text):
        path = os.path.join(self.useFixture(fixtures.TempDir()).path,
                            'nova.conf')
        with open(path, 'w') as f:
            f.write(text)
        return path


class TestOnLibvirt(StatusTestCase):

    def setUp(self):
        super().setUp()
        # Kept open so that the test driver keeps our guests while status
        # opens and closes its own connection.
        self.conn = libvirt.open(URI)
        self.addCleanup(self.conn.close)
        # test:///default is reset only when its last connection closes;
        # a mock of an earlier test that still holds a domain keeps one
        # open, and with it the perf events that test turned on for the
        # driver's own 'test' guest. Off, as on a fresh driver.
        builtin = self.conn.lookupByName('test')
        on = [e for e, enabled in builtin.perfEvents().items() if enabled]
        if on:
            builtin.setPerfEvents(dict.fromkeys(on, False),
                                  libvirt.VIR_DOMAIN_AFFECT_LIVE)
        self.floating = self.define(512)
        self.pinned = self.define(256, pinned=True,
                                  extra_specs={'hw:cpu_policy': 'dedicated'})

    def define(self, memory_mb, extra_specs=None, **kwargs):
        return libvirt_fixtures.start_guest(self, self.conn, memory_mb,
                                            extra_specs=extra_specs,
                                            **kwargs)

    def test_table(self):
        rc = self.run_status('--connect', URI, '--interval', '0')
        self.assertEqual(0, rc, self.stderr.getvalue())
        self.assertEqual('', self.stderr.getvalue())
        out = self.stdout.getvalue()
        lines = out.splitlines()
        too_wide = [line for line in lines if len(line) > 80]
        self.assertEqual([], too_wide)
        header = ('NODE  CPUS  TOTAL MiB   FREE MiB  GUESTS  LLC  VALUE   MC  '
                  'VALUE  LOCAL')
        self.assertIn(header, lines)
        # Node 0: 8 CPUs, 2048 MiB, 2 "MiB" free (the driver's KiB).
        node0 = lines[lines.index(header) + 1].split()
        self.assertEqual(['0', '8', '2048', '2'], node0[:4])
        self.assertIn('%s  512 MiB  2 vCPUs  managed, policy proportional'
                      % self.floating.name(), out)
        self.assertIn('%s  256 MiB  2 vCPUs  not managed: pinned by Nova'
                      % self.pinned.name(), out)
        self.assertIn('test  ', out)
        self.assertIn('    plan  ', out)
        self.assertIn('NEXT REBALANCING MOVES', out)
        self.assertIn('RML, remote-access latency: level and local/remote '
                      'ratio', out)
        self.assertIn('2 2.00*', out)
        self.assertIn('Thresholds ([numa_overhead_agent] *_thresholds', out)
        # The test driver takes perf events but never counts anything.
        self.assertIn('libvirt returned no counter values',
                      ' '.join(out.split()))
        self.assertIn('Counter sources: perf events (cycles, instructions, '
                      'LLC) no; stalled-cycles event no (reads 0); resctrl '
                      'memory bandwidth no; node matrix SLIT distances only '
                      '(no probe); LLC size not listed by libvirt (the cost '
                      'model assumes 0.4 memory-intensive vCPUs per core).',
                      ' '.join(out.split()))

    def test_json(self):
        # Realistic free memory (the test driver's is in KiB), with room
        # for the 6 GiB its "test" domain has yet to touch: the floating
        # guest gets a plan (its vCPUs' node has none left: on the paper's
        # first placement, which may go remote).
        conf = self.write_conf('[numa_overhead_agent]\n'
                               'remote_placement = true\n')
        self.useFixture(fixtures.MockPatch(
            'nova_numa_overhead.compute.libvirt_driver.LibvirtHypervisor.'
            'free_memory_mb', autospec=True, return_value=[4608, 6144]))
        rc = self.run_status('--connect', URI, '--format', 'json',
                             '--sample', '0', '--config-file', conf)
        self.assertEqual(0, rc, self.stderr.getvalue())
        data = json.loads(self.stdout.getvalue())
        self.assertEqual(URI, data['uri'])
        self.assertEqual([2048, 4096],
                         [n['total_mb'] for n in data['nodes']])
        self.assertEqual([4608, 6144],
                         [n['free_mb'] for n in data['nodes']])
        self.assertEqual([8, 8], [n['cpus'] for n in data['nodes']])
        self.assertEqual([[10, 20], [20, 10]], data['distances'])
        self.assertEqual(2, len(data['inter']))
        self.assertEqual(0, data['rml'][0][0])
        self.assertGreater(data['rml'][0][1], 0)
        guests = {g['name']: g for g in data['guests']}
        floating = guests[self.floating.name()]
        self.assertTrue(floating['managed'])
        self.assertEqual('proportional', floating['policy'])
        self.assertEqual(512, sum(floating['memory_mb_per_node']))
        self.assertEqual(512, sum(floating['plan_mb_per_node']))
        self.assertIsNotNone(floating['planned_overhead'])
        pinned = guests[self.pinned.name()]
        self.assertFalse(pinned['managed'])
        self.assertIn('pinned', pinned['reason'])
        self.assertIsNone(pinned['plan_mb_per_node'])
        self.assertFalse(guests['test']['managed'])
        self.assertEqual([], data['rebalance_moves'])
        self.assertEqual('1.1', data['report']['version'])
        # No counter source on the test driver but the node distances.
        self.assertEqual(
            {'perf': {'available': False, 'guests': 0, 'llc_guests': 0},
             'stalled_cycles': {'available': False, 'guests': 0},
             'resctrl': {'available': False, 'guests': 0,
                         'measured_guests': 0, 'error': None},
             'matrix': {'source': 'slit', 'latency': False,
                        'bandwidth': False, 'topology_file': None,
                        'ignored': None},
             'llc_mb': [None, None], 'node_cpus': [8, 8]},
            data['sources'])
        self.assertFalse(floating['bandwidth_monitor'])
        self.assertIsNone(floating['bandwidth_bps'])
        self.assertEqual(2, len(data['report']['nodes']))
        self.assertEqual('proportional', data['report']['planned']['policy'])

    def test_novas_placement_the_agents_restriction_and_last_action(self):
        # The running agent placed the floating guest and kept its record
        # in the guest's metadata; status shows it.
        from nova_numa_overhead.compute import agent as agent_mod
        from nova_numa_overhead.compute import libvirt_driver
        from tests.unit.compute import test_agent
        self.flags(group='numa_overhead_agent', enforcement='nodeset',
                   reserve_mb=64, remote_placement=True)
        hv = libvirt_driver.LibvirtHypervisor(URI)
        self.addCleanup(hv.close)
        # Room for the 6 GiB the test driver's "test" domain has yet to
        # touch (8 GiB configured, 2 GiB on the nodes).
        self.useFixture(fixtures.MockPatchObject(
            hv, 'free_memory_mb', autospec=True, return_value=[4608, 6144]))
        agent = agent_mod.Agent(self.conf, hv, test_agent.FakePublisher(),
                                'cmp-status')
        agent.cycle()
        decision = agent.decisions[self.floating.name()]
        self.assertEqual('restricted', decision.action, decision.reason)
        restricted = sorted(decision.plan)
        conf = self.write_conf('[DEFAULT]\nhost = cmp-status\n')
        rc = self.run_status('--connect', URI, '--format', 'json',
                             '--sample', '0', '--config-file', conf)
        self.assertEqual(0, rc, self.stderr.getvalue())
        guests = {g['name']: g for g in json.loads(
            self.stdout.getvalue())['guests']}
        floating = guests[self.floating.name()]
        self.assertFalse(floating['recorded_elsewhere'])
        self.assertEqual(([], []), (floating['nova_nodes'],
                                    floating['nova_cpus']))
        self.assertEqual(restricted, floating['agent_nodes'])
        self.assertEqual(restricted, floating['allowed_nodes'])
        self.assertEqual('restricted', floating['last_action'])
        self.assertTrue(floating['last_outcome'].startswith('ok: policy'))
        self.assertEqual('cmp-status', floating['recorded_on'])
        pinned = guests[self.pinned.name()]
        self.assertIsNone(pinned['last_action'])
        out = self.text_again(conf)
        self.assertIn('nova allows nodes all, CPUs all; agent restricts to '
                      'nodes %s last' % ','.join(
                          str(n) for n in restricted), out)
        self.assertIn('agent restricts to nothing', out)
        self.assertIn('last restricted at ', out)
        self.assertIn('last no action recorded by the agent', out)
        self.assertIn('Optimizer: advises only (enforcement advisory). It '
                      'has moved none of the guests here now.', out)

    def test_optimizer_moves_and_verdicts(self):
        # The running agent's optimizer moved the floating guest three
        # times; its closed loop kept one move and undid one.
        from nova_numa_overhead.compute import agent as agent_mod
        from nova_numa_overhead.compute import libvirt_driver
        from tests.unit.compute import test_agent
        self.flags(group='numa_overhead_agent', enforcement='nodeset')
        hv = libvirt_driver.LibvirtHypervisor(URI)
        self.addCleanup(hv.close)
        agent = agent_mod.Agent(self.conf, hv, test_agent.FakePublisher(),
                                'cmp-status')
        agent.cycle()
        name = self.floating.name()
        agent.optimizer.per_guest[name] = collections.Counter(
            moved=3, kept=1, undone=1)
        # Backing off from it for 10 more minutes.
        agent.optimizer.backoff[name] = (1, agent.clock() + 600.0)
        agent.write_record(agent.domains[name])
        until = agent.optimizer.backoff_record(name)[1]
        # What the running agent saved of the model's fit here.
        from nova_numa_overhead.compute import model_state
        agent.optimizer.trust = agent.optimizer.learned_trust = 0.62
        agent.optimizer.predictions['guest'].extend(
            [(1.10, 1.02), (1.05, 1.06)])
        state = os.path.join(self.useFixture(fixtures.TempDir()).path,
                             'model.json')
        learned_for = model_state.learned_for(self.conf, 'cmp-status',
                                              agent.topology,
                                              agent.estimator_topology)
        keeper = model_state.Keeper(state, agent.optimizer, learned_for)
        self.assertTrue(keeper.save())
        conf = self.write_conf('[DEFAULT]\nhost = cmp-status\n'
                               '[numa_overhead_agent]\n'
                               'enforcement = pages\n'
                               'state_file = %s\n' % state)
        rc = self.run_status('--connect', URI, '--format', 'json',
                             '--sample', '0', '--config-file', conf)
        self.assertEqual(0, rc, self.stderr.getvalue())
        data = json.loads(self.stdout.getvalue())
        model = data['optimizer'].pop('model')
        self.assertEqual(state, model['file'])
        self.assertEqual(0.62, model['trust'])
        # Taught just now: nothing recovered yet.
        self.assertEqual(0.62, model['trust_now'])
        self.assertIsNone(model['error'])
        self.assertEqual(2, model['calibration']['guest']['judged'])
        self.assertEqual({'judged': 0}, model['calibration']['neighbours'])
        guests = {g['name']: g for g in data['guests']}
        self.assertEqual({'moved': 3, 'kept': 1, 'undone': 1,
                          'left_alone_until': until},
                         guests[name]['optimizer'])
        self.assertEqual({'moved': 0, 'kept': 0, 'undone': 0,
                          'left_alone_until': None},
                         guests[self.pinned.name()]['optimizer'])
        self.assertEqual({'mode': 'moves', 'moved': 3, 'kept': 1,
                          'undone': 1, 'guests': 1}, data['optimizer'])
        out = self.text_again(conf)
        self.assertIn('Optimizer: moves guests. It moved 1 guest here now 3 '
                      'times: 1 kept and 1 undone after its closed loop, the '
                      'rest not judged.', out)
        self.assertIn('optimizer moves 3 (kept 1, undone 1); optimizer '
                      'leaves it alone until %s' % until, out)
        self.assertIn('The agent last saved at %s its trust in the cost '
                      'model, 0.62 (1: its predicted gains came true); at '
                      'its recent verdicts, moved guests 2, measured speed '
                      'relative to predicted: median' % model['saved_at'],
                      ' '.join(out.split()))
        # Saved for another host name: what the agent would not restore.
        conf = self.write_conf('[DEFAULT]\nhost = cmp-other\n'
                               '[numa_overhead_agent]\n'
                               'state_file = %s\n' % state)
        self.assertIn('Its saved cost model state cannot be used: %s: '
                      'learned for another host name; an agent started '
                      'now would start afresh.' % state,
                      self.text_again(conf))
        # Seven hours without a verdict: half the way back to 1 by now.
        with open(state) as f:
            data = json.load(f)
        data['learned_at'] = model_state.utc(time.time() - 7 * 3600)
        with open(state, 'w') as f:
            json.dump(data, f)
        conf = self.write_conf('[DEFAULT]\nhost = cmp-status\n'
                               '[numa_overhead_agent]\n'
                               'state_file = %s\n' % state)
        self.assertIn('its trust in the cost model, 0.62 (1: its predicted '
                      'gains came true; 0.81 by now, no verdict having '
                      'taught it for over an hour)',
                      ' '.join(self.text_again(conf).split()))
        # Learned with a probe's matrix this status cannot read (another
        # user than the agent's): it says it cannot tell.
        topology = os.path.join(os.path.dirname(state), 'topology.json')
        data['learned_for'] = dict(data['learned_for'],
                                   topology_file=topology,
                                   matrix='0123456789abcdef')
        with open(state, 'w') as f:
            json.dump(data, f)
        conf = self.write_conf('[DEFAULT]\nhost = cmp-status\n'
                               '[numa_overhead_agent]\n'
                               'state_file = %s\ntopology_file = %s\n'
                               % (state, topology))
        self.assertIn('Its saved cost model state cannot be used: %s: '
                      'learned with the matrix of topology_file %s, which '
                      'this status could not read: run it as the agent\'s '
                      'user to compare.' % (state, topology),
                      ' '.join(self.text_again(conf).split()))

    def test_saved_model_state_missing_or_unusable(self):
        tmp = self.useFixture(fixtures.TempDir()).path
        state = os.path.join(tmp, 'model.json')
        for content, words in (
                (None, 'No cost model state saved in %s yet (no verdict '
                       'has changed it).' % state),
                ('{"version": 1, "trust": 7}',
                 'Its saved cost model state cannot be used: %s: trust 7 '
                 'is not a number from 0.1 to 1.' % state),
                ('{"version": 1, "trust": %s}' % ('9' * 400),
                 'Its saved cost model state cannot be used: %s: trust '
                 '999' % state)):
            if content is not None:
                with open(state, 'w') as f:
                    f.write(content)
            conf = self.write_conf('[numa_overhead_agent]\n'
                                   'state_file = %s\n' % state)
            out = self.text_again(conf)
            self.assertIn(words, ' '.join(out.split()))

    def test_config_file_and_nothing_changes(self):
        before = self.floating.numaParameters()
        path = self.write_conf(
            '[DEFAULT]\nhost = cmp-7\n'
            '[numa_overhead_agent]\nenforcement = pages\n'
            'connection_uri = %s\nrml_thresholds = 100\n' % URI)
        rc = self.run_status('--config-file', path, '--format', 'json',
                             '--interval', '0')
        self.assertEqual(0, rc, self.stderr.getvalue())
        data = json.loads(self.stdout.getvalue())
        self.assertEqual('cmp-7', data['host'])
        self.assertEqual(URI, data['uri'])
        self.assertEqual('pages', data['agent']['enforcement'])
        # SLIT ratio 2.0 is below the configured threshold.
        self.assertEqual([[0, 0], [0, 0]], data['rml'])
        self.assertEqual(before, self.floating.numaParameters())
        perf = self.floating.perfEvents()
        self.assertFalse(any(perf.values()), perf)

    def test_without_config_file_nova_conf_is_read(self):
        # As the agent: oslo.config's search for nova.conf.
        os.mkdir(os.path.join(self.home, '.nova'))
        with open(os.path.join(self.home, '.nova', 'nova.conf'), 'w') as f:
            f.write('[DEFAULT]\nhost = cmp-9\n'
                    '[numa_overhead_agent]\nenforcement = pages\n'
                    'rml_thresholds = 100\n')
        rc = self.run_status('--connect', URI, '--format', 'json',
                             '--sample', '0')
        self.assertEqual(0, rc, self.stderr.getvalue())
        data = json.loads(self.stdout.getvalue())
        self.assertEqual('cmp-9', data['host'])
        self.assertEqual('pages', data['agent']['enforcement'])
        self.assertEqual([100.0], data['thresholds']['rml'])

    def test_an_unreadable_nova_conf_leaves_the_defaults(self):
        # nova.conf is often 0640 root:nova: status as another user.
        os.mkdir(os.path.join(self.home, '.nova'))
        path = os.path.join(self.home, '.nova', 'nova.conf')
        with open(path, 'w') as f:
            f.write('[DEFAULT]\nhost = cmp-9\n')
        real = cfg.ConfigOpts.__call__

        def call(conf, *args, **kwargs):
            if kwargs.get('default_config_files'):
                raise cfg.ConfigFilesPermissionDeniedError([path])
            return real(conf, *args, **kwargs)
        self.useFixture(fixtures.MockPatchObject(cfg.ConfigOpts, '__call__',
                                                 call))
        rc = self.run_status('--connect', URI, '--format', 'json',
                             '--sample', '0')
        self.assertEqual(0, rc, self.stderr.getvalue())
        self.assertIn('built-in defaults used', self.stderr.getvalue())
        self.assertNotEqual('cmp-9', json.loads(self.stdout.getvalue())[
            'host'])

    def test_default_first_placement_is_local(self):
        # As test_json, without remote_placement: the floating guest's
        # vCPUs' node has no room left, so no plan, and status says why.
        self.useFixture(fixtures.MockPatch(
            'nova_numa_overhead.compute.libvirt_driver.LibvirtHypervisor.'
            'free_memory_mb', autospec=True, return_value=[4608, 6144]))
        rc = self.run_status('--connect', URI, '--format', 'json',
                             '--sample', '0')
        self.assertEqual(0, rc, self.stderr.getvalue())
        guests = {g['name']: g for g in
                  json.loads(self.stdout.getvalue())['guests']}
        floating = guests[self.floating.name()]
        self.assertTrue(floating['managed'])
        self.assertIsNone(floating['plan_mb_per_node'])
        self.assertIn('nodes its vCPUs run on', floating['reason'])

    def test_perf_events_the_agent_enabled_stay_on(self):
        events = {'cpu_cycles': True, 'instructions': True}
        self.floating.setPerfEvents(events, libvirt.VIR_DOMAIN_AFFECT_LIVE)
        rc = self.run_status('--connect', URI, '--format', 'json',
                             '--sample', '0')
        self.assertEqual(0, rc, self.stderr.getvalue())
        guests = {g['name']: g for g in
                  json.loads(self.stdout.getvalue())['guests']}
        self.assertEqual('already on',
                         guests[self.floating.name()]['perf_events'])
        self.assertEqual('enabled while sampling',
                         guests['test']['perf_events'])
        perf = self.floating.perfEvents()
        self.assertTrue(perf['cpu_cycles'] and perf['instructions'], perf)
        test_perf = self.conn.lookupByName('test').perfEvents()
        self.assertFalse(any(test_perf.values()), test_perf)


class TestErrors(StatusTestCase):

    def test_unreachable_libvirt_is_one_line(self):
        result = subprocess.run(
            [sys.executable, '-m', 'nova_numa_overhead.cmd.status',
             '--connect', 'qemu+tcp://127.0.0.1:1/system', '--interval',
             '0'], capture_output=True, text=True, timeout=60)
        self.assertEqual(1, result.returncode)
        self.assertEqual('', result.stdout)
        lines = result.stderr.splitlines()
        self.assertEqual(1, len(lines), result.stderr)
        self.assertTrue(lines[0].startswith(
            'nova-numa-overhead status: cannot connect to '
            'qemu+tcp://127.0.0.1:1/system'), lines[0])

    def test_bad_config_is_one_line(self):
        for text, fragment in (
                ('[numa_overhead_agent]\nenforcement = bogus\n',
                 '[numa_overhead_agent] enforcement'),
                ('not an ini file\n', 'Failed to parse'),
                ('[numa_overhead_agent]\nllc_thresholds = 0.5,0.1\n',
                 'llc thresholds must be strictly ascending')):
            self.stderr.seek(0)
            self.stderr.truncate()
            rc = self.run_status('--config-file', self.write_conf(text),
                                 '--connect', URI)
            self.assertEqual(2, rc)
            err = self.stderr.getvalue()
            self.assertEqual(1, len(err.splitlines()), err)
            self.assertIn('configuration error', err)
            self.assertIn(fragment, err)
        self.assertEqual('', self.stdout.getvalue())

    def test_missing_config_file(self):
        rc = self.run_status('--config-file', '/nonexistent/nova.conf')
        self.assertEqual(2, rc)
        self.assertIn('/nonexistent/nova.conf', self.stderr.getvalue())

    def test_permission_denied_gets_a_hint(self):
        hv = fakes.FakeHypervisor(nodes=2)
        hv.topology = lambda: (_ for _ in ()).throw(
            hv_mod.HypervisorUnavailable(
                "cannot connect to qemu:///system: Failed to connect socket "
                "to '/var/run/libvirt/libvirt-sock': Permission denied"))
        self.useFixture(fixtures.MonkeyPatch(
            'nova_numa_overhead.compute.libvirt_driver.LibvirtHypervisor',
            lambda uri: hv))
        self.assertEqual(1, self.run_status())
        err = self.stderr.getvalue()
        self.assertEqual(1, len(err.splitlines()), err)
        self.assertIn('Permission denied (run it as root or as a member of '
                      'the libvirt group)', err)

    def test_unexpected_error_is_one_line(self):
        self.useFixture(fixtures.MonkeyPatch(
            'nova_numa_overhead.cmd.status.collect',
            lambda *a, **k: {}['boom']))
        self.assertEqual(1, self.run_status('--connect', URI))
        self.assertEqual("nova-numa-overhead status: unexpected error: "
                         "KeyError: 'boom'\n", self.stderr.getvalue())


class TestOnAFakeHost(StatusTestCase):
    """A busy 4-node host: levels from counters and a rebalancing move."""

    def setUp(self):
        super().setUp()
        self.hv = fakes.FakeHypervisor(nodes=4)
        self.add_guests()
        self.now = 100.0
        self.flags(group='numa_overhead_agent', rebalance_threshold=3,
                   enforcement='pages')

    def add_guests(self):
        self.hv.add('hot', {0: 8 * GIB}, vcpu_node=0,
                    extra_specs={'numa_overhead:policy': 'local'})
        self.hv.add('cool', {2: GIB}, vcpu_node=2)

    def sleep(self, seconds):
        # Memory bound: cycle loss 0.9 (MC level 4), LLC hit rate 0.2.
        self.hv.run('hot', 300000, 1000000, 100000, 80000, 900000)
        self.now += 1

    def collect(self, samples=4):
        return status.collect(self.conf, 'fake://', samples=samples,
                              interval=1.0, hypervisor=self.hv,
                              sleep=self.sleep, clock=lambda: self.now)

    def test_levels_moves_and_nothing_changed(self):
        data = self.collect()
        self.assertEqual(4, data['nodes'][0]['mc'])
        self.assertGreater(data['nodes'][0]['llc'], 0)
        self.assertTrue(data['rebalance_moves'])
        self.assertTrue(all(m['guest'] == 'hot' and m['from'] == 0
                            for m in data['rebalance_moves']))
        hot = {g['name']: g for g in data['guests']}['hot']
        self.assertTrue(hot['counters'])
        self.assertEqual('local', hot['policy'])
        self.assertEqual('pages', data['agent']['enforcement'])
        self.assertEqual([], data['notes'])
        # Nothing was changed on the host.
        self.assertEqual([], self.hv.moves)
        self.assertEqual({}, self.hv.nodesets)
        self.assertEqual({}, self.hv.pins)
        self.assertEqual(set(), self.hv.enabled)   # enabled, then off
        self.assertEqual({'hot': {0: 8 * GIB}, 'cool': {2: GIB}},
                         self.hv.memory)
        text = status.render(data)
        self.assertIn('  hot: ', text)
        self.assertEqual([], [line for line in text.splitlines()
                              if len(line) > 80])

    def test_raw_values_next_to_levels_and_thresholds(self):
        data = self.collect()
        node0 = data['nodes'][0]
        # Cycle loss 0.9 is at or above all four MC thresholds; hit rate
        # 0.2 is LLC contention 0.8.
        self.assertAlmostEqual(0.9, node0['mc_cycle_loss'], places=3)
        self.assertAlmostEqual(0.8, node0['llc_contention'], places=3)
        self.assertEqual(3, node0['llc'])
        self.assertIsNone(data['nodes'][1]['mc_cycle_loss'])
        self.assertEqual([0.55, 0.65, 0.75, 0.85], data['thresholds']['llc'])
        self.assertEqual(['static'] * 3, [
            src for j, src in enumerate(data['rml_source'][0]) if j])
        self.assertAlmostEqual(2.1, data['rml_ratio'][0][1])
        hot = {g['name']: g for g in data['guests']}['hot']
        self.assertAlmostEqual(0.9, hot['cycle_loss'], places=3)
        self.assertAlmostEqual(0.3, hot['ipc'], places=3)
        # 300,000 instructions per simulated second.
        self.assertEqual(300000, hot['instructions_per_s'])
        text = status.render(data)
        self.assertIn('   0     8      65536      57344       1    3   0.80'
                      '    4   0.90      7', text)
        self.assertIn('cool  1024 MiB', text)
        self.assertIn('no cycles counted (idle?), 0 instructions/s', text)
        self.assertIn('LLC hit rate 0.20, cycle loss 0.90, IPC 0.30, 3e+05 '
                      'instructions/s', text)
        self.assertIn('LLC 0.55 0.65 0.75 0.85; MC 0.7 0.75 0.8 0.85', text)

    def test_perf_events_on_for_the_sampling_only(self):
        self.hv.enabled.add('cool')     # as the agent would have left it
        calls = []
        real = self.hv.enable_counters
        self.hv.enable_counters = lambda d: calls.append(d.name) or real(d)
        data = self.collect()
        self.assertEqual(['hot'], calls)
        guests = {g['name']: g for g in data['guests']}
        self.assertEqual('enabled while sampling',
                         guests['hot']['perf_events'])
        self.assertEqual('already on', guests['cool']['perf_events'])
        # Turned off again; the agent's own stay on.
        self.assertEqual({'cool'}, self.hv.enabled)

    def test_perf_events_left_alone_when_asked(self):
        data = status.collect(self.conf, 'fake://', samples=2, interval=0,
                              hypervisor=self.hv, sleep=self.sleep,
                              clock=lambda: self.now, perf_events=False)
        self.assertEqual(set(), self.hv.enabled)
        self.assertIn('--no-perf-events', data['guests'][0]['perf_events'])

    def test_perf_events_refused_says_why(self):
        self.hv.enable_counters = lambda d: False
        self.hv.counters_error = 'perf_event_paranoid is 4'
        self.hv.counter.clear()
        self.hv.run = lambda *a: None
        data = self.collect()
        notes = ' '.join(data['notes'])
        self.assertIn('Perf events could not be enabled on cool, hot '
                      '(perf_event_paranoid is 4)', notes)
        self.assertIn('No guest has hardware counters', notes)

    def test_no_stall_event_is_said(self):
        def sleep(seconds):
            self.hv.run('hot', 300000, 1000000, 100000, 80000, 0)
            self.now += 1
        data = status.collect(self.conf, 'fake://', samples=3, interval=1,
                              hypervisor=self.hv, sleep=sleep,
                              clock=lambda: self.now)
        self.assertIn('no stalled-cycles-backend count',
                      ' '.join(data['notes']))

    def test_kernel_numa_balancing_and_numad(self):
        # Unknown on a host that cannot tell (a remote or test URI).
        data = self.collect(samples=2)
        self.assertIsNone(data['kernel'])
        self.assertIn('Kernel: NUMA balancing and numad unknown',
                      status.render(data))
        # numad runs: with enforcement = pages the agent would step back;
        # status itself changes nothing either way.
        self.hv.kernel = kernel_mod.KernelState(numa_balancing=1,
                                                numad=(812,))
        data = self.collect(samples=2)
        self.assertEqual({'numa_balancing': 1, 'numad': [812],
                          'steps_back': True,
                          'text': 'Kernel: automatic NUMA balancing on '
                                  '(kernel.numa_balancing = 1); numad runs '
                                  '(pid 812).'}, data['kernel'])
        text = ' '.join(status.render(data).split())
        self.assertIn('numad runs (pid 812). With enforcement = pages the '
                      'agent steps back here', text)
        self.flags(group='numa_overhead_agent', enforcement='advisory')
        data = self.collect(samples=2)
        self.assertFalse(data['kernel']['steps_back'])
        self.assertNotIn('steps back', status.render(data))

    def test_sources_of_a_host_with_perf_events(self):
        data = self.collect()
        self.assertEqual(
            {'perf': {'available': True, 'guests': 2, 'llc_guests': 1},
             'stalled_cycles': {'available': True, 'guests': 1},
             'resctrl': {'available': False, 'guests': 0,
                         'measured_guests': 0, 'error': None},
             'matrix': {'source': 'slit', 'latency': False,
                        'bandwidth': False, 'topology_file': None,
                        'ignored': None},
             'llc_mb': [None] * 4, 'node_cpus': [8] * 4},
            data['sources'])
        text = ' '.join(status.render(data).split())
        self.assertIn('Counter sources: perf events (cycles, instructions, '
                      'LLC) yes, 2 guests (LLC events on 1); stalled-cycles '
                      'event yes, 1 guest; resctrl memory bandwidth no; node '
                      'matrix SLIT distances only (no probe); LLC size not '
                      'listed by libvirt (the cost model assumes 0.4 '
                      'memory-intensive vCPUs per core).', text)
        self.assertNotIn(' mbm ', text)

    def test_llc_size_from_the_capabilities(self):
        self.hv = fakes.FakeHypervisor(llc_mb=30.0)
        self.add_guests()
        data = self.collect()
        self.assertEqual([30.0] * 4, data['sources']['llc_mb'])
        self.assertIn('LLC size 30 MiB per node.',
                      ' '.join(status.render(data).split()))
        # Known on some nodes; a node without CPUs has no LLC to count.
        data['sources']['llc_mb'] = [30.0, None, 24.0, None]
        data['sources']['node_cpus'] = [8, 8, 8, 0]
        self.assertIn('LLC size 24/30 MiB on 2 of 3 nodes with CPUs.',
                      ' '.join(status.render(data).split()))

    def monitor(self, per_second):
        """Give 'hot' a resctrl monitor counting ``per_second`` bytes
        ((local, total) per node) every simulated second.
        """
        counts = {node: (0, 0) for node in range(4)}
        reads = []

        def memory_bandwidth(domains):
            reads.append([d.name for d in domains])
            return {d.name: dict(counts) for d in domains if d.name == 'hot'}

        def sleep(seconds):
            self.sleep(seconds)
            for node, (local, total) in per_second.items():
                old = counts[node]
                counts[node] = (old[0] + local, old[1] + total)
        self.hv.memory_bandwidth = memory_bandwidth
        return sleep, reads

    def test_resctrl_memory_bandwidth(self):
        sleep, reads = self.monitor({0: (3 * 10 ** 9, 4 * 10 ** 9),
                                     1: (0, 10 ** 9)})
        data = status.collect(self.conf, 'fake://', samples=4, interval=1.0,
                              hypervisor=self.hv, sleep=sleep,
                              clock=lambda: self.now)
        # Read once per sample, the agent's or status's own.
        self.assertEqual(4, len(reads))
        self.assertEqual({'available': True, 'guests': 1,
                          'measured_guests': 1, 'error': None},
                         data['sources']['resctrl'])
        guests = {g['name']: g for g in data['guests']}
        self.assertTrue(guests['hot']['bandwidth_monitor'])
        self.assertEqual([[3 * 10 ** 9, 4 * 10 ** 9], [0, 10 ** 9], [0, 0],
                          [0, 0]], guests['hot']['bandwidth_bps'])
        self.assertFalse(guests['cool']['bandwidth_monitor'])
        self.assertIsNone(guests['cool']['bandwidth_bps'])
        text = status.render(data)
        self.assertIn('    mbm   0:3000/4000  1:0/1000  MB/s local/total',
                      text)
        self.assertIn('resctrl memory bandwidth yes, 1 guest;',
                      ' '.join(text.split()))

    def test_resctrl_error_is_no_source(self):
        def memory_bandwidth(domains):
            raise hv_mod.HypervisorError('memory bandwidth stats: '
                                         'unsupported')
        self.hv.memory_bandwidth = memory_bandwidth
        data = self.collect()
        self.assertEqual({'available': False, 'guests': 0,
                          'measured_guests': 0,
                          'error': 'memory bandwidth stats: unsupported'},
                         data['sources']['resctrl'])
        # Everything else as on any host.
        self.assertEqual(4, data['nodes'][0]['mc'])
        self.assertIn('resctrl memory bandwidth no (memory bandwidth stats: '
                      'unsupported)', ' '.join(status.render(data).split()))

    @staticmethod
    def save_matrix(path, nodes):
        """A probe's measured matrix of ``nodes`` nodes, saved at ``path``."""
        from nova_numa_overhead.compute import probe
        probe.save(probe.Matrix(
            latency_ns=[[100.0 if i == j else 210.0 for j in range(nodes)]
                        for i in range(nodes)],
            bandwidth_mbps=[[1e4 if i == j else 4e3 for j in range(nodes)]
                            for i in range(nodes)],
            nodes=list(range(nodes)), measured_at='2026-11-22', size_mb=256,
            bandwidth_streams=[8] * nodes), path)

    def test_probe_matrix(self):
        path = self.useFixture(fixtures.TempDir()).join('topology.json')
        self.save_matrix(path, 4)
        self.flags(group='numa_overhead_agent', topology_file=path)
        data = self.collect()
        self.assertEqual({'source': 'probe', 'latency': True,
                          'bandwidth': True, 'topology_file': path,
                          'ignored': None},
                         data['sources']['matrix'])
        self.assertIn('node matrix latency and bandwidth measured by the '
                      'probe (%s);' % path,
                      ' '.join(status.render(data).split()))

    def test_unusable_topology_file_is_said_ignored(self):
        tmp = self.useFixture(fixtures.TempDir()).path
        bad = os.path.join(tmp, 'bad.json')
        with open(bad, 'w') as f:
            f.write('{"garbage": 1}')
        missing = os.path.join(tmp, 'missing.json')
        # Measured on another host, of 2 nodes.
        other = os.path.join(tmp, 'other.json')
        self.save_matrix(other, 2)
        for path, reason in (
                (missing, 'it does not exist'),
                (bad, 'unsupported version None (expected 1 or 2)'),
                (other, 'measured on nodes [0, 1] but the host has nodes '
                        '[0, 1, 2, 3]: run the probe again')):
            self.flags(group='numa_overhead_agent', topology_file=path)
            data = self.collect()
            self.assertEqual({'source': 'slit', 'latency': False,
                              'bandwidth': False, 'topology_file': path,
                              'ignored': reason},
                             data['sources']['matrix'])
            self.assertIn('node matrix SLIT distances only (topology_file '
                          '%s ignored: %s);' % (path, reason),
                          ' '.join(status.render(data).split()))

    def test_matrix_from_the_hypervisor(self):
        self.hv._topology = dataclasses.replace(
            self.hv._topology, latency_ns=tuple(
                tuple(100.0 if i == j else 200.0 for j in range(4))
                for i in range(4)))
        data = self.collect()
        self.assertEqual({'source': 'hypervisor', 'latency': True,
                          'bandwidth': False, 'topology_file': None,
                          'ignored': None},
                         data['sources']['matrix'])
        self.assertIn('node matrix latency from the hypervisor',
                      ' '.join(status.render(data).split()))

    def test_sample_seconds(self):
        self.assertEqual(2, status.sample_count(1, 1))
        self.assertEqual(11, status.sample_count(10, 1))
        self.assertEqual(5, status.sample_count(2, 0.5))
        self.assertEqual(2, status.sample_count(0, 1))
        self.assertEqual(2, status.sample_count(5, 0))

    def test_the_window_holds_every_sample(self):
        self.flags(group='numa_overhead_agent', window_size=2)
        reads = [0.9, 0.9, 0.9, 0.1, 0.1, 0.1]

        def sleep(seconds):
            stalls = int(reads.pop(0) * 1000000)
            self.hv.run('hot', 300000, 1000000, 100000, 80000, stalls)
            self.now += 1
        data = status.collect(self.conf, 'fake://', samples=7, interval=1,
                              hypervisor=self.hv, sleep=sleep,
                              clock=lambda: self.now)
        # The mean of all six intervals, not of the last two.
        self.assertAlmostEqual(0.5, data['nodes'][0]['mc_cycle_loss'],
                               places=3)

    def test_big_host_fits_80_columns(self):
        self.hv = fakes.FakeHypervisor(nodes=32, memory_mb=1024 * GIB)
        self.hv.add('instance-%s' % ('x' * 90), {n: GIB for n in range(32)})
        text = status.render(self.collect(samples=1))
        self.assertEqual([], [line for line in text.splitlines()
                              if len(line) > 80])
        self.assertIn('  31 ', text)

    def test_lost_connection(self):
        def sleep(seconds):
            self.hv.down = True
        self.assertRaises(hv_mod.HypervisorUnavailable, status.collect,
                          self.conf, 'fake://', samples=2, hypervisor=self.hv,
                          sleep=sleep)


class TestReadOnlyHypervisor(base.TestCase):

    def test_changes_are_refused(self):
        hv = fakes.FakeHypervisor(nodes=2)
        hv.add('a', {0: GIB})
        domain = hv.domains()[0]
        ro = status.ReadOnlyHypervisor(hv)
        self.assertFalse(ro.enable_counters(domain))
        for call in (lambda: ro.set_nodeset(domain, [1]),
                     lambda: ro.move_pages(domain, [(0, 1, 64)], 100),
                     lambda: ro.pin_vcpus(domain, [0])):
            self.assertRaises(hv_mod.HypervisorError, call)
        self.assertEqual(({}, [], {}, set()),
                         (hv.nodesets, hv.moves, hv.pins, hv.enabled))
        self.assertEqual({0: GIB}, ro.memory_per_node(domain))

    def test_memory_bandwidth_reads_through(self):
        hv = fakes.FakeHypervisor(nodes=2)
        hv.add('a', {0: GIB})
        hv.add('b', {1: GIB})
        ro = status.ReadOnlyHypervisor(hv)
        # The base class: no source.
        self.assertEqual({}, ro.memory_bandwidth(hv.domains()))
        hv.memory_bandwidth = lambda domains: {'a': {0: (1, 2)}}
        self.assertEqual({'a': {0: (1, 2)}},
                         ro.memory_bandwidth(hv.domains()))
        self.assertEqual(({'a'}, None), (ro.monitored, ro.bandwidth_error))
        hv.memory_bandwidth = lambda domains: {}['boom']
        self.assertRaises(KeyError, ro.memory_bandwidth, hv.domains())
        self.assertEqual((set(), "'boom'"), (ro.monitored,
                                             ro.bandwidth_error))
