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
"""``nova-numa-overhead-agent``: the compute-side service.

Runs on every compute host next to nova-compute and libvirtd, on
oslo.service's threading backend (no eventlet), with the nova.conf it
shares with nova-compute::

    nova-numa-overhead-agent --config-file /etc/nova/nova.conf
"""

import logging as std_logging
import socket
import sys
import threading

from oslo_config import cfg
from oslo_log import log as logging
from oslo_service.backend import base as service_base

LOG = logging.getLogger(__name__)

# Seconds the agent's loops wait for its sync listener to start.
LISTENER_WAIT = 5.0
PROG = 'nova-numa-overhead-agent'


def _register(conf):
    from nova_numa_overhead import conf as plugin_conf
    plugin_conf.register_opts(conf)
    try:
        # nova-compute's [DEFAULT] host: the name the schedulers know.
        conf.register_opt(cfg.StrOpt('host', default=socket.gethostname(),
                                     sample_default='<hostname>'))
    except cfg.DuplicateOptError:
        pass


def validate(conf) -> None:
    """Read every option once, so that a bad value stops the start.

    :raises ValueError: with a message naming the option.
    """
    from nova_numa_overhead.conf import agent as agent_conf
    for group in ('numa_overhead', 'numa_overhead_agent'):
        for name in conf[group]:
            try:
                getattr(conf[group], name)
            except (cfg.ConfigFileValueError, ValueError) as exc:
                raise ValueError('[%s] %s: %s' % (group, name, exc))
    agent_conf.check(conf)


class SimulatedHost:
    """``hypervisor = sim``: a simulated host whose guests arrive over
    time; the service advances the model every sample.
    """

    def __init__(self, conf):
        import dataclasses

        from nova_numa_overhead.sim import presets
        from nova_numa_overhead.sim import runner
        from nova_numa_overhead.sim import scenarios
        opts = conf.numa_overhead_agent
        spec = presets.host(opts.sim_host)
        scenario = dataclasses.replace(scenarios.get(opts.sim_scenario),
                                       host=spec)
        self.runner = runner
        self.pending = [p for _, p in scenario.arrivals()
                        if all(n < spec.size for n in
                               p.vcpu_nodes + p.first_touch)]
        self.host, self.hypervisor = runner.new_host(scenario)
        self.policy = runner.policies_mod.NovaDefault()
        self.policy.attach(self.hypervisor)
        self.seconds = float(opts.sample_interval)
        self.now = 0.0

    def step(self) -> None:
        """Start the next guest, if any, and run the model."""
        if self.pending:
            self.runner.start_guest(self.host, self.hypervisor, self.policy,
                                    self.pending.pop(0))
        self.now += self.seconds
        self.host.step(self.now, self.seconds)
        self.hypervisor.advance(self.host.solve(), self.seconds)


def make_hypervisor(conf):
    opts = conf.numa_overhead_agent
    if opts.hypervisor == 'sim':
        return SimulatedHost(conf)
    from nova_numa_overhead.compute import libvirt_driver
    from nova_numa_overhead.compute import pages
    mover = pages.PageMover() if opts.enforcement == 'pages' else None
    return libvirt_driver.LibvirtHypervisor(opts.connection_uri,
                                            mover=mover)


def reports_url(conf) -> str:
    """Where the reports go, password hidden: in cells v2 it must be the
    schedulers' broker, so the agent says which it is at start.
    """
    from nova_numa_overhead.cmd import common
    url = conf.numa_overhead.transport_url
    if not url:
        try:
            url = conf.transport_url
        except cfg.NoSuchOptError:
            url = None
    return common.redact(url) if url else '[DEFAULT] transport_url'


def make_notifier(conf, host):
    """Notifications go where nova-compute's go.

    That is ``[oslo_messaging_notifications] transport_url``, else
    ``[DEFAULT] transport_url`` (the cell's broker in cells v2), not the
    reports' ``[numa_overhead] transport_url`` (unless it is the only
    one). Like nova-compute's, they are sent only when
    ``[oslo_messaging_notifications] driver`` is set.
    """
    import oslo_messaging as messaging
    transport = messaging.get_notification_transport(conf)
    if not (conf.oslo_messaging_notifications.transport_url or
            conf.transport_url) and conf.numa_overhead.transport_url:
        transport.cleanup()
        transport = messaging.get_notification_transport(
            conf, url=conf.numa_overhead.transport_url)
    return messaging.Notifier(transport,
                              publisher_id='numa-overhead-agent.%s' % host,
                              topics=['notifications'])


class AgentService(service_base.ServiceBase):
    """The agent's loops as an oslo.service service.

    The loops come from ``oslo_service.loopingcall``, imported in
    :meth:`start`, once :func:`main` has chosen the threading backend.
    """

    def __init__(self, conf, hypervisor=None, publisher=None, notifier=None):
        self.conf = conf
        self.hypervisor = hypervisor
        self.publisher = publisher
        self.notifier = notifier
        self.agent = None
        self.model_state = None
        self.simulated = None
        self._loops = []
        self._events_thread = None
        self._listener_thread = None
        self._state_waits = False
        self._stopping = threading.Event()
        self._listening = threading.Event()

    # oslo.service's launcher calls these.
    def start(self):
        from oslo_service import loopingcall

        from nova_numa_overhead.compute import agent as agent_mod
        from nova_numa_overhead import rpc
        conf = self.conf
        opts = conf.numa_overhead_agent
        host = conf.host
        self.hypervisor = self.hypervisor or make_hypervisor(conf)
        self.simulated = None
        if isinstance(self.hypervisor, SimulatedHost):
            self.simulated = self.hypervisor
            self.hypervisor = self.simulated.hypervisor
        if self.publisher is None:
            # Reports go out from a thread of their own: nothing the
            # agent does waits on the broker.
            from nova_numa_overhead.compute import publisher
            self.publisher = publisher.AsyncPublisher(
                rpc.ReportPublisher(conf))
        if self.notifier is None:
            error = None
            try:
                self.notifier = make_notifier(conf, host)
            except Exception as exc:
                error = exc
            if error is not None:
                # Logged outside the handler: oslo.log would repeat the
                # exception's text after the message.
                LOG.warning('Notifications disabled: %s', error)
        self.agent = agent_mod.Agent(conf, self.hypervisor, self.publisher,
                                     host, notifier=self.notifier)
        self.model_state = None
        # Libvirt down at start: the state is restored before the first
        # cycle that reaches it.
        self._keep_model_state()
        # libvirt's event thread only queues; this thread does the work.
        self._stopping.clear()
        self._events_thread = threading.Thread(
            target=self._handle_events, name='numa-overhead-events',
            daemon=True)
        self._events_thread.start()
        self.hypervisor.register_lifecycle(self.agent.on_lifecycle)
        LOG.info('%(prog)s for host %(host)s: enforcement %(mode)s, '
                 'managed guests %(managed)s; reports on topic %(topic)s '
                 'via %(url)s', {
                     'prog': PROG, 'host': host, 'mode': opts.enforcement,
                     'managed': opts.managed_guests,
                     'topic': conf.numa_overhead.report_topic,
                     'url': reports_url(conf)})
        # The schedulers' sync requests: oslo.messaging's start waits for
        # the broker, which holds sampling and placement LISTENER_WAIT
        # seconds at most (a first report seldom goes before the agent
        # can answer a sync).
        self._listening.clear()
        self._listener_thread = threading.Thread(
            target=self._listen, args=(rpc.start_agent_listener,),
            name='numa-overhead-sync-listener', daemon=True)
        self._listener_thread.start()
        self._listening.wait(LISTENER_WAIT)
        for func, interval in ((self._cycle, opts.sample_interval),
                               (self._rebalance, opts.rebalance_interval)):
            if interval > 0:
                loop = loopingcall.FixedIntervalLoopingCall(func)
                loop.start(interval=interval, initial_delay=0)
                self._loops.append(loop)

    def _keep_model_state(self) -> None:
        """What the optimizer learned of the model's fit, from the last
        run (written after the cycles, and at stop); not that of a
        simulated host. Needs the host's topology: left for a later cycle
        while libvirt cannot be reached.
        """
        if self.model_state is not None:
            return
        from nova_numa_overhead.compute import hypervisor as hv_mod
        from nova_numa_overhead.compute import model_state
        opts = self.conf.numa_overhead_agent
        error = None
        try:
            learned = model_state.learned_for(
                self.conf, self.conf.host, self.agent.topology,
                self.agent.estimator_topology)
        except hv_mod.HypervisorError as exc:
            error = exc
        if error is not None:
            LOG.log(std_logging.DEBUG if self._state_waits else
                    std_logging.WARNING,
                    'The host\'s topology cannot be read yet (%s): the '
                    'cost model state is restored once it can', error)
            self._state_waits = True
            return
        keeper = model_state.Keeper(
            '' if self.simulated is not None else opts.state_file or '',
            self.agent.optimizer, learned)
        try:
            # The events thread and the rebalancing loop may run already.
            with self.agent._lock:
                keeper.restore()
        except Exception:
            LOG.exception('Restoring the cost model state failed; the '
                          'optimizer starts afresh')
        # Known to stop() only now: a stop while the restore waited for
        # the lock must not save a blank state over the learned one.
        self.model_state = keeper

    def _listen(self, start) -> None:
        delay, failures = 1.0, 0
        while not self._stopping.is_set():
            error = server = None
            try:
                server = start(self.conf, self.agent.sync)
            except Exception as exc:
                error = exc
            if error is None:
                self._listening.set()
                if self._stopping.is_set():
                    # stop() ran while it waited for the broker, maybe
                    # before its server was known: this one only.
                    from nova_numa_overhead import rpc
                    rpc.stop_listener(server)
                return
            failures += 1
            LOG.log(std_logging.WARNING if failures == 1 else
                    std_logging.DEBUG,
                    'Could not listen for the schedulers\' report '
                    'requests (%(exc)s): reports still go out; next try '
                    'in %(delay)d s', {'exc': error, 'delay': delay})
            self._stopping.wait(delay)
            delay = min(delay * 2, 60.0)

    def _cycle(self):
        try:
            self._keep_model_state()
            if self.simulated is not None:
                self.simulated.step()
            self.agent.cycle()
        except Exception:
            LOG.exception('Sampling cycle failed; next one in '
                          '%d s', self.conf.numa_overhead_agent
                          .sample_interval)
        self._save_model_state()

    def _save_model_state(self, force=False):
        keeper = self.model_state
        if keeper is None:
            return
        try:
            keeper.save(force=force)
        except Exception:
            LOG.exception('Saving the cost model state failed')

    def _handle_events(self):
        while not self._stopping.is_set():
            if not self.agent.wait_for_events(timeout=1.0):
                continue
            try:
                self.agent.handle_events()
            except Exception:
                LOG.exception('Handling libvirt events failed')

    def _rebalance(self):
        try:
            self.agent.rebalance()
            self.agent.colocate()
        except Exception:
            LOG.exception('Rebalancing failed')

    def stop(self, graceful=False):
        from nova_numa_overhead import rpc
        for loop in self._loops:
            loop.stop()
        self._loops = []
        self._stopping.set()
        if self._events_thread is not None:
            self._events_thread.join(timeout=5)
            self._events_thread = None
        rpc.stop_listeners()
        self._save_model_state(force=True)
        stop_publisher = getattr(self.publisher, 'stop', None)
        if stop_publisher is not None:
            stop_publisher()
        if self.hypervisor is not None:
            self.hypervisor.close()

    def wait(self):
        for loop in self._loops:
            loop.wait()

    def reset(self):
        pass


def main(argv=None) -> int:
    from nova_numa_overhead.cmd import common
    common.quiet_eventlet()
    from oslo_service import backend
    from oslo_service.backend import exceptions as backend_exceptions
    try:
        backend.init_backend(backend.BackendType.THREADING)
    except backend_exceptions.BackendAlreadySelected:
        # Only when main() runs inside another program (tests).
        pass
    from oslo_service import service

    conf = cfg.CONF
    _register(conf)
    logging.register_options(conf)
    try:
        conf(sys.argv[1:] if argv is None else argv, project='nova',
             prog=PROG)
    except cfg.Error as exc:
        print('%s: %s' % (PROG, exc), file=sys.stderr)
        return 2
    logging.setup(conf, PROG)
    try:
        validate(conf)
    except ValueError as exc:
        print('%s: configuration error: %s' % (PROG, exc), file=sys.stderr)
        return 2
    launcher = service.launch(conf, AgentService(conf),
                              restart_method='mutate')
    launcher.wait()
    return 0


if __name__ == '__main__':
    sys.exit(main())
