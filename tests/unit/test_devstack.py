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
"""The devstack plugin, phase by phase, against stand-ins for devstack.

Each phase runs ``devstack/plugin.sh`` in bash the way stack.sh,
unstack.sh and clean.sh do (settings sourced first, then
``source plugin.sh <mode> <phase>``), with devstack's functions replaced by
``tests/unit/devstack_stubs.sh``. The resulting nova.conf is read with
Nova's own option definitions.
"""

import configparser
import os
import shutil
import subprocess
import sys
import textwrap

import fixtures
from nova.conf import scheduler as nova_scheduler_conf
from oslo_config import cfg
import testtools

from nova_numa_overhead.conf import opts as conf_opts

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
STUBS = os.path.join(TOP, 'tests', 'unit', 'devstack_stubs.sh')
DEVSTACK = os.path.join(TOP, 'devstack')
SCRIPTS = [os.path.join(DEVSTACK, 'plugin.sh'),
           os.path.join(DEVSTACK, 'settings'),
           os.path.join(DEVSTACK, 'lib', 'nova_numa_overhead'),
           # The one-machine cloud runs the plugin's functions for real.
           os.path.join(TOP, 'tools', 'cloud', 'cloud.sh'),
           os.path.join(TOP, 'tools', 'cloud', 'devstack-functions.sh')]
FILTER = 'nova_numa_overhead.scheduler.filters.NUMAOverheadFilter'
WEIGHER = 'nova_numa_overhead.scheduler.weighers.NUMAOverheadWeigher'
ALL_FILTERS = 'nova.scheduler.filters.all_filters'
ALL_WEIGHERS = 'nova.scheduler.weights.all_weighers'
BIN_DIR = '/opt/stack/data/venv/bin'
API_URL = 'rabbit://stackrabbit:secret@10.0.0.1:5672/'

HARNESS = textwrap.dedent('''\
    set -o errexit -o nounset
    source "$STUBS"
    source "$NUMA_OVERHEAD_DIR/devstack/settings"
    set -o xtrace
    source "$NUMA_OVERHEAD_DIR/devstack/plugin.sh" "$@"
    echo "$(set +o | grep xtrace)" > "$XTRACE_AFTER"
    ''')


class DevstackPluginTestCase(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.tmp = self.useFixture(fixtures.TempDir()).path
        self.nova_conf = os.path.join(self.tmp, 'nova.conf')
        # nova-compute's, made by devstack from nova.conf when it starts
        # nova-compute (after post-config).
        self.cpu_conf = os.path.join(self.tmp, 'nova-cpu.conf')
        self.calls_file = os.path.join(self.tmp, 'calls')
        self.data_dir = os.path.join(self.tmp, 'data')
        self.state_dir = os.path.join(self.data_dir, 'nova-numa-overhead')
        self.write_conf('[DEFAULT]\ndebug = True\n'
                        'transport_url = %s\n\n' % API_URL +
                        '[filter_scheduler]\n'
                        'enabled_filters = ComputeFilter,ImagePropertiesFilter'
                        '\n')

    def write_conf(self, text):
        with open(self.nova_conf, 'w') as f:
            f.write(text)

    def run_phase(self, *phase, **env):
        """Run plugin.sh with these arguments; returns the recorded calls."""
        open(self.calls_file, 'w').close()
        harness = os.path.join(self.tmp, 'harness.sh')
        with open(harness, 'w') as f:
            f.write(HARNESS)
        environ = {
            'PATH': os.environ.get('PATH', '/usr/bin:/bin'),
            'PYTHON': sys.executable,
            'STUBS': STUBS,
            'STUB_CALLS': self.calls_file,
            'XTRACE_AFTER': os.path.join(self.tmp, 'xtrace'),
            'NUMA_OVERHEAD_DIR': TOP,
            'DEST': self.tmp,
            'DATA_DIR': self.data_dir,
            'NOVA_CONF': self.nova_conf,
            'NOVA_CPU_CONF': self.cpu_conf,
            'NOVA_BIN_DIR': BIN_DIR,
            'LIBVIRT_TYPE': 'qemu',
        }
        environ.update(env)
        result = subprocess.run(['bash', harness] + list(phase),
                                env=environ, capture_output=True,
                                text=True, timeout=60)
        self.assertEqual(0, result.returncode,
                         'stdout: %s\nstderr: %s'
                         % (result.stdout, result.stderr))
        with open(self.calls_file) as f:
            return [tuple(line.rstrip('\n').split('\t')) for line in f]

    def load_conf(self) -> cfg.ConfigOpts:
        """nova.conf as Nova and the plugin read it."""
        conf = cfg.ConfigOpts()
        # By group name: option state of this ConfigOpts only (the
        # modules' OptGroup objects share theirs between ConfigOpts).
        for group, opts in list(nova_scheduler_conf.list_opts().items()) + \
                conf_opts.list_opts():
            conf.register_opts(opts, group=group.name)
        conf(['--config-file', self.nova_conf], default_config_files=[],
             default_config_dirs=[])
        return conf

    def calls_of(self, calls, name):
        return [c[1:] for c in calls if c[0] == name]


class TestSettings(DevstackPluginTestCase):

    def test_plugin_and_agent_service_are_declared(self):
        calls = self.run_phase('stack', 'pre-install')
        self.assertEqual([('nova-numa-overhead',)],
                         self.calls_of(calls, 'define_plugin'))
        self.assertEqual([('numa-overhead-agent',)],
                         self.calls_of(calls, 'enable_service'))

    def test_xtrace_is_restored(self):
        self.run_phase('stack', 'post-config')
        with open(os.path.join(self.tmp, 'xtrace')) as f:
            self.assertEqual('set -o xtrace', f.read().strip())


class TestInstall(DevstackPluginTestCase):

    def test_develop_install_with_the_agent_extra(self):
        calls = self.run_phase('stack', 'install')
        self.assertEqual([(TOP, 'agent')],
                         self.calls_of(calls, 'setup_develop'))
        self.assertEqual([('pkg-config', 'libvirt-dev')],
                         self.calls_of(calls, 'install_package'))

    def test_fedora_packages(self):
        calls = self.run_phase('stack', 'install', STUB_DISTRO='fedora')
        self.assertEqual([('pkgconfig', 'libvirt-devel')],
                         self.calls_of(calls, 'install_package'))

    def test_without_the_agent_no_libvirt(self):
        calls = self.run_phase('stack', 'install',
                               DISABLED_SERVICES='numa-overhead-agent')
        self.assertEqual([(TOP,)], self.calls_of(calls, 'setup_develop'))
        self.assertEqual([], self.calls_of(calls, 'install_package'))


class TestPostConfig(DevstackPluginTestCase):

    def test_filter_weigher_and_options(self):
        self.run_phase('stack', 'post-config')
        conf = self.load_conf()
        sched = conf.filter_scheduler
        self.assertEqual([ALL_FILTERS, FILTER], sched.available_filters)
        self.assertEqual(['ComputeFilter', 'ImagePropertiesFilter',
                          'NUMAOverheadFilter'], sched.enabled_filters)
        self.assertEqual([ALL_WEIGHERS, WEIGHER], sched.weight_classes)
        self.assertEqual(0.0, conf.numa_overhead.weight_multiplier)
        self.assertEqual('pass', conf.numa_overhead.unknown_host)
        self.assertIsNone(conf.numa_overhead.max_level)
        agent = conf.numa_overhead_agent
        self.assertEqual('qemu:///system', agent.connection_uri)
        self.assertEqual('advisory', agent.enforcement)
        self.assertEqual('floating', agent.managed_guests)
        self.assertIsNone(agent.topology_file)
        self.assertEqual(os.path.join(self.state_dir, 'model.json'),
                         agent.state_file)
        helper = 'sudo %s/privsep-helper --config-file %s' % (
            BIN_DIR, self.cpu_conf)
        self.assertEqual(helper, conf.numa_overhead_privileged.helper_command)
        self.assertEqual(helper, conf.numa_overhead_cgroups.helper_command)
        self.assertTrue(os.path.isdir(self.state_dir))
        # Reports go to the schedulers' (API-level) broker, which
        # nova-cpu.conf's [DEFAULT] transport_url will not be in cells v2.
        self.assertEqual(API_URL, conf.numa_overhead.transport_url)

    def test_reports_broker_from_local_conf(self):
        self.run_phase('stack', 'post-config',
                       NUMA_OVERHEAD_TRANSPORT_URL='rabbit://u:p@api:5672/')
        self.assertEqual('rabbit://u:p@api:5672/',
                         self.load_conf().numa_overhead.transport_url)

    def test_no_transport_no_reports_broker(self):
        self.write_conf('[DEFAULT]\n')
        self.run_phase('stack', 'post-config')
        self.assertIsNone(self.load_conf().numa_overhead.transport_url)

    def test_second_run_changes_nothing(self):
        self.run_phase('stack', 'post-config')
        with open(self.nova_conf) as f:
            first = f.read()
        self.run_phase('stack', 'post-config')
        with open(self.nova_conf) as f:
            self.assertEqual(first, f.read())

    def test_nova_defaults_when_unset(self):
        self.write_conf('[DEFAULT]\n')
        self.run_phase('stack', 'post-config')
        sched = self.load_conf().filter_scheduler
        nova_defaults = [o.default for o in
                         nova_scheduler_conf.filter_scheduler_opts
                         if o.name == 'enabled_filters'][0]
        self.assertEqual(nova_defaults + ['NUMAOverheadFilter'],
                         sched.enabled_filters)
        self.assertEqual([ALL_FILTERS, FILTER], sched.available_filters)
        self.assertEqual([ALL_WEIGHERS, WEIGHER], sched.weight_classes)

    def test_operator_values_are_kept(self):
        self.write_conf(
            '[filter_scheduler]\n'
            'available_filters = nova.scheduler.filters.all_filters\n'
            'available_filters = my.filters.RackFilter\n'
            'enabled_filters = RackFilter,NUMAOverheadFilter\n'
            'weight_classes = nova.scheduler.weights.ram.RAMWeigher\n')
        self.run_phase('stack', 'post-config')
        sched = self.load_conf().filter_scheduler
        self.assertEqual([ALL_FILTERS, 'my.filters.RackFilter', FILTER],
                         sched.available_filters)
        self.assertEqual(['RackFilter', 'NUMAOverheadFilter'],
                         sched.enabled_filters)
        self.assertEqual(['nova.scheduler.weights.ram.RAMWeigher', WEIGHER],
                         sched.weight_classes)

    def test_local_conf_overrides(self):
        self.write_conf('[numa_overhead]\nmax_level = 3\n')
        self.run_phase('stack', 'post-config',
                       NUMA_OVERHEAD_ENFORCEMENT='nodeset',
                       NUMA_OVERHEAD_MANAGED_GUESTS='opt_in',
                       NUMA_OVERHEAD_WEIGHT_MULTIPLIER='2.5',
                       NUMA_OVERHEAD_MAX_LEVEL='6',
                       NUMA_OVERHEAD_UNKNOWN_HOST='fail',
                       NUMA_OVERHEAD_PROBE='True',
                       LIBVIRT_TYPE='lxc')
        conf = self.load_conf()
        self.assertEqual(6, conf.numa_overhead.max_level)
        self.assertEqual(2.5, conf.numa_overhead.weight_multiplier)
        self.assertEqual('fail', conf.numa_overhead.unknown_host)
        agent = conf.numa_overhead_agent
        self.assertEqual('nodeset', agent.enforcement)
        self.assertEqual('opt_in', agent.managed_guests)
        self.assertEqual('lxc:///', agent.connection_uri)
        self.assertEqual(os.path.join(self.state_dir, 'topology.json'),
                         agent.topology_file)
        with open(self.nova_conf) as f:
            self.assertNotIn('enabled_perf_events', f.read())

    def test_perf_events_for_nova_compute_when_asked(self):
        events = 'cpu_cycles,instructions,cache_references,cache_misses'
        self.run_phase('stack', 'post-config',
                       NUMA_OVERHEAD_PERF_EVENTS=events)
        parser = configparser.ConfigParser(interpolation=None, strict=False)
        parser.read(self.nova_conf)
        self.assertEqual(events, parser.get('libvirt', 'enabled_perf_events'))

    def test_empty_max_level_unsets_it(self):
        self.write_conf('[numa_overhead]\nmax_level = 3\n')
        self.run_phase('stack', 'post-config')
        self.assertIsNone(self.load_conf().numa_overhead.max_level)

    def test_empty_weight_multiplier_unsets_it(self):
        self.write_conf('[numa_overhead]\nweight_multiplier = 3\n')
        self.run_phase('stack', 'post-config')
        self.assertEqual(0.0,
                         self.load_conf().numa_overhead.weight_multiplier)

    def test_agent_options_only_where_the_agent_runs(self):
        self.run_phase('stack', 'post-config',
                       DISABLED_SERVICES='numa-overhead-agent')
        conf = self.load_conf()
        self.assertIn(FILTER, conf.filter_scheduler.available_filters)
        self.assertIsNone(conf.numa_overhead_privileged.helper_command)
        self.assertIsNone(conf.numa_overhead_cgroups.helper_command)


class TestServices(DevstackPluginTestCase):

    def test_extra_starts_the_agent(self):
        calls = self.run_phase('stack', 'extra')
        # With nova-compute's configuration, as the docs say.
        self.assertEqual(
            [('numa-overhead-agent',
              '%s/nova-numa-overhead-agent --config-file %s'
              % (BIN_DIR, self.cpu_conf))],
            self.calls_of(calls, 'run_process'))

    def test_without_nova_cpu_conf_nova_conf(self):
        calls = self.run_phase('stack', 'extra', NOVA_CPU_CONF='')
        self.assertIn('--config-file %s' % self.nova_conf,
                      self.calls_of(calls, 'run_process')[0][1])

    def test_extra_without_the_agent(self):
        calls = self.run_phase('stack', 'extra',
                               DISABLED_SERVICES='numa-overhead-agent')
        self.assertEqual([], self.calls_of(calls, 'run_process'))

    def test_extra_probes_first_when_asked(self):
        # The probe runs from the bin dir: a stand-in records it.
        bin_dir = os.path.join(self.tmp, 'bin')
        os.mkdir(bin_dir)
        probe = os.path.join(bin_dir, 'nova-numa-overhead')
        with open(probe, 'w') as f:
            f.write('#!/bin/bash\nprintf "probe\\t%s\\n" "$*" >> '
                    '"$STUB_CALLS"\n')
        os.chmod(probe, 0o755)
        calls = self.run_phase('stack', 'extra', NOVA_BIN_DIR=bin_dir,
                               NUMA_OVERHEAD_PROBE='True')
        self.assertEqual(['probe', 'run_process'],
                         [c[0] for c in calls
                          if c[0] in ('probe', 'run_process')])
        self.assertIn('--output %s/topology.json' % self.state_dir,
                      calls[[c[0] for c in calls].index('probe')][1])

    def test_unstack_stops_the_agent(self):
        calls = self.run_phase('unstack')
        self.assertEqual([('numa-overhead-agent',)],
                         self.calls_of(calls, 'stop_process'))
        self.assertEqual([], self.calls_of(calls, 'run_process'))

    def test_clean_removes_the_state_dir(self):
        os.makedirs(self.state_dir)
        with open(os.path.join(self.state_dir, 'topology.json'), 'w') as f:
            f.write('{}')
        self.run_phase('clean')
        self.assertFalse(os.path.exists(self.state_dir))
        self.assertTrue(os.path.exists(self.nova_conf))


class TestLint(testtools.TestCase):

    def test_bashate(self):
        bashate = shutil.which('bashate') or os.path.join(
            os.path.dirname(sys.executable), 'bashate')
        if not os.path.exists(bashate):
            self.skipTest('bashate is not installed')
        # E006 (long lines) is ignored as devstack itself does.
        result = subprocess.run(
            [bashate, '-i', 'E006', '-e', 'E005,E042'] + SCRIPTS + [STUBS],
            capture_output=True, text=True, timeout=60)
        self.assertEqual((0, ''), (result.returncode, result.stdout.strip()),
                         result.stderr)

    def test_shellcheck(self):
        shellcheck = shutil.which('shellcheck')
        if shellcheck is None:
            self.skipTest('shellcheck is not installed')
        result = subprocess.run(
            [shellcheck, '-x', '-s', 'bash'] + SCRIPTS + [STUBS],
            cwd=TOP, capture_output=True, text=True, timeout=60)
        self.assertEqual(0, result.returncode, result.stdout)
