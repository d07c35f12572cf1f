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
"""What every option group module shares."""

from oslo_config import cfg


def register(conf: cfg.ConfigOpts, group: cfg.OptGroup, opts) -> None:
    """Register ``opts`` in ``group`` on ``conf``.

    Every ConfigOpts gets a group object of its own: oslo.config keeps
    overrides in the group object, which would otherwise leak between
    confs (tests, the simulator's agents).
    """
    conf.register_group(cfg.OptGroup(group.name, title=group.title,
                                     help=group.help))
    conf.register_opts(opts, group=group.name)
