# SPDX-License-Identifier: Apache-2.0
# A throwaway PostgreSQL server for scripts/bench http --backend postgres. Mirrors
# tests/support/pg_cluster.cc (which scripts/bench store --backend postgres uses): the same
# initdb template (/tmp/idemgate-pg-template-UID-VERSION, made once per machine and user), the
# same server settings, fsync on, trust auth for user idemgate on 127.0.0.1.
import glob
import os
import pwd
import shutil
import subprocess
import tempfile

SETTINGS = ("-c listen_addresses=127.0.0.1 -c shared_buffers=128MB -c max_connections=300 "
            "-c wal_level=replica -c max_wal_senders=5 -c hot_standby=on "
            "-c log_min_messages=warning")


def bin_dir():
    env = os.environ.get("IDEMGATE_PG_BIN", "")
    if env:
        return env
    dirs = sorted(d for d in glob.glob("/usr/lib/postgresql/*/bin")
                  if os.path.exists(os.path.join(d, "postgres")))
    if not dirs:
        raise RuntimeError("no PostgreSQL server binaries under /usr/lib/postgresql")
    return dirs[-1]


class PgServer:
    def __init__(self, port):
        self.bin = bin_dir()
        self.port = port
        self.root = tempfile.mkdtemp(prefix="idemgate-pg-")
        self.data = os.path.join(self.root, "n0")
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(self.root, pw.pw_uid, pw.pw_gid)

    def run(self, *argv):
        cmd = list(argv)
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--"] + cmd
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError("%s failed: %s%s" % (" ".join(cmd), out.stdout, out.stderr))

    def template(self):
        version = os.path.basename(os.path.dirname(self.bin))
        path = os.path.join(tempfile.gettempdir(),
                            "idemgate-pg-template-%d-%s" % (os.geteuid(), version))
        if not os.path.exists(os.path.join(path, "PG_VERSION")):
            fresh = os.path.join(self.root, "template")
            self.run(os.path.join(self.bin, "initdb"), "-D", fresh, "-U", "idemgate",
                     "--auth=trust", "-N")
            try:
                os.rename(fresh, path)  # another process may have won the race: as good
            except OSError:
                pass
        return path

    def start(self):
        self.run("cp", "-a", self.template(), self.data)
        opts = "-p %d -k %s %s" % (self.port, self.root, SETTINGS)
        self.run(os.path.join(self.bin, "pg_ctl"), "-D", self.data, "-l", self.data + ".log",
                 "-w", "-t", "60", "-o", opts, "start")
        return self

    def dsn(self):
        return "host=127.0.0.1 port=%d user=idemgate dbname=postgres" % self.port

    def pids(self):
        """The postmaster and its children (backends, walwriter, checkpointer...)."""
        try:
            with open(os.path.join(self.data, "postmaster.pid")) as f:
                pm = int(f.readline())
        except (OSError, ValueError):
            return []
        kids = []
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open("/proc/%s/stat" % d) as f:
                        if int(f.read().rsplit(")", 1)[1].split()[1]) == pm:
                            kids.append(int(d))
                except OSError:
                    pass
        return [pm] + kids

    def stop(self):
        try:
            self.run(os.path.join(self.bin, "pg_ctl"), "-D", self.data, "-m", "immediate",
                     "-w", "stop")
        except RuntimeError:
            pass
        shutil.rmtree(self.root, ignore_errors=True)
