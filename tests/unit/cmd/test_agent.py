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

import io
import json
import os
import tempfile
import threading
import time
from unittest import mock

import fixtures
from oslo_config import cfg

from nova_numa_overhead.cmd import agent as agent_cmd
from tests import base
from tests.unit.compute import fakes
from tests.unit.compute import test_agent


def conf_with(text):
    conf = cfg.ConfigOpts()
    agent_cmd._register(conf)
    # Nothing outside the test's own files (a test that wants the state
    # file sets one).
    conf.set_default('state_file', '', group='numa_overhead_agent')
    f = tempfile.NamedTemporaryFile('w', suffix='.conf', delete=False)
    f.write(text)
    f.close()
    conf(['--config-file', f.name])
    return conf


class TestValidate(base.TestCase):

    def test_good_config(self):
        conf = conf_with('[numa_overhead_agent]\nenforcement = pages\n')
        agent_cmd.validate(conf)
        self.assertEqual('pages', conf.numa_overhead_agent.enforcement)

    def test_bad_values_name_the_option(self):
        for text, fragment in (
                ('[numa_overhead_agent]\nenforcement = bogus\n',
                 '[numa_overhead_agent] enforcement'),
                ('[numa_overhead_agent]\nmanaged_guests = all\n',
                 '[numa_overhead_agent] managed_guests'),
                ('[numa_overhead_agent]\nsample_interval = 0\n',
                 '[numa_overhead_agent] sample_interval'),
                ('[numa_overhead_agent]\nfifo_entries = x\n',
                 '[numa_overhead_agent] fifo_entries'),
                ('[numa_overhead_agent]\nmc_thresholds = 0.3,0.2\n',
                 'mc thresholds must be strictly ascending'),
                ('[numa_overhead_agent]\nllc_low_bound = 30\n',
                 'llc_low_bound (30.0) must be below llc_high_bound'),
                ('[numa_overhead_agent]\nheartbeat_interval = 100\n',
                 'heartbeat_interval (100) must be at most half')):
            conf = conf_with(text)
            exc = self.assertRaises(ValueError, agent_cmd.validate, conf)
            self.assertIn(fragment, str(exc))

    def test_main_stops_with_a_message(self):
        with tempfile.NamedTemporaryFile('w', suffix='.conf') as f:
            f.write('[numa_overhead_agent]\nenforcement = bogus\n')
            f.flush()
            stderr = self.useFixture(fixtures.StringStream('stderr')).stream
            self.patch(agent_cmd.sys, 'stderr', stderr)
            self.patch(agent_cmd.cfg, 'CONF', cfg.ConfigOpts())
            self.assertEqual(2, agent_cmd.main(['--config-file', f.name]))
        stderr.seek(0)
        self.assertIn('configuration error: [numa_overhead_agent] '
                      'enforcement', stderr.read())


class TestAgentService(base.TestCase):
    """start/stop with the loops mocked.

    The agent process itself runs in tests/integration, on the threading
    backend.
    """

    def test_start_runs_the_loops_and_stop_closes(self):
        from oslo_service import loopingcall
        loop_cls = self.useFixture(fixtures.MockPatchObject(
            loopingcall, 'FixedIntervalLoopingCall', autospec=True)).mock
        conf = conf_with('[DEFAULT]\nhost = cmp-9\n'
                         '[numa_overhead]\ntransport_url = fake://\n'
                         '[numa_overhead_agent]\nsample_interval = 2\n'
                         'rebalance_interval = 0\n')
        hv = fakes.FakeHypervisor(nodes=2)
        closed = []
        hv.close = lambda: closed.append(True)
        publisher = test_agent.FakePublisher()
        svc = agent_cmd.AgentService(conf, hypervisor=hv,
                                     publisher=publisher,
                                     notifier=test_agent.FakeNotifier())
        svc.start()
        # One loop (rebalancing is off), sampling every 2 s.
        loop_cls.assert_called_once_with(svc._cycle)
        loop_cls.return_value.start.assert_called_once_with(
            interval=2, initial_delay=0)
        svc._cycle()
        self.assertEqual('cmp-9', publisher.reports[0].host)
        self.assertIn('for host cmp-9: enforcement advisory, managed guests '
                      'floating; reports on topic numa-overhead via fake://',
                      self.logger.output)
        svc.stop()
        svc.wait()
        loop_cls.return_value.stop.assert_called_once_with()
        self.assertEqual([True], closed)

    def with_state_file(self):
        """The loops mocked; (a conf keeping the model state in a
        temporary file, that file's path).
        """
        from oslo_service import loopingcall
        self.useFixture(fixtures.MockPatchObject(
            loopingcall, 'FixedIntervalLoopingCall', autospec=True))
        state = os.path.join(self.useFixture(fixtures.TempDir()).path,
                             'model.json')
        return conf_with('[DEFAULT]\nhost = cmp-3\n'
                         '[numa_overhead]\ntransport_url = fake://\n'
                         '[numa_overhead_agent]\nstate_file = %s\n'
                         % state), state

    @staticmethod
    def service(conf, hv=None, start=True):
        """A service (started) on a fake hypervisor (2 nodes by default)."""
        svc = agent_cmd.AgentService(
            conf, hypervisor=hv or fakes.FakeHypervisor(nodes=2),
            publisher=test_agent.FakePublisher(),
            notifier=test_agent.FakeNotifier())
        if start:
            svc.start()
        return svc

    def test_the_cost_model_state_outlives_the_agent(self):
        conf, state = self.with_state_file()
        svc = self.service(conf)
        optimizer = svc.agent.optimizer
        # Verdicts taught it; a cycle saves.
        optimizer.trust = optimizer.learned_trust = 0.4
        optimizer.predictions['guest'].append((1.1, 1.0))
        svc._cycle()
        with open(state) as f:
            self.assertEqual(0.4, json.load(f)['trust'])
        # Another verdict within the minute: saved when the agent stops.
        optimizer.trust = optimizer.learned_trust = 0.3
        svc._cycle()
        with open(state) as f:
            self.assertEqual(0.4, json.load(f)['trust'])
        svc.stop()
        with open(state) as f:
            self.assertEqual(0.3, json.load(f)['trust'])

        restarted = self.service(conf)
        self.addCleanup(restarted.stop)
        self.assertEqual(0.3, restarted.agent.optimizer.trust)
        self.assertEqual([(1.1, 1.0)],
                         list(restarted.agent.optimizer.predictions['guest']))

    def test_libvirt_down_at_start(self):
        # The state is restored at the first cycle that reaches libvirt;
        # the agent starts (no traceback, no crash loop).
        conf, _state = self.with_state_file()
        svc = self.service(conf)
        svc.agent.optimizer.trust = svc.agent.optimizer.learned_trust = 0.4
        svc.stop()
        hv = fakes.FakeHypervisor(nodes=2)
        hv.down = True
        warnings = self.useFixture(fixtures.FakeLogger(
            level='WARNING', name=agent_cmd.__name__))
        svc = self.service(conf, hv)
        self.addCleanup(svc.stop)
        self.assertIsNone(svc.model_state)
        svc._cycle()
        svc._cycle()
        self.assertEqual(1, warnings.output.count(
            'The host\'s topology cannot be read yet'))
        self.assertNotEqual(0.4, svc.agent.optimizer.trust)
        hv.down = False
        svc._cycle()
        self.assertEqual(0.4, svc.agent.optimizer.trust)

    def test_the_state_is_saved_only_once_restored(self):
        # A stop while the restore waits for the agent's lock must not
        # save a blank state over the learned one.
        from nova_numa_overhead.compute import model_state
        conf, _state = self.with_state_file()
        svc = self.service(conf, start=False)
        seen = []
        self.useFixture(fixtures.MockPatchObject(
            model_state.Keeper, 'restore', autospec=True,
            side_effect=lambda keeper: seen.append(svc.model_state)))
        svc.start()
        self.addCleanup(svc.stop)
        self.assertEqual([None], seen)
        self.assertIsNotNone(svc.model_state)

    def test_the_broker_does_not_hold_the_loops(self):
        # oslo.messaging's start waits for an unreachable broker.
        from nova_numa_overhead import rpc
        from oslo_service import loopingcall
        loop_cls = self.useFixture(fixtures.MockPatchObject(
            loopingcall, 'FixedIntervalLoopingCall', autospec=True)).mock
        release = threading.Event()
        self.useFixture(fixtures.MockPatchObject(
            rpc, 'start_agent_listener',
            side_effect=lambda conf, on_sync: release.wait(10)))
        svc = self.service(
            conf_with('[numa_overhead]\ntransport_url = fake://\n'),
            start=False)
        self.useFixture(fixtures.MockPatchObject(agent_cmd, 'LISTENER_WAIT',
                                                 0.1))
        started = time.monotonic()
        svc.start()
        self.assertLess(time.monotonic() - started, 5)
        loop_cls.return_value.start.assert_called()
        self.assertFalse(svc._listening.is_set())
        release.set()
        svc._listener_thread.join(5)
        self.assertFalse(svc._listener_thread.is_alive())
        svc.stop()

    def test_a_listener_started_after_stop_is_stopped(self):
        from nova_numa_overhead import rpc
        svc = agent_cmd.AgentService(conf_with(''))
        svc.agent = mock.Mock()
        stop = self.useFixture(fixtures.MockPatchObject(
            rpc, 'stop_listener')).mock
        stop_all = self.useFixture(fixtures.MockPatchObject(
            rpc, 'stop_listeners')).mock
        server = mock.Mock()

        def start(conf, on_sync):
            # The broker answered once the service was stopping.
            svc._stopping.set()
            return server
        svc._listen(start)
        # Its own server only: others of the process keep on.
        stop.assert_called_once_with(server)
        stop_all.assert_not_called()

    def test_the_listener_is_started_again_until_it_listens(self):
        svc = agent_cmd.AgentService(conf_with(''))
        svc.agent = mock.Mock()
        svc._stopping = mock.Mock(**{'is_set.return_value': False})
        warnings = self.useFixture(fixtures.FakeLogger(
            level='WARNING', name=agent_cmd.__name__))
        start = mock.Mock(side_effect=[OSError('refused'),
                                       OSError('refused'), None])
        svc._listen(start)
        self.assertEqual(3, start.call_count)
        self.assertEqual([mock.call(1.0), mock.call(2.0)],
                         svc._stopping.wait.call_args_list)
        self.assertEqual(1, warnings.output.count(
            'Could not listen for the schedulers\' report requests'))

    def test_a_failing_restore_or_save_never_stops_the_agent(self):
        from nova_numa_overhead.compute import model_state
        from oslo_service import loopingcall
        self.useFixture(fixtures.MockPatchObject(
            loopingcall, 'FixedIntervalLoopingCall', autospec=True))
        self.useFixture(fixtures.MockPatchObject(
            model_state.Keeper, 'restore', side_effect=RuntimeError('r')))
        self.useFixture(fixtures.MockPatchObject(
            model_state.Keeper, 'save', side_effect=RuntimeError('s')))
        conf = conf_with('[numa_overhead]\ntransport_url = fake://\n'
                         '[numa_overhead_agent]\nstate_file = /x.json\n')
        svc = agent_cmd.AgentService(
            conf, hypervisor=fakes.FakeHypervisor(nodes=2),
            publisher=test_agent.FakePublisher(),
            notifier=test_agent.FakeNotifier())
        svc.start()
        svc._cycle()
        svc.stop()
        self.assertIn('Restoring the cost model state failed',
                      self.logger.output)
        self.assertIn('Saving the cost model state failed',
                      self.logger.output)

    def test_a_failing_cycle_is_logged_not_raised(self):
        svc = agent_cmd.AgentService(conf_with(''))
        svc.agent = mock.Mock(**{'cycle.side_effect': RuntimeError('x'),
                                 'rebalance.side_effect': KeyError('y')})
        svc._cycle()
        svc._rebalance()
        self.assertIn('Sampling cycle failed', self.logger.output)
        self.assertIn('Rebalancing failed', self.logger.output)


class TestSimulatedHypervisor(base.TestCase):

    def test_agent_service_on_a_simulated_host(self):
        from oslo_service import loopingcall
        self.useFixture(fixtures.MockPatchObject(
            loopingcall, 'FixedIntervalLoopingCall', autospec=True))
        conf = conf_with('[DEFAULT]\nhost = sim-1\n'
                         '[numa_overhead]\ntransport_url = fake://\n'
                         '[numa_overhead_agent]\nhypervisor = sim\n'
                         'sim_scenario = remote-4\nenforcement = pages\n'
                         'state_file = /nonexistent/model.json\n')
        agent_cmd.validate(conf)
        publisher = test_agent.FakePublisher()
        svc = agent_cmd.AgentService(conf, publisher=publisher,
                                     notifier=test_agent.FakeNotifier())
        svc.start()
        self.addCleanup(svc.stop)
        # A simulated host's trust is not a real host's.
        self.assertEqual('', svc.model_state.path)
        for _ in range(8):
            svc._cycle()
        report = publisher.reports[-1]
        self.assertEqual('sim-1', report.host)
        self.assertEqual(4, report.size)
        self.assertEqual(4, len(svc.agent.domains))
        # The remote-access guests have their memory at home.
        host = svc.simulated.host
        for guest in host.guests.values():
            pages = host.pages(guest)
            self.assertEqual([guest.home()], list(pages), guest.name)


class TestReportsUrl(base.TestCase):

    def test_the_password_is_hidden(self):
        conf = conf_with('[numa_overhead]\ntransport_url = '
                         'rabbit://nova:secret@api:5672/\n')
        self.assertEqual('rabbit://nova:***@api:5672/',
                         agent_cmd.reports_url(conf))

    def test_nova_transport_when_unset(self):
        self.assertEqual('[DEFAULT] transport_url',
                         agent_cmd.reports_url(conf_with('')))


class TestLogLines(base.TestCase):
    """The agent's log lines as oslo.log formats them in a deployment."""

    def setUp(self):
        super().setUp()
        import logging

        from oslo_log import formatters
        from oslo_log import log
        self.stream = io.StringIO()
        handler = logging.StreamHandler(self.stream)
        conf = cfg.ConfigOpts()
        log.register_options(conf)
        conf([])
        handler.setFormatter(formatters.ContextFormatter(
            project='nova', version='1', config=conf))
        logger = logging.getLogger('nova_numa_overhead.compute.agent')
        logger.addHandler(handler)
        self.addCleanup(logger.removeHandler, handler)

    def test_libvirt_unavailable_is_said_once_per_outage(self):
        from nova_numa_overhead.compute import agent as agent_mod
        hv = fakes.FakeHypervisor(nodes=2)
        agent = agent_mod.Agent(self.conf, hv, test_agent.FakePublisher(),
                                'cmp-1', sleep=lambda s: None)
        self.assertTrue(agent.cycle())
        hv.down = True
        for _ in range(3):
            self.assertFalse(agent.cycle())
        hv.down = False
        self.assertTrue(agent.cycle())
        lines = [line for line in self.stream.getvalue().splitlines()
                 if 'WARNING' in line or 'INFO' in line]
        warnings = [line for line in lines if 'WARNING' in line]
        self.assertEqual(1, len(warnings), lines)
        # The exception's text once, not repeated by oslo.log.
        self.assertEqual(1, warnings[0].count('connection closed'),
                         warnings[0])
        self.assertNotIn('HypervisorUnavailable', warnings[0])
        self.assertIn('reachable again after 3 failed attempts',
                      self.stream.getvalue())
