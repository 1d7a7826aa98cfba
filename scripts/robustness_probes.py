"""The robustness probes of issue 10, run against this tree: one Markdown table row per probe
(what a bad input, a killed tune, a locked or corrupt database ... gives now).

    .venv/bin/python scripts/robustness_probes.py
"""
import os, pickle, sqlite3, subprocess, sys, tempfile, textwrap, time
import numpy as np
import gymnasium as gym
import tensorgym
from tensorgym import matmul
from tensorgym.errors import TensorGymError
from tensorgym.records import Records
from tensorgym.task import Task

PY = sys.executable
tmp = tempfile.mkdtemp()
print("| probe | now |\n|---|---|")
def line(probe, now): print(f"| {probe} | {now} |", flush=True)

# 1 plain script
ex = os.path.join(tmp, "example.py")
open(ex, "w").write(textwrap.dedent('''
    import gymnasium as gym
    import tensorgym
    env = gym.make("TensorSched-v0", workload=tensorgym.matmul(48, 40, 56), target="cpu")
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
    print("ok", info["error"])'''))
out = subprocess.run([PY, ex], capture_output=True, text=True, cwd=tmp)
line("README example as a plain script", out.stdout.strip() or out.stderr[-200:])

# 2 kill -9 of a tune
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tests.proc_tree import descendants, survivors
db = os.path.join(tmp, "k.db")
p = subprocess.Popen([PY, "-m", "tensorgym.cli", "tune", "conv2d-C6", "--trials", "64", "--db", db,
                      "--no-progress"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(8)
kids = descendants(p.pid)
p.kill(); p.wait()
left = survivors(kids, 5.0)
line("kill -9 of a tensorgym tune", f"{len(kids)} children before the kill, {len(left)} alive 5 s later")

# 3 second tune on the same db
db2 = os.path.join(tmp, "r.db")
args = [PY, "-m", "tensorgym.cli", "tune", "matmul:64,64,64", "--trials", "8", "--agent", "random",
        "--db", db2, "--no-progress"]
subprocess.run(args, capture_output=True)
out = subprocess.run(args, capture_output=True, text=True)
n, d = sqlite3.connect(db2).execute("SELECT COUNT(*), COUNT(DISTINCT config_json) FROM records").fetchone()
line("a second tune on the same --db", out.stdout.splitlines()[0] + f" — {n} records, {d} distinct")

# 4 one-config measure
from tensorgym.measure import LocalMeasurer, MeasureOptions
from tensorgym.templates import default_config
w = matmul(64, 64, 64)
m = LocalMeasurer("cpu", MeasureOptions(build_timeout=1e-4))
r = m.measure(w, [default_config(w, "cpu")])[0]
m.close()
line("one-config measure (every env.step)", f"built in a builder process under build_timeout: {r.error.name} with build_timeout=1e-4")

# 6-7 malformed actions
env = gym.make("TensorSched-v0", workload=matmul(8, 8, 8), target="cpu", records=False)
env.reset(seed=0)
got = []
for a in [np.inf, 0.7, "1", True, np.zeros((len(env.unwrapped.space.knobs), 1), int), [[0]]]:
    try:
        env.step(a); got.append("accepted")
    except TensorGymError as e:
        got.append(type(e).__name__)
line("malformed actions, config mode", ", ".join(sorted(set(got))))
env = gym.make("TensorSched-v0", workload=matmul(8, 8, 8), target="cpu", records=False, action_mode="knob", budget=1)
env.reset(seed=0)
kinds, steps = set(), 0
for a in [None, [], np.nan, "abc", 1j, np.zeros(3)] * 200:
    _, rew, term, trunc, info = env.step(a); steps += 1; kinds.add(info["error"])
    if term or trunc: break
line("malformed actions, knob mode", f"{kinds} reward {rew}; episode truncated after {steps} invalid steps")

# 8-9 workloads
for spec in ["matmul:2.9,2,3", "matmul:8,8,8,7", "matmul:100000,100000,100000"]:
    out = subprocess.run([PY, "-m", "tensorgym.cli", "tune", spec, "--trials", "1"], capture_output=True, text=True)
    line(f"tune {spec}", f"exit {out.returncode}: {out.stderr.strip().splitlines()[-1][:150]}")
try:
    matmul(2.9, 2, 3)
except TensorGymError as e:
    line("matmul(2.9, 2, 3)", f"{type(e).__name__}: {e}")

# 10 write failure
db3 = os.path.join(tmp, "w.db")
rec = Records(db3, timeout=0.05, retry_delays=(0.0,))
held = sqlite3.connect(db3, isolation_level=None); held.execute("BEGIN EXCLUSIVE")
m = LocalMeasurer("cpu"); res = m.measure(w, [default_config(w, "cpu")]); m.close()
try:
    rec.add_many(Task(w.key, "cpu", "dev"), res, workload=w)
except TensorGymError as e:
    line("records write fails", f"{type(e).__name__}: {str(e)[:160]}… side file exists: {os.path.exists(e.saved_to)}")
held.execute("ROLLBACK"); held.close()

# 11 corrupt db
bad = os.path.join(tmp, "bad.db"); open(bad, "wb").write(b"garbage" * 500)
try:
    Records(bad)
except TensorGymError as e:
    line("corrupt database", f"{type(e).__name__}: {e}")

# 15 taskset
out = subprocess.run(["taskset", "-c", "0", PY, "-c", "from tensorgym.hardware.cpu import CPURuntime; from tensorgym.processes.host import available_cpus; print(CPURuntime().device_name(), available_cpus())"], capture_output=True, text=True)
line("taskset -c 0", f"device {out.stdout.split()[0]}…, {out.stdout.split()[-1]} builder(s)")

# 16 pickle
env = gym.make("TensorSched-v0", workload=matmul(8, 8, 8), target="cpu", records=os.path.join(tmp, "p.db"))
env.reset(seed=0); env.step(env.action_space.sample())
copy = pickle.loads(pickle.dumps(env.unwrapped))
line("pickle.dumps(env.unwrapped)", f"round-trips: {copy.trials} trials kept, records at {copy.records.path == env.unwrapped.session.records.path}")
