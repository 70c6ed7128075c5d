"""`deepinfer launch --nproc N -- deepinfer generate --data-parallel N`: the ranks as processes (issue 7).

The outputs (token ids, finish reasons, messages, logprobs) must equal the one-process engine's, with the ranks as
threads (--data-parallel N) and with one rank; the expected values come from those runs, never from the
multi-process run. A rank killed mid-run makes the survivors exit with a clear error, bounded by a timeout."""
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import unittest

SRC = os.environ.get("DEEPINFER_SOURCE_DIR", ".")
CLI = os.environ.get("DEEPINFER_CLI", "build/deepinfer")
MODEL = os.path.join(SRC, "tests/golden/fixtures/v4_tiny")
TIMEOUT = 60  # seconds; a hang fails the test instead of the CI job


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environ(pid):
    with open("/proc/%d/environ" % pid, "rb") as f:
        return dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)


def children_of(pid):
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/stat" % entry) as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:  # field 4, after the command name in parentheses
                found.append(int(entry))
    return found


def stop(*procs):
    """Kills whichever process still runs, then reaps each and closes its stderr pipe."""
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
        p.stderr.close()


def requests():
    lines = []
    for i in range(10):
        r = {"id": i, "prompt_token_ids": [i, 10 + i, 20, 3 * i + 1][: 2 + i % 3], "max_tokens": 6 + i % 7}
        if i % 3 == 1:  # seeded sampling with logprobs
            r.update(temperature=0.9, seed=100 + i, logprobs=2, top_k=20)
        elif i % 3 == 2:  # sampling without a seed of its own: the engine's generator of the request id
            r.update(temperature=1.0, top_p=0.9)
        if i == 4:
            r["stop_token_ids"] = [33]
        lines.append(json.dumps(r))
    lines.insert(5, json.dumps({"prompt_token_ids": [1, 2], "top_k": -5}))  # rejected by the owning rank
    return lines


class LaunchDataParallelTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.inp = os.path.join(self.dir.name, "in.jsonl")
        with open(self.inp, "w") as f:
            f.write("\n".join(requests()) + "\n")

    def tearDown(self):
        self.dir.cleanup()

    def generate(self, name, *flags, launch=None):
        out = os.path.join(self.dir.name, name)
        cmd = [CLI, "generate", "--model", MODEL, "--quiet", "--input", self.inp, "--output", out, *flags]
        if launch:
            cmd = [CLI, "launch", "--nproc", str(launch), "--master-port", str(free_port()), "--"] + cmd
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out) as f:
            return [json.loads(line) for line in f]

    def test_processes_give_the_one_process_outputs(self):
        one = self.generate("dp1.jsonl")
        threads = self.generate("dp2_threads.jsonl", "--data-parallel", "2")
        self.assertEqual(threads, one)
        self.assertEqual([o["finish_reason"] for o in one].count("rejected"), 1)
        self.assertTrue(any("logprobs" in o for o in one))
        for n in (2, 3):
            with self.subTest(processes=n):
                procs = self.generate("dp%d_procs.jsonl" % n, "--data-parallel", str(n), launch=n)
                self.assertEqual(procs, one)
        # Synchronous scheduling takes the other step path on every rank.
        self.assertEqual(self.generate("dp2_sync.jsonl", "--data-parallel", "2", "--sync", launch=2), one)

    def long_input(self):
        path = os.path.join(self.dir.name, "long.jsonl")
        with open(path, "w") as f:  # seconds of work on the tiny model, so that a kill lands mid-run
            for i in range(32):
                f.write(json.dumps({"prompt_token_ids": [i, 5, 7], "max_tokens": 1000, "ignore_eos": True}) + "\n")
        return path

    def start_ranks(self, port, *extra):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2")
        long_input = self.long_input()
        out = os.path.join(self.dir.name, "killed.jsonl")
        procs = []
        for rank in (0, 1):
            procs.append(subprocess.Popen(
                [CLI, "generate", "--model", MODEL, "--input", long_input, "--output", out, "--data-parallel", "2"],
                env=dict(env, RANK=str(rank)), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        return procs, out

    def wait_loaded(self, proc):
        # The group connects before the model loads: once a rank has loaded, both are connected.
        deadline = time.time() + TIMEOUT
        while time.time() < deadline:
            line = proc.stderr.readline()
            if not line:
                self.fail("the rank exited before loading its model")
            if "layer 4/4" in line:
                return
        self.fail("the rank did not load its model in time")

    def test_a_killed_peer_makes_rank_0_fail_clearly(self):
        (rank0, rank1), out = self.start_ranks(free_port())
        try:
            self.wait_loaded(rank0)
            time.sleep(0.5)
            rank1.send_signal(signal.SIGKILL)
            _, err = rank0.communicate(timeout=TIMEOUT)
            self.assertNotEqual(rank0.returncode, 0)
            self.assertIn("data-parallel rank 1 is gone", err)
            with open(out) as f:  # rank 0 still answers every request, with the failure
                results = [json.loads(line) for line in f]
            self.assertEqual(len(results), 32)
            self.assertIn("error", [o["finish_reason"] for o in results])
        finally:
            stop(rank0, rank1)

    def test_under_launch_a_killed_rank_ends_the_job_with_the_reason(self):
        # `deepinfer launch` gives the survivors time to report the dead peer before it stops them.
        long_input = self.long_input()
        out = os.path.join(self.dir.name, "launch_killed.jsonl")
        launcher = subprocess.Popen(
            [CLI, "launch", "--nproc", "2", "--master-port", str(free_port()), "--", CLI, "generate", "--model",
             MODEL, "--input", long_input, "--output", out, "--data-parallel", "2"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            self.wait_loaded(launcher)
            time.sleep(0.5)
            children = children_of(launcher.pid)
            rank1 = [c for c in children if environ(c).get(b"RANK") == b"1"]
            self.assertEqual(len(rank1), 1, children)
            os.kill(rank1[0], signal.SIGKILL)
            _, err = launcher.communicate(timeout=TIMEOUT)
            self.assertNotEqual(launcher.returncode, 0)
            # Rank 0 exits within milliseconds of the kill, so the launcher may find either exit first.
            self.assertRegex(err, r"launch: local rank [01] exited with status (137|1);")
            self.assertIn("data-parallel rank 1 is gone", err)
        finally:
            stop(launcher)

    def test_a_killed_rank_0_makes_the_peer_fail_clearly(self):
        (rank0, rank1), _ = self.start_ranks(free_port())
        try:
            self.wait_loaded(rank1)
            time.sleep(0.5)
            rank0.send_signal(signal.SIGKILL)
            _, err = rank1.communicate(timeout=TIMEOUT)
            self.assertNotEqual(rank1.returncode, 0)
            # Session 10: one CI run of 2 saw an empty stderr here; the exit status tells a signal (negative) from
            # an error exit without its message.
            self.assertIn("data-parallel rank 0 is gone", err, "rank 1 exit status %d" % rank1.returncode)
        finally:
            stop(rank0, rank1)


if __name__ == "__main__":
    unittest.main()
