"""tools/gpu/critical_path.py's critical path on hand-built timelines whose answers follow from the intervals: a
kernel hidden under a longer one on another stream is not on the path, a PDL-early kernel is charged only what follows
its stream predecessor's end, an idle gap is a gap, and the path's charges plus gaps span its first start to the
step's end."""
import importlib.util
import os
import tempfile
import unittest

SCRIPT = os.path.join(os.environ.get("DEEPINFER_SOURCE_DIR", "."), "tools/gpu/critical_path.py")
spec = importlib.util.spec_from_file_location("critical_path", SCRIPT)
chain = importlib.util.module_from_spec(spec)
spec.loader.exec_module(chain)


class CriticalPath(unittest.TestCase):
    def walk(self, rows):
        path, idle, span = chain.critical_path(rows)
        out = {}
        for start, end, _, name in path:
            out[name] = out.get(name, 0.0) + end - start
        return out, idle, span

    def test_hidden_side_stream_kernel_is_not_on_the_path(self):
        # main stream: a [0, 10], side stream: b [2, 6] inside it.
        c, idle, span = self.walk([(0.0, 10.0, 1, "a"), (2.0, 6.0, 2, "b")])
        self.assertEqual(c, {"a": 10.0})
        self.assertEqual((idle, span), (0.0, 10.0))

    def test_pdl_early_launch_is_charged_from_its_predecessors_end(self):
        # One stream: a [0, 10]; b launched early at 4 (waits until 10), ends 13: b is charged 3, a 10.
        c, idle, _ = self.walk([(0.0, 10.0, 1, "a"), (4.0, 13.0, 1, "b")])
        self.assertAlmostEqual(c["a"], 10.0)
        self.assertAlmostEqual(c["b"], 3.0)
        self.assertEqual(idle, 0.0)

    def test_idle_gap_is_a_gap(self):
        c, idle, span = self.walk([(0.0, 5.0, 1, "a"), (8.0, 9.0, 1, "b")])
        self.assertEqual(c, {"a": 5.0, "b": 1.0})
        self.assertEqual((idle, span), (3.0, 9.0))

    def test_path_and_gaps_span_its_first_start_to_the_end(self):
        # Streams: x on 1, y and w on 2, z on 3. Back from y [11.5, 15.25]: w ended last by 11.5 (x's second run
        # ends at 12, after), then y [1, 7.5] ended last by 10; nothing ends by 1. x and z are not on the path.
        rows = [(0.0, 4.0, 1, "x"), (1.0, 7.5, 2, "y"), (3.0, 5.0, 3, "z"), (9.0, 12.0, 1, "x"), (10.0, 11.0, 2, "w"),
                (11.5, 15.25, 2, "y")]
        c, idle, span = self.walk(rows)
        self.assertEqual(set(c), {"y", "w"})
        self.assertAlmostEqual(c["y"], 6.5 + 3.75)
        self.assertAlmostEqual(c["w"], 1.0)
        self.assertAlmostEqual(idle, 0.5 + 2.5)
        self.assertAlmostEqual(sum(c.values()) + idle, 15.25 - 1.0)
        self.assertAlmostEqual(span, 15.25)

    def test_walk_lists_the_path_in_time_order_with_the_gap_before_each(self):
        # One stream: a [0, 5], b [8, 9] (gap 3), c launched early at 8.5, charged from 9 to 12; off-path d.
        rows = [(0.0, 5.0, 1, "a"), (8.0, 9.0, 1, "b"), (8.5, 12.0, 1, "c"), (1.0, 2.0, 2, "d")]
        path, _, _ = chain.critical_path(rows)
        walked = chain.walk_rows(path, 6.0, 12.0)
        self.assertEqual([(w[0], w[1], w[2], w[4]) for w in walked], [(3.0, 8.0, 9.0, "b"), (0.0, 9.0, 12.0, "c")])
        self.assertEqual([w[4] for w in chain.walk_rows(path, 0.0, 100.0)], ["a", "b", "c"])

    def test_reads_timeline_table_sequence_lines_from_the_step_start(self):
        text = ("activities 0..3 in start order (us)\n"
                "       t     dur    gap strm      end  kernel\n"
                "    0.00    0.99   0.00   13     0.99  [memcpy]\n"
                " 4513.78    0.74 4512.79   13  4514.52  resolve_tokens_kernel\n"
                " 4524.79    2.94  10.27   13  4527.73  embed_streams_kernel\n"
                " 4525.72    7.65  -2.02   13  4533.37  hc_site_spread_kernel<deepinfer::cuda::NoSiteMarks, 16>\n")
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write(text)
        try:
            rows = chain.read_rows(f.name)
        finally:
            os.unlink(f.name)
        self.assertEqual(len(rows), 4)
        path, idle, _ = chain.critical_path(rows, "resolve_tokens")
        # One stream: the site, launched with PDL at 4525.72, waits for embed_streams to end at 4527.73; the leading
        # copy is not part of the step.
        self.assertEqual([p[3] for p in path],
                         ["hc_site_spread_kernel<deepinfer::cuda::NoSiteMarks, 16>", "embed_streams_kernel",
                          "resolve_tokens_kernel"])
        self.assertAlmostEqual(path[0][1] - path[0][0], 4533.37 - 4527.73)
        self.assertAlmostEqual(path[1][1] - path[1][0], 4527.73 - 4524.79)
        self.assertAlmostEqual(idle, 4524.79 - 4514.52)
        self.assertEqual(chain.class_of("hc_lagged_site_spread_kernel"), "mHC sites and head")
        self.assertEqual(chain.class_of("stream_gemm::fp4wg::fp4_wgmma_kernel<float, true>"), "MXFP4 routed experts")


if __name__ == "__main__":
    unittest.main()
