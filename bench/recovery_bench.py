"""Recovery time and memory of the service with the 60 s windows of the service bench full (issue 34).

    .venv/bin/python bench/recovery_bench.py [--records 300000] [--keys 10000] [--event-rate 2000] [--restarts 2]

1. starts a local Kafka broker (or uses ``--bootstrap-servers``) and produces a backlog with
   ``bench/service_bench.py``'s :func:`produce_backlog` (defaults: its 10,000 keys and 2,000 events per second of
   event time; 300,000 records span 150 s of event time, so every key's 60 s windows are full, ~12 records each);
2. **fresh start**: runs the service (``python -m service run``, JSON changelog, in its own process group) on a new
   checkpoint until it has committed the whole backlog, then feeds it live at ``--live-rate`` records/s whose
   event times continue the backlog's (:class:`LiveProducer` with ``event_base_ms``: the windows stay full);
3. **crash**: after ``--live-before-kill`` seconds, with a micro-batch in flight when one is seen within 10 s,
   SIGKILLs the whole process group (Python driver, driver JVM, Python daemon and workers) and restarts the
   service at once on the same checkpoint, ``--restarts`` times; the live producer keeps going throughout;
4. **exactness**: stops the producer, lets the service commit everything, stops it (SIGTERM), and compares the last
   value of every window in the changelog with a windowstore replay of every input partition
   (``tests/service/events.replay``, the e2e tests' reference): no window update may be lost.

For each start it prints the seconds from the process start (``Popen``) to: the driver JVM up (its gateway
answers: the driver's ``driver JVM up`` line), the SparkSession ready, the query started, the first micro-batch
started (its progress timestamp, logged by the driver) and the first changelog record written after the start,
as a consumer of the changelog topic sees it (a real consumer, subscribed before the start). Memory: RSS,
PSS and peak RSS of every process of the service's group, sampled with the windows full before each kill.

``--variant k=v,...`` runs every other restart (mirrored: base, variant, variant, base, ...) with those settings
added (``--variant-env NAME=value,...``: with that environment, e.g. another JDK's ``JAVA_HOME``), so one run
gives the ratio of a change; ``--against REV`` runs those restarts with the service of git
revision REV instead (a worktree of it; the checkpoint must be readable by both). CPU: the CPU seconds each process
of the service used from its start to the first output (the driver JVM's split into its JIT compiler threads, its
GC threads and the rest; a process that ended meanwhile counts in its parent's); the driver JVM's own counters of
its class loading up to the first output (classes loaded and how many came from a class-data archive, the
seconds spent defining, linking, verifying and initializing them, collections, safepoints:
:mod:`jvm_counters`). Prints a Markdown table (``--out FILE`` appends it).
"""

from __future__ import annotations

import argparse
import atexit
import calendar
import contextlib
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from jvm_counters import CLASS_LOADING, class_loading, counters_of  # noqa: E402
from service_bench import LiveProducer, _pairs, produce_backlog, read_to_end, report  # noqa: E402
from side_by_side import process_info, shares_parents_memory  # noqa: E402

AGGS = "count,sum:amount,max:amount"

#: the driver's log lines that mark a start-up's steps (service.spark.job, service.driver), in order
STEPS = {
    "JVM up": re.compile(r"driver JVM up in"),
    "SparkSession ready": re.compile(r"session ready in"),
    "query started": re.compile(r"service\.driver: streaming "),
}
FIRST_BATCH = re.compile(r"first micro-batch (\d+) started at (\S+) \(took (\S+) ms\) ?(.*)$")
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) ")


class ServiceExited(RuntimeError):
    """The service exited before its first output."""


@dataclass
class Start:
    """One start of the service: its label, when it began (epoch s) and what its log and the changelog said."""

    label: str
    began: float
    steps: dict[str, float] = field(default_factory=dict)  # step -> seconds after ``began``
    first_batch_ms: str = ""
    first_batch_parts: str = ""  # Spark's durations of the first micro-batch over 0.1 s
    first_batch_workers: str = ""  # the workers' timers of the first micro-batch (service.driver.worker_times)
    in_flight: bool | None = None  # the kill that ended it found a micro-batch in flight
    attempts: int = 1  # starts until one wrote output (a failed one is restarted at once, as a supervisor would)
    memory: list[dict] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds up to the first output, by process role
    classes: dict[str, float] = field(default_factory=dict)  # the driver JVM's class loading to the first output


def log_time(line: str) -> float | None:
    """Epoch seconds of a log line of the service (``asctime``: local time, ms)."""
    m = LOG_TIME.match(line)
    if not m:
        return None
    return time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) + int(m.group(2)) / 1000


def read_steps(log: Path, start: Start) -> None:
    """Fill ``start.steps`` from the service log of that start."""
    for line in log.read_text(errors="replace").splitlines():
        for step, pattern in STEPS.items():
            if step not in start.steps and pattern.search(line) and (t := log_time(line)) is not None:
                start.steps[step] = t - start.began
        m = FIRST_BATCH.search(line)
        if m and "first micro-batch started" not in start.steps:
            parts, _, workers = (m.group(4) or "").partition(" | ")
            iso = m.group(2).rstrip("Z")
            whole, _, frac = iso.partition(".")
            t = calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")) + float(f"0.{frac or 0}")
            start.steps["first micro-batch started"] = t - start.began
            start.first_batch_ms = m.group(3)
            start.first_batch_parts = parts.strip()
            start.first_batch_workers = workers.strip()


class FirstRecord(threading.Thread):
    """A consumer of ``topic`` from its end offsets now: the wall-clock time at which it receives the first record
    whose Kafka timestamp is at or after ``since`` (epoch s), i.e. the first one a start wrote."""

    def __init__(self, bootstrap: str, topic: str, since: float) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Consumer, TopicPartition

        self.since_ms = int(since * 1000)
        self.at: float | None = None
        self.done = threading.Event()
        self.c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"recovery-{time.monotonic_ns()}",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 10,
            }
        )
        parts = self.c.list_topics(topic, timeout=30).topics[topic].partitions
        ends = [TopicPartition(topic, p, self.c.get_watermark_offsets(TopicPartition(topic, p), 30)[1]) for p in parts]
        self.c.assign(ends)

    def run(self) -> None:
        try:
            while not self.done.is_set() and self.at is None:
                for m in self.c.consume(1000, timeout=0.05):
                    if not m.error() and m.timestamp()[1] >= self.since_ms:
                        self.at = time.time()
                        break
        finally:
            self.c.close()


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"recovery-{time.monotonic_ns()}"})
    try:
        parts = c.list_topics(topic, timeout=30).topics[topic].partitions
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), 30)[1] for p in parts}
    finally:
        c.close()


def _proc_status(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        k, _, v = line.partition(":")
        if k in ("VmRSS", "VmHWM"):
            out[k] = int(v.split()[0])
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                out["Pss"] = int(line.split()[1])
    except OSError:
        pass
    return out


def process_tree(root: int) -> dict[int, tuple[int, str]]:
    """``{pid: (parent pid, command line)}`` of ``root`` and all its descendants. pyspark's Python daemon puts
    itself and its workers in a process group of their own, so the service's group alone misses them."""
    procs: dict[int, tuple[int, str]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        if cmd:  # not a zombie
            procs[int(d.name)] = (ppid, cmd)
    tree, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid in procs:
            tree[pid] = procs[pid]
            todo += [c for c, (pp, _cmd) in procs.items() if pp == pid]
    return tree


def kill_tree(root: int) -> int:
    """SIGKILL ``root`` and every descendant (driver, its JVM, the Python daemon and workers) at once."""
    tree = process_tree(root)
    for pid in tree:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return len(tree)


def process_memory(root: int) -> list[dict]:
    """RSS, PSS and peak RSS (MiB) of every process of the service (``root`` and its descendants), with its role."""
    tree = process_tree(root)
    jvms = {pid for pid, (_pp, cmd) in tree.items() if "SparkSubmit" in cmd}
    out = []
    for pid, (ppid, cmd) in sorted(tree.items()):
        child, jvm = (process_info(pid), process_info(ppid)) if ppid in jvms else (None, None)
        if child and jvm and shares_parents_memory(child[1], jvm[1]):
            continue  # a command the JVM just spawned, still in the JVM's memory: counted once
        try:
            st = _proc_status(pid)
        except OSError:
            continue
        if pid == root:
            role = "Python driver"
        elif pid in jvms:
            role = "driver JVM"
        elif "daemon" in cmd:
            role = "Python daemon" if ppid in jvms else "Python worker"
        else:
            role = "other: " + cmd[:40]
        out.append(
            {
                "role": role,
                "pid": pid,
                "rss": st.get("VmRSS", 0) / 1024,
                "pss": st.get("Pss", 0) / 1024,
                "hwm": st.get("VmHWM", 0) / 1024,
            }
        )
    return out


def batch_in_flight(ck: Path) -> bool:
    """A micro-batch's offsets are logged and it is not committed yet."""

    def last(sub: str) -> int:
        d = ck / sub
        return max((int(p.name) for p in d.iterdir() if p.name.isdigit()), default=-1) if d.exists() else -1

    return last("offsets") > last("commits")


_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(stat: str, children: bool) -> float:
    """utime + stime (+ the reaped children's cutime + cstime) of a /proc stat line, in seconds."""
    f = stat.rsplit(")", 1)[1].split()
    return sum(int(x) for x in (f[11:15] if children else f[11:13])) / _TICK


def _jvm_thread_group(name: str) -> str:
    if name.startswith(("C1 CompilerThre", "C2 CompilerThre")):
        return "driver JVM: JIT compiler threads"
    if name.startswith(("GC Thread", "G1 ")):
        return "driver JVM: GC threads"
    return "driver JVM: other threads (+ ended children)"


def process_cpu(root: int) -> dict[str, float]:
    """CPU seconds every process of the service (``root`` and its descendants) has used so far, by role
    (:func:`process_memory`'s), the driver JVM's by thread group; ended children count in their parent's."""
    tree = process_tree(root)
    jvms = {pid for pid, (_pp, cmd) in tree.items() if "SparkSubmit" in cmd}
    out: dict[str, float] = {}
    for pid, (_ppid, cmd) in tree.items():
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            if pid in jvms:
                whole = _cpu_seconds(stat, True)
                threads = 0.0
                for t in Path(f"/proc/{pid}/task").iterdir():
                    tstat = (t / "stat").read_text()
                    name = tstat[tstat.index("(") + 1 : tstat.rindex(")")]
                    used = _cpu_seconds(tstat, False)
                    if (group := _jvm_thread_group(name)) != "driver JVM: other threads (+ ended children)":
                        out[group] = out.get(group, 0.0) + used
                        threads += used
                rest = "driver JVM: other threads (+ ended children)"
                out[rest] = out.get(rest, 0.0) + whole - threads
                continue
            used = _cpu_seconds(stat, True)
        except (OSError, ValueError):
            continue  # gone meanwhile
        if pid == root:
            role = "Python driver"
        elif "daemon" in cmd:
            role = "Python daemon + workers"
        else:
            role = "other: " + cmd[:40]
        out[role] = out.get(role, 0.0) + used
    return out


def jvm_class_loading(root: int) -> dict[str, float]:
    """The driver JVM's class-loading counters so far (:func:`jvm_counters.class_loading`; {} without them)."""
    for pid, (_ppid, cmd) in process_tree(root).items():
        if "SparkSubmit" in cmd:
            return class_loading(counters_of(pid) or {})
    return {}


def class_table(starts: list[Start]) -> list[str]:
    """The driver JVM's class loading up to the first output, from its own counters (:mod:`jvm_counters`)."""
    if not any(s.classes for s in starts):
        return []
    lines = [
        "",
        "| driver JVM to first output (its own counters; s: elapsed, each step without the loading nested in it) | "
        + " | ".join(s.label for s in starts)
        + " |",
        "|---|" + "---:|" * len(starts),
    ]
    for label in CLASS_LOADING:
        cells = [s.classes.get(label) for s in starts]
        lines.append(
            f"| {label} | "
            + " | ".join("-" if c is None else (f"{c:.1f}" if label.endswith("(s)") else f"{c:,.0f}") for c in cells)
            + " |"
        )
    return lines


def cpu_table(starts: list[Start]) -> list[str]:
    roles = list(dict.fromkeys(r for s in starts for r in s.cpu))
    lines = [
        "",
        "| CPU seconds from process start to first output | " + " | ".join(s.label for s in starts) + " |",
        "|---|" + "---:|" * len(starts),
    ]
    for role in roles:
        lines.append(f"| {role} | " + " | ".join(f"{s.cpu.get(role, 0.0):.1f}" for s in starts) + " |")
    lines.append("| **all** | " + " | ".join(f"{sum(s.cpu.values()):.1f}" for s in starts) + " |")
    return lines


def keep_logs(work: Path, to: Path) -> None:
    """Copy the service's logs of the run (``*.log`` in ``work``) to ``to``."""
    to.mkdir(parents=True, exist_ok=True)
    for log in work.glob("*.log"):
        shutil.copy2(log, to / log.name)
    print(f"service logs kept in {to}", flush=True)


def jfr_dump(svc: Any, to: Path, label: str) -> None:
    """Dump the flight recording of the start's driver JVM (running one) into ``to`` with ``jcmd``."""
    to.mkdir(parents=True, exist_ok=True)
    jvms = [pid for pid, (_pp, cmd) in process_tree(svc.proc.pid).items() if "SparkSubmit" in cmd]
    for pid in jvms:
        out = to / (re.sub(r"\W+", "-", label) + f"-{pid}.jfr")
        done = subprocess.run(["jcmd", str(pid), "JFR.dump", f"filename={out}"], capture_output=True, text=True)
        print(f"{label}: JFR dump {out}: {done.stdout.strip().splitlines()[-1:]}", flush=True)


def py_spy(svc: Any, to: Path, label: str) -> subprocess.Popen[bytes]:
    """py-spy recording the start's Python driver (``PY_SPY``: its command, default ``py-spy``) until SIGINT."""
    to.mkdir(parents=True, exist_ok=True)
    out = to / (re.sub(r"\W+", "-", label) + ".svg")
    cmd = [*shlex.split(os.environ.get("PY_SPY", "py-spy")), "record", "-p", str(svc.proc.pid), "-r", "50"]
    return subprocess.Popen([*cmd, "-o", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def memory_table(starts: list[Start]) -> list[str]:
    lines = [
        "",
        "| sample (windows full) | process | count | RSS MiB | PSS MiB | peak RSS MiB |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for s in starts:
        if not s.memory:
            continue
        roles: dict[str, list[dict]] = {}
        for p in s.memory:
            roles.setdefault(p["role"], []).append(p)
        for role, ps in roles.items():
            lines.append(
                f"| {s.label} | {role} | {len(ps)} | {sum(p['rss'] for p in ps):.0f} | "
                f"{sum(p['pss'] for p in ps):.0f} | {sum(p['hwm'] for p in ps):.0f} |"
            )
        lines.append(
            f"| {s.label} | **all** | {len(s.memory)} | {sum(p['rss'] for p in s.memory):.0f} | "
            f"{sum(p['pss'] for p in s.memory):.0f} | {sum(p['hwm'] for p in s.memory):.0f} |"
        )
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap-servers", default="")
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--event-rate", type=float, default=2000.0, help="events per second of event time")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--td", type=int, default=60_000)
    ap.add_argument("--grace", type=int, default=10_000)
    ap.add_argument("--ooo", type=float, default=0.05)
    ap.add_argument("--batch", type=int, default=50_000, help="the service's max_offsets_per_trigger")
    ap.add_argument("--state-partitions", type=int, default=2)
    ap.add_argument("--live-rate", type=float, default=1000.0, help="records/s fed while the service runs")
    ap.add_argument("--live-before-kill", type=float, default=20.0, help="seconds of live input before each kill")
    ap.add_argument("--restarts", type=int, default=2, help="SIGKILL + restart rounds")
    ap.add_argument("--service-settings", default="", help="extra settings of every start, name=value,...")
    ap.add_argument("--variant", default="", help="settings added to every other restart (mirrored order)")
    ap.add_argument("--against", default="", help="git revision whose service runs every other restart instead")
    ap.add_argument(
        "--variant-env",
        default="",
        help="environment of every other restart (mirrored order), NAME=value,...: e.g. JAVA_HOME=/path/to/a/jdk",
    )
    ap.add_argument("--no-check", action="store_true", help="skip the exactness check (reads every update)")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--keep-logs", default="", help="copy the service's logs (one per start) to this folder")
    ap.add_argument(
        "--jfr-dump",
        default="",
        help="folder: after each start's first output, dump the driver JVM's flight recording there with jcmd "
        "(the JVM must run one: PYSPARK_SUBMIT_ARGS with -XX:StartFlightRecording; a SIGKILLed JVM writes none)",
    )
    ap.add_argument(
        "--py-spy",
        default="",
        help="folder: record the Python driver of each start with py-spy (PY_SPY: its command) from its start to "
        "its first output, one flame graph per start",
    )
    ap.add_argument("--out", default="")
    args = ap.parse_args()

    from connectors.admin import TopicSpec, ensure_topics
    from tests.service.events import Event, changelog_final, replay
    from tests.service.harness import ServiceProcess, wait_until_committed

    load_before = f"{os.getloadavg()[0]:.1f}"
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    work = Path(tempfile.mkdtemp(prefix="sw-recovery-"))
    atexit.register(shutil.rmtree, work, ignore_errors=True)
    if args.keep_logs:  # registered after the removal: runs before it
        atexit.register(keep_logs, work, Path(args.keep_logs))
    bootstrap = args.bootstrap_servers
    if not bootstrap:
        from devtools.local_broker import LocalKafkaBroker

        broker = LocalKafkaBroker(0, data_dir=work / "kafka")
        broker.start()
        atexit.register(broker.stop)
        bootstrap = broker.bootstrap_servers
    run = f"r{int(time.time())}"
    topic, out = f"{run}-in", f"{run}-out"
    ensure_topics(
        {"bootstrap.servers": bootstrap},
        [
            TopicSpec(topic, args.partitions, config={"retention.ms": "-1"}),
            TopicSpec(out, args.partitions, config={"cleanup.policy": "compact"}),
        ],
    )
    base = int(time.time() * 1000) - 3_600_000  # event time in the past: the live part continues it
    t = time.monotonic()
    produce_backlog(bootstrap, topic, args.records, args.keys, args.event_rate, args.grace, args.ooo, base=base)
    print(f"produced {args.records} records in {time.monotonic() - t:.1f}s", flush=True)

    ck = work / "checkpoint"
    flags = {
        "bootstrap_servers": bootstrap,
        "input_topics": topic,
        "changelog_topic": out,
        "late_topic": f"{run}-late",
        "dead_letter_topic": f"{run}-dlq",
        "changelog_format": "json",
        "changelog_key_format": "json",
        "aggregations": AGGS,
        "time_difference": f"{args.td}ms",
        "grace": f"{args.grace}ms",
        "checkpoint_dir": str(ck),
        "state_partitions": str(args.state_partitions),
        "max_offsets_per_trigger": str(args.batch),
        "metrics_port": "0",
        "app_name": run,
        **_pairs(args.service_settings),
    }
    variant = _pairs(args.variant)
    variant_env = _pairs(args.variant_env)
    tree: Path | None = None
    if args.against:
        from revision_tree import revision_tree

        trees = contextlib.ExitStack()
        atexit.register(trees.close)  # the worktree removed at exit
        tree = trees.enter_context(revision_tree(args.against, "recovery-bench-"))

    def service(label: str, with_variant: bool, attempt: int) -> ServiceProcess:
        settings = {**flags, **(variant if with_variant else {})}
        argv = [f"--{k.replace('_', '-')}={v}" for k, v in settings.items()]  # '=': a value may start with '-'
        log = work / (re.sub(r"\W+", "-", label) + f"-{attempt}.log")
        env = variant_env if with_variant else None
        return ServiceProcess(argv, log, env=env, cwd=tree if with_variant else None)

    starts: list[Start] = []

    def start(label: str, with_variant: bool = False) -> tuple[ServiceProcess, Start]:
        """Start the service until a start writes output; a start that exits before (the machine's load can
        make Spark give up on a Python worker) is started again at once, timed from the first attempt."""
        s = Start(label, time.time())
        starts.append(s)
        for attempt in range(1, 4):
            svc = service(label, with_variant, attempt)
            first = FirstRecord(bootstrap, out, s.began)
            first.start()
            if attempt == 1:
                s.began = time.time()
            s.attempts = attempt
            svc.start()
            spy = py_spy(svc, Path(args.py_spy), label) if args.py_spy else None
            try:
                settle(svc, s, first)
                if spy is not None:
                    spy.send_signal(signal.SIGINT)  # py-spy writes its flame graph on SIGINT
                    spy.wait(timeout=60)
                if args.jfr_dump:
                    jfr_dump(svc, Path(args.jfr_dump), label)
                return svc, s
            except ServiceExited as e:
                first.done.set()
                print(f"{label}: attempt {attempt} exited before its first output: {e}", flush=True)
        raise RuntimeError(f"{label}: three starts exited before their first output")

    def settle(svc: ServiceProcess, s: Start, first: FirstRecord) -> None:
        """Wait for the start's first changelog record, then read its steps from the log."""
        deadline = time.monotonic() + args.timeout
        while first.at is None:
            if not svc.alive():
                raise ServiceExited(svc.tail(5))
            if time.monotonic() > deadline:
                raise RuntimeError(f"{s.label}: no changelog record within {args.timeout} s:\n{svc.tail()}")
            time.sleep(0.05)
        s.steps["first changelog record"] = first.at - s.began
        s.cpu = process_cpu(svc.proc.pid)  # type: ignore[union-attr]
        s.classes = jvm_class_loading(svc.proc.pid)  # type: ignore[union-attr]
        while time.monotonic() < deadline and svc.alive():  # the driver logs the first micro-batch once it ends
            read_steps(svc.log, s)
            if "first micro-batch started" in s.steps:
                break
            time.sleep(0.5)
        print(f"{s.label}: {s.steps}", flush=True)

    def crash(svc: ServiceProcess, s: Start) -> None:
        time.sleep(args.live_before_kill)
        s.memory = process_memory(svc.proc.pid)  # type: ignore[union-attr]
        deadline = time.monotonic() + 10
        while not batch_in_flight(ck) and time.monotonic() < deadline:
            time.sleep(0.02)
        s.in_flight = batch_in_flight(ck)
        kill_tree(svc.proc.pid)  # type: ignore[union-attr]
        svc.kill()  # reaps the driver (and SIGKILLs its group, gone already)

    svc, s = start("fresh start")
    wait_until_committed(ck, topic, end_offsets(bootstrap, topic), svc, timeout=args.timeout)
    print(f"backlog committed {time.time() - s.began:.1f} s after the start", flush=True)
    live = LiveProducer(
        bootstrap,
        topic,
        args.live_rate,
        args.keys,
        args.grace,
        args.ooo,
        10 * args.timeout,
        event_base_ms=base + int(args.records * 1000 / args.event_rate),
        event_rate=args.event_rate,
    )
    live.start()
    for i in range(args.restarts):
        crash(svc, s)
        with_variant = bool(variant or variant_env or tree) and i % 4 in (1, 2)
        svc, s = start(f"restart {i + 1}" + (" (variant)" if with_variant else ""), with_variant)
    time.sleep(args.live_before_kill)
    s.memory = process_memory(svc.proc.pid)  # type: ignore[union-attr]
    live.finish()
    live.join()
    wait_until_committed(ck, topic, end_offsets(bootstrap, topic), svc, timeout=args.timeout)
    rc = svc.stop()
    if rc != 0:
        raise RuntimeError(f"the last start ended with {rc}:\n{svc.tail()}")

    check = "not checked (--no-check)"
    if not args.no_check:
        t = time.monotonic()
        events = [Event(m.partition(), m.key(), m.value(), m.timestamp()[1]) for m in read_to_end(bootstrap, topic)]
        exp = replay(events, td=args.td, grace=args.grace, aggregations=AGGS, emit="update", sequence=False)
        got = changelog_final((m.key(), m.value()) for m in read_to_end(bootstrap, out))
        lost = sum(1 for w in exp.final if w not in got)
        wrong = sum(1 for w, v in exp.final.items() if w in got and got[w] != v)
        extra = sum(1 for w in got if w not in exp.final)
        check = (
            f"{len(events)} input records, {len(exp.final)} windows: {lost} lost, {wrong} wrong, {extra} "
            f"unexpected ({'exact' if not (lost or wrong or extra) else 'NOT EXACT'}; checked in "
            f"{time.monotonic() - t:.0f} s)"
        )
        print(check, flush=True)

    steps = [*STEPS, "first micro-batch started", "first changelog record"]
    lines = [
        f"\n### {time.strftime('%Y-%m-%d %H:%M')} - {args.records} records backlog, {args.keys} keys, event rate "
        f"{args.event_rate:.0f}/s, td {args.td} ms, grace {args.grace} ms, {args.partitions} input partitions, "
        f"{args.state_partitions} state partitions, batch {args.batch}, live {args.live_rate:.0f} records/s, "
        f"{os.cpu_count()} cores, load average {load_before} before / {os.getloadavg()[0]:.1f} after"
        + (f"; settings {args.service_settings}" if args.service_settings else "")
        + (f"; variant {args.variant}" if args.variant else "")
        + (f"; variant: the service of {args.against}" if args.against else "")
        + (f"; variant environment {args.variant_env}" if args.variant_env else "")
        + "\n",
        "| seconds from process start to | " + " | ".join(s.label for s in starts) + " |",
        "|---|" + "---:|" * len(starts),
    ]
    for step in steps:
        lines.append(f"| {step} | " + " | ".join(f"{s.steps.get(step, float('nan')):.1f}" for s in starts) + " |")
    lines.append("| first micro-batch took (ms) | " + " | ".join(s.first_batch_ms for s in starts) + " |")
    lines.append("| its parts (Spark's durations) | " + " | ".join(s.first_batch_parts for s in starts) + " |")
    lines.append("| its workers (sums over its tasks) | " + " | ".join(s.first_batch_workers for s in starts) + " |")
    lines.append(
        "| starts until output (a failed start restarted at once) | "
        + " | ".join(str(s.attempts) for s in starts)
        + " |"
    )
    lines.append(
        "| killed with a micro-batch in flight | "
        + " | ".join({True: "yes", False: "no", None: "-"}[s.in_flight] for s in starts)
        + " |"
    )
    restarts = [s for s in starts if s.label.startswith("restart")]
    for name, group in (
        ("base", [s for s in restarts if "variant" not in s.label]),
        ("variant", [s for s in restarts if "variant" in s.label]),
    ):
        firsts = [s.steps["first changelog record"] for s in group]
        if firsts:
            lines.append(
                f"\nrestart to first changelog record ({name}): median {statistics.median(firsts):.1f} s "
                f"(each: {', '.join(f'{x:.1f}' for x in firsts)})"
            )
    lines += cpu_table(starts)
    lines += class_table(starts)
    lines += memory_table(starts)
    lines.append(f"\noutput after the restarts: {check}")
    report(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
