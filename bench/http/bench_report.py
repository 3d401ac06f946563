# SPDX-License-Identifier: Apache-2.0
# The Markdown report of scripts/bench http (bench/http/http_bench.py).
import os
import statistics
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIOS = ["passthrough", "fresh", "replay", "conflict"]
MIB = 1024.0
LOG_SUFFIX = "+log"
# The targets, as ratios to nginx (docs/performance.md): logs off / both logging every request
# to a file.
TARGETS_RATIO = {False: {"passthrough": 1.0, "replay": 1.5},
                 True: {"passthrough": 1.0, "fresh": 0.5, "replay": 1.5}}
FRESH_P99_FACTOR = 2.0  # fresh p99 within 2x nginx's
FRESH_CPU_FACTOR = 2.5  # logs off: fresh CPU/req <= 2.5x passthrough's
LABELS = {"idemgate": "workers=1, RocksDB", "idemgate-w2": "workers=2, RocksDB",
          "idemgate-cmp": "workers=1, RocksDB, --compare-bin",
          "idemgate-busypoll": "workers=1, RocksDB, server.busy_poll (--busy-poll)",
          "idemgate-nosync": "workers=1, RocksDB, store.sync = false: the limit without the disk",
          "idemgate-secret": "workers=1, RocksDB, scope.secret_file",
          "idemgate-sealed": "workers=1, RocksDB, scope.secret_file and [store.encryption]",
          "idemgate-pg": "workers=1, PostgreSQL, 1 instance",
          "idemgate-pg2": "workers=1 each, PostgreSQL, 2 instances"}


def med(rs, key):
    return statistics.median(r[key] for r in rs)


def label(name):
    logged = name.endswith(LOG_SUFFIX)
    base = name[:-len(LOG_SUFFIX)] if logged else name
    return LABELS.get(base, base) + (", access log on" if logged else "")


def met(ok):
    return "met" if ok else "MISSED"


def targets_cell(results, sc, name, base, logged):
    """The issue's targets for one row: ratio, fresh p99, fresh CPU vs passthrough (logs off)."""
    n, g = results[(sc, base)], results[(sc, name)]
    ratio = med(g, "rps") / med(n, "rps")
    cells = []
    want = TARGETS_RATIO[logged].get(sc)
    if want:
        cells.append(">= %.2fx %s" % (want, met(ratio >= want)))
    if sc == "fresh":
        cells.append("p99 <= %.0fx nginx %s" % (
            FRESH_P99_FACTOR, met(med(g, "p99_us") <= FRESH_P99_FACTOR * med(n, "p99_us"))))
        if not logged and ("passthrough", name) in results:
            factor = med(g, "cpu_us") / med(results[("passthrough", name)], "cpu_us")
            cells.append("CPU %.2fx passthrough's (<= %.1fx %s)" % (
                factor, FRESH_CPU_FACTOR, met(factor <= FRESH_CPU_FACTOR)))
    return "; ".join(cells)


def gateway_table(args, results, name, base, logged):
    out = ["\n### %s (%s) vs %s (medians of %d rounds, %ds each, wrk -t%d -c%d)\n"
           % (name, label(name), base, args.rounds, args.duration, args.threads,
              args.connections),
           "| scenario | nginx req/s | idemgate req/s | ratio | nginx p50/p99 ms "
           "| idemgate p50/p99 ms | idemgate CPU us/req | idemgate non-2xx | target |",
           "|---|---:|---:|---:|---|---|---:|---:|---|"]
    for sc in [s for s in SCENARIOS if (s, name) in results]:
        n, g = results[(sc, base)], results[(sc, name)]
        nonok = sum(r["status_errors"] for r in g) / max(sum(r["requests"] for r in g), 1)
        out.append("| %s | %.0f | %.0f | %.2fx | %.2f / %.2f | %.2f / %.2f | %.1f | %.1f%% | %s |"
                   % (sc, med(n, "rps"), med(g, "rps"), med(g, "rps") / med(n, "rps"),
                      med(n, "p50_us") / 1e3, med(n, "p99_us") / 1e3, med(g, "p50_us") / 1e3,
                      med(g, "p99_us") / 1e3, med(g, "cpu_us"), nonok * 100,
                      targets_cell(results, sc, name, base, logged)))
    return out


def thread_table(results, names):
    """CPU per request by thread group (the names the gateway gives its threads), medians: where
    a fresh request's extra CPU goes, next to passthrough and replay."""
    rows = [(n, sc) for n in names for sc in SCENARIOS
            if (sc, n) in results and "threads_us" in results[(sc, n)][0]]
    if not rows:
        return []
    groups = list(results[(rows[0][1], rows[0][0])][0]["threads_us"])
    out = ["\n### idemgate CPU us per request by thread (medians of the rounds)\n",
           "| target | scenario | total | " + " | ".join(groups) + " |",
           "|---|---|---:|" + "---:|" * len(groups)]
    for n, sc in rows:
        rs = results[(sc, n)]
        cells = " | ".join("%.1f" % statistics.median(r["threads_us"][g] for r in rs)
                           for g in groups)
        out.append("| %s | %s | %.1f | %s |" % (n, sc, med(rs, "cpu_us"), cells))
    return out


def compare_table(results, sfx):
    """--bin (idemgate) against --compare-bin (idemgate-cmp), both workers=1, same rounds."""
    cmp_name, bin_name, base = "idemgate-cmp" + sfx, "idemgate" + sfx, "nginx" + sfx
    out = ["\n### %s (--bin) vs %s (--compare-bin), medians; paired = median of the per-round "
           "ratios\n" % (bin_name, cmp_name),
           "| scenario | cmp req/s | bin req/s | bin/cmp | paired bin/cmp | cmp/nginx | bin/nginx "
           "| cmp p50/p99 ms | bin p50/p99 ms | cmp CPU us/req | bin CPU us/req "
           "| cmp / bin context switches per req |",
           "|---|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---|"]
    for sc in [s for s in SCENARIOS if (s, cmp_name) in results]:
        c, g, n = results[(sc, cmp_name)], results[(sc, bin_name)], results[(sc, base)]
        paired = statistics.median(x["rps"] / y["rps"] for x, y in zip(g, c))
        out.append("| %s | %.0f | %.0f | %.3f | %.3f | %.2fx | %.2fx | %.2f / %.2f | %.2f / %.2f "
                   "| %.1f | %.1f | %.2f / %.2f |" % (
                       sc, med(c, "rps"), med(g, "rps"), med(g, "rps") / med(c, "rps"), paired,
                       med(c, "rps") / med(n, "rps"), med(g, "rps") / med(n, "rps"),
                       med(c, "p50_us") / 1e3, med(c, "p99_us") / 1e3, med(g, "p50_us") / 1e3,
                       med(g, "p99_us") / 1e3, med(c, "cpu_us"), med(g, "cpu_us"),
                       med(c, "cs_per_req"), med(g, "cs_per_req")))
    return out


def log_cost_table(results, names):
    """--access-log both: the throughput and CPU each target loses when its access log is turned
    on, next to what nginx loses (target: no more than nginx). CPU per request moves far less
    with the machine's load than req/s does."""
    out = ["\n### What turning the access log on costs (medians, off -> on; paired = median of "
           "the per-round changes)\n",
           "| target | scenario | off req/s | on req/s | change | paired change | nginx paired "
           "| CPU us/req off / on | CPU added | nginx CPU added | target |",
           "|---|---|---:|---:|---:|---:|---:|---|---:|---:|---|"]
    change = lambda on, off: statistics.median(a["rps"] / b["rps"] - 1 for a, b in zip(on, off))
    for name in [n for n in names if n + LOG_SUFFIX in names]:
        for sc in [s for s in SCENARIOS if (s, name) in results]:
            off, on = results[(sc, name)], results[(sc, name + LOG_SUFFIX)]
            n_off, n_on = results[(sc, "nginx")], results[(sc, "nginx" + LOG_SUFFIX)]
            nginx = change(n_on, n_off)
            cpu = med(on, "cpu_us") - med(off, "cpu_us")
            n_cpu = med(n_on, "cpu_us") - med(n_off, "cpu_us")
            target = ""
            if name != "nginx":
                target = "req/s %s, CPU %s" % (met(change(on, off) >= nginx - 0.02),
                                               met(cpu <= n_cpu + 0.5))
            out.append("| %s | %s | %.0f | %.0f | %+.1f%% | %+.1f%% | %+.1f%% | %.1f / %.1f "
                       "| %+.1f | %+.1f | %s |"
                       % (name, sc, med(off, "rps"), med(on, "rps"),
                          (med(on, "rps") / med(off, "rps") - 1) * 100, change(on, off) * 100,
                          nginx * 100, med(off, "cpu_us"), med(on, "cpu_us"), cpu, n_cpu, target))
    out.append("(target: the paired change no worse than nginx's by more than 2 points, the CPU "
               "added no more than nginx's + 0.5 us: the noise of one round on this machine)")
    return out


def build_info(binary):
    top = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(binary)), "rev-parse",
                          "--show-toplevel"], capture_output=True, text=True).stdout.strip()
    if not top:
        return "%s (not inside a checkout: commit unknown)" % binary
    git = lambda *a: subprocess.run(["git", "-C", top] + list(a), capture_output=True,
                                    text=True).stdout.strip()
    dirty = git("status", "--porcelain", "--", "proxy", "store", "conf", "CMakeLists.txt")
    return "%s, built from commit %s%s" % (binary, git("rev-parse", "--short", "HEAD"),
                                          " + uncommitted changes" if dirty else "")


def extras(args, results, names):
    out = []
    if "idemgate-pg" in names:
        out.append("\nPostgreSQL CPU per request (all server processes), median: " + ", ".join(
            "%s %s %.1f us" % (n, sc, med(results[(sc, n)], "db_cpu_us"))
            for n in ("idemgate-pg", "idemgate-pg2") for sc in SCENARIOS
            if (sc, n) in results))
        out.append("idemgate-pg2: one wrk per instance (threads and connections split), req/s "
                   "summed, p50/p99 the higher of the two; all PostgreSQL targets share one "
                   "database (store.postgres.connections = %d per instance)." % args.pg_connections)
    out.append("\nPer-round req/s (%s), nginx CPU us/req:" % " | ".join(names))
    for sc in SCENARIOS:
        if (sc, "nginx") not in results:
            continue
        rows = [" / ".join("%.0f" % r["rps"] for r in results[(sc, n)]) for n in names]
        out.append("- %s: %s; nginx proxy CPU %.1f us/req" %
                   (sc, " | ".join(rows), med(results[(sc, "nginx")], "cpu_us")))
    if ("conflict", "nginx") in results:
        out.append("\nconflict: nginx forwards every request to a fast origin location (201), "
                   "idemgate answers 409 from the in-flight record without going upstream; the "
                   "ratio compares one proxied round trip with one local 409.")
    if args.access_log != "off":
        out.append("\nAccess logs: nginx `access_log FILE` (combined format, one write() per "
                   "request); idemgate `log.access = FILE` (JSON lines).")
    return out


def fill_lines(args, filled):
    ok = filled["rss"] / MIB <= 150
    out = ["- RSS after %d records stored (workers=1, -c%d, %.0f s fill): VmRSS %.1f MiB, "
           "VmHWM %.1f MiB, store on disk %.1f MiB; target <= 150 MiB %s"
           % (filled["stored"], args.connections, filled["seconds"], filled["rss"] / MIB,
              filled["hwm"] / MIB, filled["du_kib"] / MIB, met(ok)),
           "- fresh CPU us/req during the fill, per wrk run (records stored before it: req/s, "
           "CPU us/req, of which RocksDB flush/compaction threads, load): "
           + "; ".join("%d: %.0f, %.1f, %.1f, %s" % r for r in filled["runs"])]
    return out


def report(args, results, targets, fsync, hwm, filled, load0, load1, cmd):
    """targets: (name, base nginx name) in start order, nginx rows included."""
    names = [n for n, _ in targets]
    out = []
    for name, base in targets:
        if name.startswith("nginx"):
            continue
        logged = name.endswith(LOG_SUFFIX) or args.access_log == "on"
        out.extend(gateway_table(args, results, name, base, logged))
    for sfx in ("", LOG_SUFFIX):
        if "idemgate-cmp" + sfx in names:
            out.extend(compare_table(results, sfx))
    if args.access_log == "both":
        out.extend(log_cost_table(results, names))
    out.extend(thread_table(results, names))
    out.extend(extras(args, results, names))
    for name, kib in hwm.items():
        out.append("- peak RSS (VmHWM) %s during the rounds: %.1f MiB" % (name, kib / MIB))
    if filled:
        out.extend(fill_lines(args, filled))
    for lbl, s in fsync:
        out.append("- fdatasync (64 B append) %s: p50 %.2f ms, p99 %.2f ms, mean %.2f ms"
                   % (lbl, *s))
    if args.sync != "true":
        out.append("- NOTE: store.sync = %s (diagnostic run, not the benchmark)" % args.sync)
    out.append("- load average (1/5/15 min): start %s, end %s; %d cores" % (load0, load1,
                                                                          os.cpu_count()))
    out.append("- idemgate binary: %s" % build_info(args.bin))
    if args.compare_bin:
        out.append("- idemgate-cmp binary: %s" % build_info(args.compare_bin))
    out.append("- command: `%s`" % cmd)
    return "\n".join(out)
