"""Launches minidl DDP ranks on a Dask cluster (what dask-pytorch-ddp does for PyTorch).

    from distributed import Client
    import minidl_dask
    client = Client("tcp://scheduler:8786")
    results = minidl_dask.run(client, ["build/apps/mnist_ddp", "--epochs", "1"], nprocs=2,
                              log_json="/tmp/run/metrics-{rank}.jsonl",
                              on_record=lambda rank, rec: print(rank, rec))

One rank per Dask worker (the first `nprocs` workers, sorted by address), each a subprocess with
RANK / WORLD_SIZE / LOCAL_RANK / LOCAL_WORLD_SIZE / MASTER_ADDR / MASTER_PORT set (the address is
the first worker's host, the port a free one picked there). A worker whose CUDA_VISIBLE_DEVICES
lists GPUs gives its rank exactly one: the first listed (dask-cuda rotates the list per worker,
so the first is that worker's own GPU; two ranks never share one). With `log_json` (a path with
{rank}), every rank writes its own JSON-lines metrics (minidl's apps substitute the rank) and the
records stream back to `on_record(rank, record)` while the job runs (dask-pytorch-ddp's results
handler); every
stdout line of every rank streams back as {"stream": "stdout", "line": ...}. When one rank fails
every other rank is stopped, and `run` raises RankFailed naming the rank, its exit code and the
tail of its output. Returns one dict per rank: rank, host, returncode, last lines of output.
Needs the `distributed` package (Debian: python3-distributed) on the client and the workers.
"""

import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid

from distributed import Event, Queue, get_worker

POLL_S = 0.2
KILL_AFTER_S = 5  # SIGTERM, then SIGKILL after this long


class RankFailed(RuntimeError):
    """A rank exited non-zero (or could not start); the other ranks were stopped."""


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _worker_gpus():
    return os.environ.get("CUDA_VISIBLE_DEVICES", "")


def _host_of(address):
    # "tcp://10.0.0.5:40123" or "inproc://..." -> "10.0.0.5"
    rest = address.split("://", 1)[-1]
    return rest.rsplit(":", 1)[0].strip("[]")


def _tail(path, pos, emit):
    """Emits the complete JSON lines appended to `path` since byte `pos`; returns the new pos."""
    try:
        with open(path, "rb") as f:
            f.seek(pos)
            data = f.read()
    except FileNotFoundError:
        return pos
    end = data.rfind(b"\n") + 1
    for line in data[:end].splitlines():
        try:
            emit(json.loads(line))
        except ValueError:
            emit({"stream": "log_json", "line": line.decode(errors="replace")})
    return pos + end


def _run_rank(argv, env, rank, queue_name, stop_name, log_json_path):
    """Runs on a worker: one rank as a subprocess, streaming its output and metrics."""
    queue, stop = Queue(queue_name), Event(stop_name)
    full_env = dict(os.environ)
    full_env.update(env)
    try:
        proc = subprocess.Popen(argv, env=full_env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)
    except OSError as e:
        stop.set()
        return {"rank": rank, "returncode": 127, "tail": [f"cannot start {argv[0]}: {e}"]}
    tail = []

    def pump():
        for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            tail.append(line)
            del tail[:-20]
            queue.put((rank, {"stream": "stdout", "line": line}))

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    pos, stopped = 0, None
    while proc.poll() is None:
        if log_json_path:
            pos = _tail(log_json_path, pos, lambda rec: queue.put((rank, rec)))
        if stopped is None and stop.is_set():
            proc.terminate()  # another rank failed
            stopped = time.monotonic()
        elif stopped is not None and time.monotonic() - stopped > KILL_AFTER_S:
            proc.kill()  # e.g. blocked in a rendezvous that cannot complete
        time.sleep(POLL_S)
    stopped = stopped is not None
    reader.join(timeout=5)
    if log_json_path:
        _tail(log_json_path, pos, lambda rec: queue.put((rank, rec)))
    if proc.returncode != 0 and not stopped:
        stop.set()
    return {"rank": rank, "host": _host_of(get_worker().address), "returncode": proc.returncode,
            "stopped": stopped, "tail": tail}


def run(client, argv, nprocs=None, env=None, log_json=None, on_record=None, gpus=None,
        timeout=None, worker_timeout=60):
    """Runs `argv` as `nprocs` DDP ranks, one per Dask worker; see the module docstring.

    env: extra variables for every rank. log_json: a path template with {rank} (appended to argv
    as --log-json). on_record(rank, record): called on the client for every streamed record.
    gpus: None gives a rank one GPU where its worker lists some; True always sets a single
    CUDA_VISIBLE_DEVICES (the worker's first, else LOCAL_RANK); False leaves it alone.
    timeout: seconds for the whole job (None: no limit). worker_timeout: seconds to wait for
    `nprocs` workers to join."""
    if nprocs:  # workers of a cluster that is still starting: wait for them a while
        try:
            client.wait_for_workers(nprocs, timeout=worker_timeout)
        except TimeoutError:
            pass  # reported below with the count
    workers = sorted(client.scheduler_info()["workers"])
    nprocs = nprocs or len(workers)
    if nprocs > len(workers):
        raise ValueError(f"minidl_dask.run: {nprocs} ranks need {nprocs} Dask workers, the "
                         f"cluster has {len(workers)} (one rank per worker)")
    workers = workers[:nprocs]
    hosts = [_host_of(w) for w in workers]
    master_port = client.submit(_free_port, workers=[workers[0]], pure=False).result()
    worker_gpus = client.run(_worker_gpus, workers=workers)
    run_id = uuid.uuid4().hex[:8]
    queue_name, stop_name = f"minidl-{run_id}-records", f"minidl-{run_id}-stop"
    queue, stop = Queue(queue_name, client=client), Event(stop_name, client=client)
    futures = []
    for rank, worker in enumerate(workers):
        local_rank = hosts[:rank].count(hosts[rank])
        rank_env = {
            "RANK": str(rank), "WORLD_SIZE": str(nprocs), "LOCAL_RANK": str(local_rank),
            "LOCAL_WORLD_SIZE": str(hosts.count(hosts[rank])), "MASTER_ADDR": hosts[0],
            "MASTER_PORT": str(master_port), **(env or {})}
        listed = [g for g in worker_gpus.get(worker, "").split(",") if g.strip()]
        if gpus is not False and listed:
            rank_env["CUDA_VISIBLE_DEVICES"] = listed[0].strip()
        elif gpus:
            rank_env["CUDA_VISIBLE_DEVICES"] = str(local_rank)
        # The app substitutes {rank} itself (apps/common/metrics.h): every rank its own file.
        path = log_json.replace("{rank}", str(rank)) if log_json else None
        rank_argv = list(argv) + (["--log-json", log_json] if log_json else [])
        futures.append(client.submit(_run_rank, rank_argv, rank_env, rank, queue_name, stop_name,
                                     path, workers=[worker], pure=False,
                                     key=f"minidl-rank-{rank}-{run_id}"))
    deadline = None if timeout is None else time.monotonic() + timeout

    def drain():
        while queue.qsize() > 0:
            rank, rec = queue.get()
            if on_record:
                on_record(rank, rec)

    try:
        while not all(f.done() for f in futures):
            drain()
            if deadline is not None and time.monotonic() > deadline:
                stop.set()
                raise TimeoutError(f"minidl_dask.run: the job exceeded {timeout} s; every rank "
                                   "was stopped")
            time.sleep(POLL_S)
        results = [f.result() for f in futures]
        drain()
    finally:
        if not all(f.done() for f in futures):
            stop.set()
    failed = [r for r in results if r["returncode"] != 0 and not r.get("stopped")]
    if failed:
        r = failed[0]
        raise RankFailed(f"minidl_dask.run: rank {r['rank']} exited with code {r['returncode']}"
                         f"; the other ranks were stopped. Its last output:\n"
                         + "\n".join(r["tail"]))
    return results


def main():
    """python3 tools/minidl_dask.py --scheduler ADDR|--local N -- APP ARGS... (a smoke tool)."""
    import argparse
    from distributed import Client, LocalCluster
    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("--scheduler", help="address of a running Dask scheduler")
    p.add_argument("--local", type=int, help="start a LocalCluster with this many workers")
    p.add_argument("--nprocs", type=int)
    p.add_argument("--log-json", help="per-rank metrics path template with {rank}")
    p.add_argument("argv", nargs=argparse.REMAINDER)
    a = p.parse_args()
    argv = a.argv[1:] if a.argv[:1] == ["--"] else a.argv
    if not argv or bool(a.scheduler) == bool(a.local):
        p.error("give the app's command after --, and one of --scheduler or --local")
    cluster = None if a.scheduler else LocalCluster(n_workers=a.local, threads_per_worker=1)
    with Client(a.scheduler or cluster) as client:
        def show(rank, rec):
            if rec.get("stream") == "stdout":
                print(f"[rank {rank}] {rec['line']}")
            else:
                print(f"[rank {rank} metrics] {json.dumps(rec)}")
        try:
            for r in run(client, argv, a.nprocs, log_json=a.log_json, on_record=show):
                print(f"rank {r['rank']} on {r['host']}: exit {r['returncode']}")
        except RankFailed as e:
            print(e, file=sys.stderr)
            return 1
    if cluster:
        cluster.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
