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

import testtools

from nova_numa_overhead.overhead import samples


class TestSample(testtools.TestCase):

    def test_metrics(self):
        m = samples.Sample(instructions=600, cycles=1000, llc_references=100,
                           llc_misses=52, stall_cycles=250).metrics()
        self.assertAlmostEqual(0.48, m.llc_hit_rate)
        self.assertAlmostEqual(0.25, m.cycle_loss)
        self.assertAlmostEqual(0.6, m.ipc)

    def test_empty_interval_has_no_metrics(self):
        self.assertIsNone(samples.Sample(0, 0, 0, 0, 0).metrics())

    def test_odd_counters_are_clamped(self):
        m = samples.Sample(instructions=10, cycles=10, llc_references=5,
                           llc_misses=9, stall_cycles=50).metrics()
        self.assertEqual(0.0, m.llc_hit_rate)
        self.assertEqual(1.0, m.cycle_loss)


class TestSlidingWindow(testtools.TestCase):

    def test_default_size_is_the_papers_16(self):
        window = samples.SlidingWindow()
        for i in range(40):
            window.add(samples.Metrics(i, 0.0, 1.0))
        self.assertEqual(16, len(window))
        # Only the last 16 entries (24..39) count.
        self.assertAlmostEqual(31.5, window.mean().llc_hit_rate)

    def test_mean_of_partial_window(self):
        window = samples.SlidingWindow(4)
        self.assertIsNone(window.mean())
        window.add(samples.Metrics(0.5, 0.1, 1.0))
        window.add(samples.Metrics(0.3, 0.3, 0.5))
        mean = window.mean()
        self.assertAlmostEqual(0.4, mean.llc_hit_rate)
        self.assertAlmostEqual(0.2, mean.cycle_loss)
        self.assertAlmostEqual(0.75, mean.ipc)

    def test_empty_sample_is_not_added(self):
        window = samples.SlidingWindow()
        self.assertFalse(window.add_sample(samples.Sample(0, 0, 0, 0, 0)))
        self.assertEqual(0, len(window))

    def test_bad_size(self):
        self.assertRaises(ValueError, samples.SlidingWindow, 0)
