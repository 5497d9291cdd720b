"""Driver of tests/app/dask_test.sh (a file, not stdin: Dask's worker processes re-import
__main__). Usage: dask_test.py MNIST_DDP DATA_DIR TOOLS_DIR WORK_DIR"""
import sys
import time

sys.path.insert(0, sys.argv[3])
import minidl_dask  # noqa: E402
from distributed import Client, LocalCluster  # noqa: E402


def fail(msg):
    print("FAIL:", msg, file=sys.stderr)
    sys.exit(1)


def main():
    bin_, data, tools, work = sys.argv[1:5]
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                           dashboard_address=None)
    client = Client(cluster)
    records = []
    argv = [bin_, "--data", data, "--threads", "1", "--workers", "1", "--epochs", "1",
            "--max-steps", "6", "--test-batch-size", "500", "--seed", "3"]
    t0 = time.monotonic()
    results = minidl_dask.run(client, argv, nprocs=2, log_json=work + "/metrics-{rank}.jsonl",
                              on_record=lambda rank, rec: records.append((rank, rec)))
    print(f"2 ranks on Dask: {time.monotonic() - t0:.1f} s")
    if sorted(r["rank"] for r in results) != [0, 1] or any(r["returncode"] for r in results):
        fail(f"ranks did not both finish: {results}")
    if not any(r == 0 and rec.get("stream") == "stdout" for r, rec in records):
        fail("no output streamed from rank 0")
    for rank in (0, 1):
        metrics = [rec for r, rec in records if r == rank and "stream" not in rec]
        events = sorted({rec.get("event") for rec in metrics})
        if "epoch" not in events or "summary" not in events:
            fail(f"rank {rank}: no epoch and summary records among its streamed metrics: {metrics}")
        print(f"rank {rank}: streamed metrics events {events}")
    acc = [rec["test_accuracy"] for r, rec in records if rec.get("event") == "summary"]
    if len(acc) != 2 or acc[0] != acc[1]:
        fail(f"the ranks disagree on the test accuracy: {acc}")

    # Fail-fast: rank 1 exits 3 at once; rank 0 (waiting for its peer) is stopped, run() raises.
    script = f'if [ "$RANK" = 1 ]; then echo "rank 1 gives up"; exit 3; fi; exec "{bin_}" "$@"'
    t0 = time.monotonic()
    try:
        minidl_dask.run(client, ["bash", "-c", script, "rank"] + argv[1:], nprocs=2)
        fail("run() returned although rank 1 failed")
    except minidl_dask.RankFailed as e:
        msg = str(e)
        if "rank 1 exited with code 3" not in msg or "rank 1 gives up" not in msg:
            fail(f"unexpected failure message: {msg}")
    took = time.monotonic() - t0
    if took > 60:
        fail(f"the failed job took {took:.0f} s to stop")
    print(f"fail-fast: RankFailed after {took:.1f} s")
    client.close()
    cluster.close()
    print("dask OK")


if __name__ == "__main__":
    main()
