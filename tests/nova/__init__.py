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
"""Nova's own functional tests, unmodified, with the plugin enabled.

Each module here re-exports a module of ``nova.tests.functional`` from the
installed nova wheel after importing :mod:`tests.nova.harness`, which adds
what an operator adds (README, "Enabling it in Nova") and nothing else to
Nova's test configuration. Run as a group of its own (Nova's tests
monkey-patch with eventlet): ``stestr --test-path ./tests/nova run
--exclude-list tests/nova/exclude.txt``.
"""
