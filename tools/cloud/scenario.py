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
"""Drive the one-machine cloud with the openstack CLI and check each step.

Run by ``tools/run.sh cloud`` once the cloud is up, with the cloud's own
Python and the admin credentials of its openrc in the environment. Every
step prints the commands it runs and what it checked, and the scenario
stops at the first step that fails (exit 1), naming the log to read.

The checks read what an operator reads: the CLI's answers, the service
logs under ``<cloud dir>/log``, ``virsh dumpxml``, ``nova-numa-overhead
status``, and, through listeners of their own on the cloud's RabbitMQ
vhost, the agent's reports and notifications as a scheduler worker and a
notification consumer receive them.
"""

import argparse
import json
import logging
import os
import re
import shlex
import subprocess
import sys
import threading
import time
import warnings
import xml.etree.ElementTree as ET

# oslo.messaging imports eventlet, which warns that it is deprecated.
warnings.simplefilter('ignore')

import openstack  # noqa: E402
from oslo_config import cfg  # noqa: E402
import oslo_messaging as messaging  # noqa: E402

BIN = os.path.dirname(sys.executable)
NOVA_NS = '{http://openstack.org/xmlns/libvirt/nova/1.1}'
FLAVOR = 'numa.small'
BAD_FLAVOR_PROPERTY = 'numa_overhead:policy=bogus'
FLAVOR_PROPERTIES = ('numa_overhead:policy=proportional',
                     'numa_overhead:max_nodes=2')
IMAGE = 'tiny-raw'
# The first compute API microversion whose flavor extra spec calls run the
# validators.
EXTRA_SPECS_API = '2.86'
MAX_LEVEL_HINT = 4


class StepFailed(Exception):
    pass


def say(text: str = '', indent: int = 0) -> None:
    print(' ' * indent + text, flush=True)


# -- watching logs ----------------------------------------------------------

class LogFile:
    """A service log read from a mark on: what a step caused."""

    def __init__(self, path: str):
        self.path = path
        self.pos = 0

    def mark(self) -> None:
        try:
            self.pos = os.path.getsize(self.path)
        except OSError:
            self.pos = 0

    def text(self) -> str:
        try:
            with open(self.path, errors='replace') as f:
                f.seek(self.pos)
                return f.read()
        except OSError:
            return ''

    def find(self, pattern: str):
        for line in self.text().splitlines():
            match = re.search(pattern, line)
            if match:
                return match, line
        return None

    def wait_for(self, pattern: str, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        while True:
            found = self.find(pattern)
            if found:
                return found
            if time.monotonic() > deadline:
                raise StepFailed('no %s in %s within %d s (looked for /%s/)'
                                 % (what, self.path, timeout, pattern))
            time.sleep(0.5)


def short(line: str, width: int = 160) -> str:
    """A log line as "LEVEL logger: message", cut to ``width``.

    Drops the timestamp, the pid, the request context in brackets and the
    "func path:line" debug suffix.
    """
    line = re.sub(r'^\S+ \S+ \d+ (\S+) (\S+) (\[[^]]*\] )?', r'\1 \2: ',
                  line.strip())
    line = re.sub(r' \S+ /\S+\.py:\d+$', '', line)
    return line if len(line) <= width else line[:width - 3] + '...'


def _left(line: str) -> bool:
    """Whether a placement line says the guest was left to the kernel:
    its vCPUs float beyond the nodes they run on (a multi-node host) and
    its memory is already there (the default first placement).
    """
    return bool(re.search(r': skipped, [^;]*not confined', line))


def fault_of(server) -> str:
    return (server.fault or {}).get('message', '') if server.fault else ''


# -- listening on the cloud's vhost ------------------------------------------

class ReportRecorder:
    """Receives the agents' reports as every scheduler worker does."""

    target = messaging.Target(namespace='numa_overhead', version='1.0')

    def __init__(self):
        self.reports = []
        self.cond = threading.Condition()

    def report(self, ctxt, report):
        with self.cond:
            self.reports.append((time.monotonic(), report))
            self.cond.notify_all()

    def wait_for(self, check, timeout: float, what: str, since=0.0):
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for stamp, report in reversed(self.reports):
                    if stamp >= since and check(report):
                        return report
                left = deadline - time.monotonic()
                if left <= 0:
                    raise StepFailed('no report %s within %d s'
                                     % (what, timeout))
                self.cond.wait(min(left, 1.0))


class NotificationRecorder:
    """Keeps the agent's numa_overhead.* notifications."""

    def __init__(self):
        self.events = []
        self.cond = threading.Condition()

    def info(self, ctxt, publisher_id, event_type, payload, metadata):
        if event_type.startswith('numa_overhead.'):
            with self.cond:
                self.events.append((event_type, publisher_id, payload))
                self.cond.notify_all()

    def wait_for(self, event_type: str, guest: str, count: int,
                 timeout: float):
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                found = [e for e in self.events if e[0] == event_type and
                         e[2].get('guest') == guest]
                if len(found) >= count:
                    return found[count - 1]
                left = deadline - time.monotonic()
                if left <= 0:
                    raise StepFailed('no %s notification #%d for %s within '
                                     '%d s' % (event_type, count, guest,
                                               timeout))
                self.cond.wait(min(left, 1.0))


class Listeners:
    """A report listener and a notification listener on the vhost."""

    def __init__(self, transport_url: str, report_topic: str, name: str):
        # The global ConfigOpts: oslo.messaging reads some of its options
        # from there only.
        conf = cfg.CONF
        conf([], project='nova-numa-overhead-cloud')
        self.reports = ReportRecorder()
        self.notifications = NotificationRecorder()
        rpc = messaging.get_rpc_transport(conf, url=transport_url)
        self.rpc_server = messaging.get_rpc_server(
            rpc, messaging.Target(topic=report_topic,
                                  server='%s-scenario' % name),
            [self.reports])
        notify = messaging.get_notification_transport(conf,
                                                      url=transport_url)
        # The agent's exchange is its control_exchange: 'openstack' unless
        # it runs with Nova's ('nova'); listen on both.
        targets = [messaging.Target(topic='notifications', exchange=ex)
                   for ex in ('openstack', 'nova')]
        self.notify_listener = messaging.get_notification_listener(
            notify, targets, [self.notifications],
            pool='%s-scenario' % name)

    def start(self):
        self.rpc_server.start()
        self.notify_listener.start()

    def stop(self):
        for server in (self.rpc_server, self.notify_listener):
            try:
                server.stop()
                server.wait()
            except Exception:
                pass


# -- the cloud --------------------------------------------------------------

class Cloud:

    def __init__(self, args):
        self.dir = args.cloud_dir
        self.host = args.host
        self.name = args.name
        self.nova_conf = os.path.join(self.dir, 'etc', 'nova', 'nova.conf')
        self.cpu_conf = os.path.join(self.dir, 'etc', 'nova',
                                     'nova-cpu.conf')
        self.logs = {name: LogFile(os.path.join(self.dir, 'log',
                                                name + '.log'))
                     for name in ('nova-scheduler', 'nova-compute',
                                  'nova-api', 'numa-overhead-agent',
                                  'nova-conductor')}
        self.demo_env = dict(os.environ, **self._openrc('openrc-demo'))
        # Waiting and reading back go through openstacksdk in-process:
        # an openstack command per poll would cost seconds each.
        self.sdk = openstack.connect()
        self.servers = []
        self.transport_url = self._ini(self.nova_conf, 'DEFAULT',
                                       'transport_url')
        self.report_topic = self._ini(self.nova_conf, 'numa_overhead',
                                      'report_topic') or 'numa-overhead'
        self.report_ttl = int(self._ini(self.nova_conf, 'numa_overhead',
                                        'report_ttl') or 180)

    def _openrc(self, name) -> dict:
        env = {}
        with open(os.path.join(self.dir, name)) as f:
            for line in f:
                match = re.match(r'export (OS_\w+)=(.*)$', line.strip())
                if match:
                    env[match.group(1)] = match.group(2)
        return env

    @staticmethod
    def _ini(path, section, option):
        parser = cfg.ConfigParser(path, {})
        parser.parse()
        values = parser.sections.get(section, {}).get(option)
        return values[-1] if values else None

    def log(self, name) -> LogFile:
        return self.logs[name]

    def mark(self) -> None:
        for log in self.logs.values():
            log.mark()

    # -- commands

    def run(self, argv, check=True, env=None, show=True,
            timeout=300) -> subprocess.CompletedProcess:
        if show:
            say('$ ' + ' '.join(shlex.quote(a) for a in argv), 4)
        result = subprocess.run(argv, capture_output=True, text=True,
                                env=env, timeout=timeout)
        if check and result.returncode != 0:
            raise StepFailed('%s exited %d: %s' % (
                argv[0], result.returncode,
                (result.stderr or result.stdout).strip()[-800:]))
        return result

    def openstack(self, *args, demo=False, **kwargs):
        env = self.demo_env if demo else None
        return self.run([os.path.join(BIN, 'openstack')] + list(args),
                        env=env, **kwargs)

    def openstack_json(self, *args, demo=False, **kwargs):
        result = self.openstack(*(list(args) + ['-f', 'json']), demo=demo,
                                **kwargs)
        return json.loads(result.stdout)

    def server(self, server_id):
        """The server as the API shows it to an admin (openstacksdk)."""
        return self.sdk.compute.get_server(server_id)

    def create_server(self, name, hint=None):
        """``openstack server create --wait``; returns the server as it
        ended, ACTIVE or ERROR.
        """
        args = ['server', 'create', '--flavor', FLAVOR, '--image', IMAGE,
                '--nic', 'none']
        if hint is not None:
            args += ['--hint', 'numa_overhead_max_level=%s' % hint]
        result = self.openstack(*(args + ['--wait', '-f', 'json', name]),
                                demo=True, check=False)
        servers = list(self.sdk.compute.servers(all_projects=True,
                                                name='^%s$' % name))
        if not servers:
            raise StepFailed('server create failed: %s' % (
                result.stderr or result.stdout).strip()[-500:])
        server = self.server(servers[0].id)
        self.servers.append(server.id)
        return server

    def delete_server(self, server_id) -> None:
        self.openstack('server', 'delete', '--wait', server_id, demo=True)
        if server_id in self.servers:
            self.servers.remove(server_id)

    def agent_pid(self) -> int | None:
        try:
            with open(os.path.join(self.dir, 'run',
                                   'numa-overhead-agent.pid')) as f:
                pid = int(f.read().strip())
            os.kill(pid, 0)
            return pid
        except (OSError, ValueError):
            return None

    def cloud_sh(self, command) -> None:
        self.run(['bash', os.path.join(os.path.dirname(__file__),
                                       'cloud.sh'), command])

    def domain_xml(self, domain) -> ET.Element:
        result = self.run(['virsh', '-c', 'qemu:///system', 'dumpxml',
                           domain])
        return ET.fromstring(result.stdout)

    def status(self) -> dict:
        result = self.run([os.path.join(BIN, 'nova-numa-overhead'),
                           'status', '--config-file', self.cpu_conf,
                           '--format', 'json'])
        return json.loads(result.stdout)


# -- the steps ----------------------------------------------------------------

class Scenario:

    def __init__(self, cloud: Cloud, listeners: Listeners, short: bool):
        self.cloud = cloud
        self.listeners = listeners
        self.short = short
        self.server = None      # the ACTIVE server: id, instance name
        self.domain = None
        self.report_seen = False

    def steps(self):
        steps = [
            ('a bad extra spec is an HTTP 400 naming the key; a valid '
             'flavor is accepted', self.step_extra_specs),
            ("the agent's report reaches the scheduler", self.step_report),
            ('server create --hint numa_overhead_max_level=%d goes ACTIVE '
             'on %s' % (MAX_LEVEL_HINT, self.cloud.host),
             self.step_server),
            ('the agent saw "started", read the extra specs from the '
             'domain XML, planned and applied', self.step_placed),
        ]
        if not self.short:
            steps += [
                ('a bad hint is ignored (it would follow the server to '
                 'every move), the reason in the scheduler log',
                 self.step_bad_hint),
                ('server reboot --hard re-applies the placement',
                 self.step_reboot),
            ]
        steps.append(('server delete: the agent stays healthy, the guest '
                      'leaves its next report', self.step_delete))
        if not self.short:
            steps += [
                ('agent stopped: its report goes stale, the scheduler '
                 'follows unknown_host', self.step_agent_stopped),
                ('agent started again: reports resume, servers schedule',
                 self.step_agent_started),
            ]
        return steps

    def run(self) -> int:
        steps = self.steps()
        start = time.monotonic()
        say('Scenario (%s form): %d steps against the cloud in %s' % (
            'short' if self.short else 'full', len(steps), self.cloud.dir))
        for i, (title, func) in enumerate(steps, 1):
            say()
            say('[%d/%d] %s' % (i, len(steps), title))
            began = time.monotonic()
            self.cloud.mark()
            try:
                func()
            except (StepFailed, subprocess.TimeoutExpired) as exc:
                say('FAILED: %s' % exc, 4)
                say('logs: %s' % os.path.join(self.cloud.dir, 'log'), 4)
                return 1
            say('ok (%.0f s)' % (time.monotonic() - began), 4)
        say()
        say('%d passed, 0 failed: the scenario took %.0f s'
            % (len(steps), time.monotonic() - start))
        return 0

    # -- 1

    def step_extra_specs(self):
        cloud = self.cloud
        cloud.openstack('flavor', 'create', '--ram', '128', '--disk', '1',
                        '--vcpus', '1', FLAVOR)
        # Nova validates extra specs from microversion 2.86 on; the CLI's
        # flavor commands default to an older one.
        bad = cloud.openstack('--os-compute-api-version', EXTRA_SPECS_API,
                              'flavor', 'set', '--property',
                              BAD_FLAVOR_PROPERTY, FLAVOR, check=False)
        message = (bad.stderr or bad.stdout).strip()
        lines = [line for line in message.splitlines() if '400' in line]
        say('> ' + short(lines[0], 300) if lines else '> (no 400)', 6)
        if bad.returncode == 0 or not lines or \
                'numa_overhead:policy' not in lines[0]:
            raise StepFailed('expected an HTTP 400 naming '
                             'numa_overhead:policy, got: %s' % message)
        args = ['--os-compute-api-version', EXTRA_SPECS_API, 'flavor',
                'set']
        for prop in FLAVOR_PROPERTIES:
            args += ['--property', prop]
        cloud.openstack(*(args + [FLAVOR]))
        flavor = cloud.sdk.compute.find_flavor(FLAVOR)
        props = cloud.sdk.compute.fetch_flavor_extra_specs(
            flavor).extra_specs or {}
        say('> extra specs of %s: %s' % (FLAVOR, json.dumps(
            props, sort_keys=True)), 6)
        for prop in FLAVOR_PROPERTIES:
            key, value = prop.split('=')
            if props.get(key) != value:
                raise StepFailed('flavor lacks %s' % prop)

    # -- 2

    def step_report(self):
        cloud = self.cloud
        sched = cloud.log('nova-scheduler')
        sched.pos = 0
        host = re.escape(cloud.host)
        accepted = r'Accepted NUMA overhead report (\d+) of host ' + host
        # The listener starts in the background when nova-scheduler loads
        # the filter and the weigher.
        found = sched.wait_for(r'Listening for NUMA overhead reports', 60,
                               'report listener')
        say('> nova-scheduler: ' + short(found[1]), 6)
        found = sched.wait_for(accepted, 60, 'accepted report')
        say('> nova-scheduler: ' + short(found[1]), 6)
        report = self.listeners.reports.wait_for(
            lambda r: r.get('host') == cloud.host, 30,
            'from host %s on the vhost' % cloud.host)
        say('> report %d of host %s: nodes %s' % (
            report['seq'], report['host'],
            json.dumps([{k: n[k] for k in ('total_mb', 'free_mb', 'guests',
                                           'llc', 'mc')}
                        for n in report['nodes']])), 6)
        self.report_seen = True

    # -- 3

    def step_server(self):
        cloud = self.cloud
        sched = cloud.log('nova-scheduler')
        if self.server is None:
            server = cloud.create_server('%s-vm1' % cloud.name,
                                         hint=MAX_LEVEL_HINT)
            if server.status != 'ACTIVE':
                raise StepFailed('server went %s: %s' % (
                    server.status, fault_of(server)))
            self.server = server
        server = self.server
        host = server.compute_host
        self.domain = server.instance_name
        say('> %s ACTIVE on %s as domain %s'
            % (server.id, host, self.domain), 6)
        if host != cloud.host:
            raise StepFailed('server is on %s, not %s' % (host, cloud.host))
        found = sched.find(r'Filter NUMAOverheadFilter returned \d+ host')
        if found:
            say('> nova-scheduler: ' + short(found[1]), 6)
        found = sched.find(r'Weighed \[')
        if found:
            say('> nova-scheduler: ' + short(found[1]), 6)

    # -- 4

    def step_placed(self):
        cloud = self.cloud
        agent = cloud.log('numa-overhead-agent')
        agent.pos = 0
        domain = self.domain
        xml = cloud.domain_xml(domain)
        specs = {s.get('name'): s.text for s in xml.iter(
            NOVA_NS + 'extraSpec')}
        say('> virsh dumpxml %s: nova:extraSpecs %s' % (
            domain, json.dumps(specs, sort_keys=True)), 6)
        for prop in FLAVOR_PROPERTIES:
            key, value = prop.split('=')
            if specs.get(key) != value:
                raise StepFailed('domain XML lacks extraSpec %s' % prop)
        found = agent.wait_for(
            r'Placement of %s: (\w+), ' % re.escape(domain), 60,
            'placement of %s' % domain)
        say('> agent: ' + short(found[1], 200), 6)
        if found[0].group(1) == 'failed':
            raise StepFailed('the placement failed: %s'
                             % short(found[1], 300))
        if 'policy proportional, max_nodes 2' not in found[1]:
            raise StepFailed('the placement ignored the extra specs')
        action = found[0].group(1)
        if action not in ('restricted', 'moved') and not _left(found[1]):
            raise StepFailed('placement %s, expected restricted or moved '
                             '(enforcement=pages), or left to the kernel '
                             '(floating vCPUs on a multi-node host)'
                             % action)
        if action != 'skipped':
            event = self.listeners.notifications.wait_for(
                'numa_overhead.placement', domain, 1, 30)
            payload = event[2]
            say('> notification %s from %s: action %s, plan %s, before %s'
                % (event[0], event[1], payload.get('action'),
                   payload.get('plan'), payload.get('before')), 6)
        status = cloud.status()
        guests = {g['name']: g for g in status['guests']}
        guest = guests.get(domain)
        if guest is None:
            raise StepFailed('nova-numa-overhead status does not show %s'
                             % domain)
        say('> nova-numa-overhead status: %s policy %s max_nodes %s, '
            'memory MiB per node %s' % (domain, guest['policy'],
                                        guest['max_nodes'],
                                        guest['memory_mb_per_node']), 6)
        if guest['max_nodes'] != 2 or not any(guest['memory_mb_per_node']):
            raise StepFailed('status shows %s' % json.dumps(guest))
        live = cloud.domain_xml(domain).find('numatune/memory')
        if live is not None:
            say('> live numatune: mode %s nodeset %s' % (
                live.get('mode'), live.get('nodeset')), 6)

    # -- 5

    def step_bad_hint(self):
        cloud = self.cloud
        sched = cloud.log('nova-scheduler')
        server = cloud.create_server('%s-bad-hint' % cloud.name, hint=-1)
        say('> %s %s' % (server.id, server.status), 6)
        if server.status != 'ACTIVE':
            raise StepFailed('expected ACTIVE, got %s: %s' % (
                server.status, fault_of(server)))
        found = sched.wait_for(
            r'Ignoring a bad scheduler hint of instance %s: '
            % server.id, 30, 'reason')
        say('> nova-scheduler: ' + short(found[1], 200), 6)
        cloud.delete_server(server.id)

    # -- 6

    def step_reboot(self):
        cloud = self.cloud
        domain = self.domain
        before = len([e for e in self.listeners.notifications.events
                      if e[2].get('guest') == domain])
        cloud.openstack('server', 'reboot', '--hard', '--wait',
                        self.server.id, demo=True)
        shown = cloud.server(self.server.id)
        say('> %s %s' % (shown.id, shown.status), 6)
        if shown.status != 'ACTIVE':
            raise StepFailed('server is %s after the reboot' % shown.status)
        found = cloud.log('numa-overhead-agent').wait_for(
            r'Placement of %s: (restricted|moved|skipped), ' %
            re.escape(domain), 60, 'placement after the reboot')
        say('> agent: ' + short(found[1], 200), 6)
        if found[0].group(1) == 'skipped' and not _left(found[1]):
            raise StepFailed('placement after the reboot skipped: %s'
                             % short(found[1], 300))
        if found[0].group(1) in ('restricted', 'moved'):
            event = self.listeners.notifications.wait_for(
                'numa_overhead.placement', domain, before + 1, 30)
            say('> notification %s: action %s'
                % (event[0], event[2].get('action')), 6)

    # -- 7

    def step_delete(self):
        cloud = self.cloud
        pid = cloud.agent_pid()
        cloud.delete_server(self.server.id)
        deleted = time.monotonic()
        say('> %s deleted' % self.server.id, 6)
        report = self.listeners.reports.wait_for(
            lambda r: r.get('host') == cloud.host and
            not any(n['guests'] for n in r['nodes']), 60,
            'without the guest', since=deleted)
        say('> next report %d: guests per node %s' % (
            report['seq'], [n['guests'] for n in report['nodes']]), 6)
        if cloud.agent_pid() is None or cloud.agent_pid() != pid:
            raise StepFailed('the agent is not running any more')
        errors = [line for line in
                  cloud.log('numa-overhead-agent').text().splitlines()
                  if ' ERROR ' in line or 'Traceback' in line]
        if errors:
            raise StepFailed('agent logged: %s' % short(errors[0], 300))
        say('> agent %d still running, no error in its log' % pid, 6)
        self.server = None

    # -- 8

    def step_agent_stopped(self):
        cloud = self.cloud
        cloud.cloud_sh('agent-stop')
        stopped = time.monotonic()
        if cloud.agent_pid() is not None:
            raise StepFailed('the agent still runs')
        ttl = cloud.report_ttl
        say('waiting for the report to pass report_ttl (%d s)' % ttl, 6)
        last = max((s for s, r in self.listeners.reports.reports
                    if r.get('host') == cloud.host), default=stopped)
        time.sleep(max(0.0, last + ttl + 2 - time.monotonic()))
        sched = cloud.log('nova-scheduler')
        sched.mark()
        server = cloud.create_server('%s-stale' % cloud.name,
                                     hint=MAX_LEVEL_HINT)
        fault = fault_of(server)
        say('> %s %s: %s' % (server.id, server.status, fault), 6)
        if server.status != 'ERROR':
            raise StepFailed('a host with a stale report passed '
                             '(unknown_host=fail)')
        found = sched.wait_for(
            r'%s fails NUMAOverheadFilter: no fresh report' %
            re.escape(cloud.host), 30, 'unknown_host decision')
        say('> nova-scheduler: ' + short(found[1], 200), 6)
        cloud.delete_server(server.id)

    # -- 9

    def step_agent_started(self):
        cloud = self.cloud
        started = time.monotonic()
        cloud.cloud_sh('agent-start')
        report = self.listeners.reports.wait_for(
            lambda r: r.get('host') == cloud.host, 90, 'after the restart',
            since=started)
        say('> report %d from agent run %s'
            % (report['seq'], report['agent']['id']), 6)
        sched = cloud.log('nova-scheduler')
        found = sched.wait_for(
            r'Accepted NUMA overhead report \d+ of host %s' %
            re.escape(cloud.host), 60, 'accepted report')
        say('> nova-scheduler: ' + short(found[1]), 6)
        server = cloud.create_server('%s-vm2' % cloud.name,
                                     hint=MAX_LEVEL_HINT)
        say('> %s %s' % (server.id, server.status), 6)
        if server.status != 'ACTIVE':
            raise StepFailed('server went %s after the agent came back'
                             % server.status)
        cloud.delete_server(server.id)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--cloud-dir', required=True)
    parser.add_argument('--host', required=True)
    parser.add_argument('--name', required=True)
    parser.add_argument('--short', action='store_true',
                        help='bring-up checks, one server, the 400, delete')
    args = parser.parse_args(argv)
    # amqp warns about frames it drops while a listener closes.
    logging.getLogger('amqp').setLevel(logging.ERROR)
    cloud = Cloud(args)
    listeners = Listeners(cloud.transport_url, cloud.report_topic,
                          cloud.name)
    listeners.start()
    try:
        return Scenario(cloud, listeners, args.short).run()
    finally:
        listeners.stop()


if __name__ == '__main__':
    sys.exit(main())
