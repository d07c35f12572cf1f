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

import importlib
import os
import subprocess
import sys
import tempfile

from oslo_config import cfg

from nova_numa_overhead import conf as plugin_conf
from nova_numa_overhead.conf import opts
from tests import base

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
GENERATOR_CONF = os.path.join(TOP, 'etc', 'nova_numa_overhead',
                              'config-generator.conf')
SAMPLE = os.path.join(TOP, 'etc', 'nova_numa_overhead',
                      'nova-numa-overhead.conf.sample')


class TestOptions(base.TestCase):

    def test_list_opts_covers_every_registered_group(self):
        listed = {group.name for group, _ in opts.list_opts()}
        self.assertIn('numa_overhead', listed)
        for group, group_opts in opts.list_opts():
            for opt in group_opts:
                self.assertIn('Possible values', opt.help, opt.name)
                self.assertIn('Related options', opt.help, opt.name)

    def test_bad_values_fail_with_the_option_name(self):
        conf = plugin_conf.register_opts(cfg.ConfigOpts())
        with tempfile.NamedTemporaryFile('w', suffix='.conf') as f:
            f.write('[numa_overhead]\nunknown_host = maybe\n')
            f.flush()
            conf(['--config-file', f.name])
            exc = self.assertRaises(cfg.ConfigFileValueError, getattr,
                                    conf.numa_overhead, 'unknown_host')
        self.assertIn('maybe', str(exc))

    def test_registering_twice_is_harmless(self):
        conf = cfg.ConfigOpts()
        plugin_conf.register_opts(conf)
        plugin_conf.register_opts(conf)
        conf([])
        self.assertEqual(180, conf.numa_overhead.report_ttl)


class TestSampleConfig(base.TestCase):

    def test_sample_matches_the_options(self):
        # Fails when an option changed and the sample was not regenerated
        # (tox -e genconfig).
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, 'sample.conf')
            subprocess.run(
                [sys.executable, '-m', 'oslo_config.generator',
                 '--config-file', GENERATOR_CONF, '--output-file', out],
                check=True, cwd=TOP, capture_output=True)
            with open(out) as f:
                generated = f.read()
        with open(SAMPLE) as f:
            self.assertEqual(generated, f.read(),
                             'sample config is stale: run tox -e genconfig')


class TestPrivilegedOptions(base.TestCase):

    def test_listed_like_oslo_privsep_registers_them(self):
        from oslo_privsep import priv_context

        from nova_numa_overhead.compute import privsep
        from nova_numa_overhead.conf import privileged
        ours = {o.name: o for o in privileged.OPTS}
        theirs = {o.name: o for o in priv_context.OPTS}
        self.assertEqual(sorted(theirs), sorted(ours))
        for name, opt in theirs.items():
            self.assertEqual(type(opt.type).__name__ == 'List',
                             type(ours[name].type).__name__ == 'List',
                             name)
        self.assertEqual('numa_overhead_privileged',
                         privsep.numa_overhead_pctxt.cfg_section)
        # The context sets its capabilities as the option's default when
        # it is created; other tests' config fixtures may have reset it.
        importlib.reload(privsep)
        from oslo_privsep import capabilities
        # The context's list (a Config fixture's cleanup elsewhere can drop
        # the default it set in cfg.CONF).
        self.assertEqual(
            sorted(capabilities.CAPS_BYNAME[c]
                   for c in privileged.CAPABILITIES),
            sorted(privsep.CAPABILITIES))

    def test_the_cgroup_helpers_capabilities_are_its_contexts(self):
        from oslo_privsep import capabilities

        from nova_numa_overhead.compute import privsep
        from nova_numa_overhead.conf import privileged
        self.assertEqual(
            sorted(capabilities.CAPS_BYNAME[c]
                   for c in privileged.CGROUP_CAPABILITIES),
            sorted(privsep.CGROUP_CAPABILITIES))
        [opt] = [o for o in privileged._cgroup_opts()
                 if o.name == 'capabilities']
        self.assertEqual(privileged.CGROUP_CAPABILITIES, opt.default)

    def test_in_the_sample(self):
        with open(SAMPLE) as f:
            self.assertIn('[numa_overhead_privileged]', f.read())
