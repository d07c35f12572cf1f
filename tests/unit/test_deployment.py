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
"""The deployment guide's privilege setup, as written, is safe to paste.

The sudoers rule goes through the real sudo (``sudo -l -U nova <command>``
answers whether the rule admits a command, without running it), in a
private mount namespace where sudo reads a sudoers file of the test's and
a ``nova`` user exists; the rootwrap filter goes through oslo.rootwrap's
own matcher. Both must admit the command oslo.privsep builds from the
guide's ``helper_command`` and refuse the attacks of the security review.
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

import fixtures
from oslo_config import cfg
from oslo_config import fixture as config_fixture
from oslo_privsep import capabilities
from oslo_rootwrap import filters
import testtools

from nova_numa_overhead.compute import privsep

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
DOC = os.path.join(TOP, 'doc', 'source', 'admin', 'deployment.rst')
PREFIX = 'nova_numa_overhead.compute.privsep.'
CONTEXT = PREFIX + 'numa_overhead_pctxt'
# The two helpers: context name -> (option group, rootwrap filter name).
HELPERS = {
    'numa_overhead_pctxt': ('numa_overhead_privileged',
                            'numa-overhead-privsep'),
    'numa_overhead_cgroup_pctxt': ('numa_overhead_cgroups',
                                   'numa-overhead-cgroups'),
}
# What the guide used to say: it admits anything after the socket path.
OLD_SUDOERS = ('nova ALL=(root) NOPASSWD: /usr/local/bin/privsep-helper '
               '--config-file /etc/nova/nova.conf --privsep_context %s '
               '--privsep_sock_path *' % CONTEXT)


def doc_lines() -> list:
    with open(DOC, encoding='utf-8') as f:
        return [line.strip() for line in f]


def sudoers_rule(context: str) -> str:
    rules = [line for line in doc_lines()
             if line.startswith('nova ALL=(root) NOPASSWD:') and
             (r'privsep\.%s ' % context) in line]
    assert len(rules) == 1, rules
    return rules[0]


def rootwrap_filter(name: str) -> filters.CommandFilter:
    lines = [line for line in doc_lines()
             if line.startswith(name + ':')]
    assert len(lines) == 1, lines
    kind, *args = [part.strip() for part in
                   lines[0].split(':', 1)[1].split(',')]
    return getattr(filters, kind)(*args)


def helper_commands() -> dict:
    """``sudo`` and ``rootwrap``: the guide's two helper_command values."""
    found = {}
    for line in doc_lines():
        if line.startswith('helper_command = '):
            value = line.split('=', 1)[1].strip()
            found['rootwrap' if 'rootwrap' in value else 'sudo'] = value
    return found


class PrivsepCommand(fixtures.Fixture):
    """The command oslo.privsep runs for one ``helper_command``."""

    def __init__(self, helper_command, context='numa_overhead_pctxt'):
        super().__init__()
        self.helper_command = helper_command
        self.context = context

    def _setUp(self):
        conf = self.useFixture(config_fixture.Config(cfg.CONF))
        conf.config(helper_command=self.helper_command,
                    group=HELPERS[self.context][0])
        # As oslo.privsep's RootwrapClientChannel makes it.
        tmpdir = tempfile.mkdtemp()
        self.addCleanup(os.rmdir, tmpdir)
        self.sock = os.path.join(tmpdir, 'privsep.sock')
        self.argv = getattr(privsep, self.context).helper_command(self.sock)


def attacks(argv, sock, context='numa_overhead_pctxt') -> dict:
    """The review's forms, and a few more: name -> argv."""
    def replaced(old, new):
        return [new if arg == old else arg for arg in argv]
    other, = set(HELPERS) - {context}
    return {
        'extra --log-config-append': argv + ['--log-config-append',
                                             '/tmp/evil.conf'],
        'extra --config-file': argv + ['--config-file', '/tmp/evil.conf'],
        'extra --config-dir': argv + ['--config-dir', '/tmp'],
        'config file path traversal': replaced(
            '/etc/nova/nova.conf', '/etc/nova/../../tmp/x.conf'),
        'another context': replaced(PREFIX + context,
                                    'os_brick.privileged.default'),
        'our other context': replaced(PREFIX + context, PREFIX + other),
        'socket path traversal': replaced(
            sock, '/tmp/tmpabcdefgh/../../run/x.sock'),
        'arguments inside the socket path': replaced(
            sock, '/tmp/tmpab --log-config-append /tmp/x.conf '
            '--privsep_sock_path /tmp/tmpabcdefgh/privsep.sock'),
        'newline after the socket path': replaced(sock, sock + '\n'),
    }


class TestRootwrapFilter(testtools.TestCase):

    context = 'numa_overhead_pctxt'

    def setUp(self):
        super().setUp()
        command = self.useFixture(PrivsepCommand(
            helper_commands()['rootwrap'], self.context))
        prefix = ['sudo', 'nova-rootwrap', '/etc/nova/rootwrap.conf']
        self.assertEqual(prefix, command.argv[:3])
        # What nova-rootwrap matches: the command after its config file.
        self.argv = command.argv[3:]
        self.sock = command.sock
        self.filter = rootwrap_filter(HELPERS[self.context][1])

    def test_admits_the_helper(self):
        self.assertTrue(self.filter.match(self.argv), self.argv)

    def test_refuses_the_attacks(self):
        for name, argv in attacks(self.argv, self.sock,
                                  self.context).items():
            self.assertFalse(self.filter.match(argv), name)


class TestRootwrapFilterCgroups(TestRootwrapFilter):

    context = 'numa_overhead_cgroup_pctxt'


def sudo_version():
    try:
        out = subprocess.run(['sudo', '-V'], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r'Sudo version (\d+)\.(\d+)\.(\d+)', out)
    return tuple(int(x) for x in match.groups()) if match else None


# Runs in a private mount namespace: sudo reads our sudo.conf (and through
# it our sudoers), /etc/passwd has a nova user, and the helper's path
# exists. Prints one line per command: "ok" or "no".
NAMESPACE = r'''
import json, os, subprocess, sys
work, helper = sys.argv[1], sys.argv[2]
def bind(source, target):
    subprocess.run(['mount', '--bind', source, target], check=True)
bind(os.path.join(work, 'sudo.conf'), '/etc/sudo.conf')
bind(os.path.join(work, 'passwd'), '/etc/passwd')
if not os.path.exists(helper):
    subprocess.run(['mount', '-t', 'tmpfs', 'tmpfs', os.path.dirname(helper)],
                   check=True)
    with open(helper, 'w') as f:
        f.write('#!/bin/false\n')
    os.chmod(helper, 0o755)
for argv in json.load(open(os.path.join(work, 'commands.json'))):
    done = subprocess.run(['sudo', '-n', '-l', '-U', 'nova'] + argv,
                          capture_output=True)
    print('ok' if done.returncode == 0 else 'no', flush=True)
'''


class TestSudoersRule(testtools.TestCase):

    context = 'numa_overhead_pctxt'

    def setUp(self):
        super().setUp()
        if os.geteuid() != 0:
            self.skipTest('needs root (a private mount namespace)')
        version = sudo_version()
        if version is None or version < (1, 9, 10):
            self.skipTest('needs sudo 1.9.10 or later (regular expressions '
                          'in sudoers), found %s' % (version,))
        if shutil.which('unshare') is None:
            self.skipTest('needs unshare (util-linux)')
        command = self.useFixture(PrivsepCommand(helper_commands()['sudo'],
                                                 self.context))
        self.assertEqual('sudo', command.argv[0])
        self.argv = command.argv[1:]
        self.sock = command.sock

    def admitted(self, rule, commands) -> list:
        """For each command, whether ``rule`` lets nova run it."""
        import json
        work = self.useFixture(fixtures.TempDir()).path
        sudoers = os.path.join(work, 'sudoers')
        with open(sudoers, 'w') as f:
            f.write(rule + '\n')
        os.chmod(sudoers, 0o440)
        with open(os.path.join(work, 'sudo.conf'), 'w') as f:
            f.write('Plugin sudoers_policy sudoers.so sudoers_file=%s '
                    'sudoers_mode=0440 sudoers_uid=0 sudoers_gid=0\n'
                    % sudoers)
        with open('/etc/passwd') as f:
            passwd = f.read()
        if not re.search(r'^nova:', passwd, re.M):
            passwd += 'nova:x:64061:64061::/nonexistent:/usr/sbin/nologin\n'
        with open(os.path.join(work, 'passwd'), 'w') as f:
            f.write(passwd)
        with open(os.path.join(work, 'commands.json'), 'w') as f:
            json.dump(commands, f)
        done = subprocess.run(
            ['unshare', '--mount', '--propagation', 'private',
             sys.executable, '-c', NAMESPACE, work, self.argv[0]],
            capture_output=True, text=True, timeout=300)
        self.assertEqual(0, done.returncode, done.stderr)
        answers = done.stdout.split()
        self.assertEqual(len(commands), len(answers), done.stderr)
        return [answer == 'ok' for answer in answers]

    def test_the_rule_admits_the_helper_and_nothing_else(self):
        cases = attacks(self.argv, self.sock, self.context)
        answers = self.admitted(sudoers_rule(self.context),
                                [self.argv] + list(cases.values()))
        self.assertTrue(answers[0], 'the helper itself is refused: %s'
                        % shlex.join(self.argv))
        admitted = [name for name, ok in zip(cases, answers[1:]) if ok]
        self.assertEqual([], admitted)

    def test_the_old_rule_admitted_the_injection(self):
        # What the review found, kept here to show the check can tell.
        helper = self.argv[0]
        rule = OLD_SUDOERS.replace('/usr/local/bin/privsep-helper', helper)
        injected = attacks(self.argv, self.sock)['extra --log-config-append']
        self.assertEqual([True, True], self.admitted(rule, [self.argv,
                                                            injected]))


class TestSudoersRuleCgroups(TestSudoersRule):

    context = 'numa_overhead_cgroup_pctxt'

    def test_the_old_rule_admitted_the_injection(self):
        self.skipTest('the old rule was for the page mover only')


class TestCapabilitiesDocumented(testtools.TestCase):

    def test_every_capability_has_its_reason(self):
        text = '\n'.join(doc_lines())
        for cap in privsep.CAPABILITIES:
            name = capabilities.CAPS_BYVALUE[cap]
            self.assertIn('``%s``\n' % name, text)

    def test_the_recommended_setup_keeps_none(self):
        lines = doc_lines()
        self.assertIn('capabilities =', lines)
        self.assertIn('``none``', lines)
