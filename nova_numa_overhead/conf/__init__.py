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
"""Configuration of nova-numa-overhead, one module per option group."""

from oslo_config import cfg

from nova_numa_overhead.conf import agent
from nova_numa_overhead.conf import numa_overhead

_MODULES = (numa_overhead, agent)


def register_opts(conf: cfg.ConfigOpts) -> cfg.ConfigOpts:
    """Register every option group of the plugin on ``conf``.

    Safe to call more than once: oslo.config ignores a re-registration of
    the same options.
    """
    for module in _MODULES:
        module.register_opts(conf)
    return conf
