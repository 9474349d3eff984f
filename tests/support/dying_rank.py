"""A rank killed on purpose, and when: the fault tests' victim, and the moment the survivors'
detection is measured from."""
import os
import signal
import threading
import time


def die_now(stamp_path):
    """Writes when this rank dies (time.monotonic: one clock for every process of a host),
    then kills it with SIGKILL."""
    with open(stamp_path, "w") as f:
        f.write(repr(time.monotonic()))
    os.kill(os.getpid(), signal.SIGKILL)


def die_soon(stamp_path, delay):
    """die_now after `delay` seconds, from a thread of its own: the rank goes on meanwhile."""
    def die():
        time.sleep(delay)
        die_now(stamp_path)

    threading.Thread(target=die, daemon=True).start()


def run_with_a_death(world, case, *args, dying_rank, stamp_path, timeout=120.0):
    """Runs case(*args, stamp_path) on every rank of `world`, a world of its own (killed
    after), in which `dying_rank` dies; returns the survivors' results by rank and when it
    died."""
    try:
        results = world.run(case, *args, str(stamp_path), may_die=(dying_rank,), timeout=timeout)
    finally:
        world.kill()
    survivors = {rank: result for rank, result in enumerate(results) if rank != dying_rank}
    return survivors, float(stamp_path.read_text())
