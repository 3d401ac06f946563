# SPDX-License-Identifier: Apache-2.0
# What one durable write costs on the store's disk, by how the file is written: write + fdatasync
# appended to a growing file (what RocksDB's WAL does: the file's size changes, so the sync must
# also write the inode), appended inside space fallocate'd with FALLOC_FL_KEEP_SIZE (what RocksDB
# preallocates: the size still changes and the extents turn from unwritten to written), and
# written over blocks already written and synced (the size and the extents stay as they are, so
# only the data goes to the disk). Rounds alternate the variants; medians of the per-round p50s.
# --gaps-us pauses before each write: a program that syncs now and then (the store at one
# connection syncs every ~0.3 ms) meets a device idle since its last write, which back-to-back
# writes never do.
# Usage: python3 bench/http/sync_probe.py [--dir DIR] [--writes 300] [--rounds 3] [--sizes 64,1200]
#   [--gaps-us 0,100,300]
import argparse
import ctypes
import os
import statistics
import tempfile
import time

FALLOC_FL_KEEP_SIZE = 1


def prepare(path, variant, room):
    if variant == "overwrite":
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        os.write(fd, b"\0" * room)
        os.fsync(fd)
        os.lseek(fd, 0, os.SEEK_SET)
        return fd
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
    if variant == "fallocate":
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.fallocate(fd, FALLOC_FL_KEEP_SIZE, ctypes.c_long(0), ctypes.c_long(room)) != 0:
            raise OSError(ctypes.get_errno(), "fallocate")
    return fd


def p50_ms(directory, variant, size, writes, gap_s):
    path = os.path.join(directory, "sync.probe")
    fd = prepare(path, variant, size * writes + 4096)
    buf = b"x" * size
    samples = []
    try:
        for _ in range(writes):
            if gap_s:
                time.sleep(gap_s)
            t = time.perf_counter()
            os.write(fd, buf)
            os.fdatasync(fd)
            samples.append((time.perf_counter() - t) * 1e3)
    finally:
        os.close(fd)
        os.unlink(path)
    return statistics.median(samples)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--dir", help="a directory on the disk to probe (default: a temp dir)")
    p.add_argument("--writes", type=int, default=300)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--sizes", default="64,1200", help="bytes per write, comma-separated")
    p.add_argument("--gaps-us", default="0",
                   help="idle microseconds before each write (time.sleep, which overshoots by "
                        "tens of microseconds), comma-separated")
    args = p.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    gaps = [int(g) for g in args.gaps_us.split(",")]
    variants = [(v, g) for v in ["append", "fallocate", "overwrite"] for g in gaps]
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        got = {(v, s): [] for v in variants for s in sizes}
        for r in range(args.rounds):
            for v in variants if r % 2 == 0 else reversed(variants):
                for s in sizes:
                    got[(v, s)].append(p50_ms(d, v[0], s, args.writes, v[1] / 1e6))
    print("| write + fdatasync | " + " | ".join("%d B, ms (p50)" % s for s in sizes) + " |")
    print("|---|" + "---:|" * len(sizes))
    for v in variants:
        cells = ["%.3f" % statistics.median(got[(v, s)]) for s in sizes]
        name = v[0] if len(gaps) == 1 and not gaps[0] else "%s, %d us idle before" % v
        print("| %s | %s |" % (name, " | ".join(cells)))
    print("\n%d rounds x %d writes per cell, median of the rounds' p50s, in %s" %
          (args.rounds, args.writes, args.dir or tempfile.gettempdir()))


if __name__ == "__main__":
    main()
