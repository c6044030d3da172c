"""Run on a test host (python3 -c): list and hash everything under the given paths.

Prints a JSON object {"listing": ..., "hashes": ..., "service": ..., "accounts": ...},
as scenario_helpers.snapshot compares them, from one remote command (each docker exec
costs the engine more than this script costs the host): one line per directory (type, mode, owner:group, path; no mtime,
since restoring a stashed directory moves its parent's) and per other entry (type,
mode, owner:group, size, mtime, path), and the sha256 of every regular file. A
rewrite with equal bytes still shows (its mtime moves).

Hashing every file of the SGLang venv costs most of a snapshot, and the verifiers
take hundreds. So a file's hash is taken again only when its identity changed:
inode, size, mtime or ctime. The kernel moves ctime on every write, chmod, chown or
rename, and no system call sets it back, so an unchanged ctime on the same inode
means unchanged bytes; the cache (outside every watched path) only saves reading
them. Standard library only; the hosts' Python is 3.11 or 3.13.
"""
import grp
import hashlib
import json
import os
import pwd
import stat
import subprocess
import sys

CACHE = "/root/.sglang-snapshot-cache.json"
# The unit's state and start time, and the service account.
SERVICE = ["systemctl", "show", "-p", "ActiveState", "-p", "SubState", "-p", "MainPID",
           "-p", "ExecMainStartTimestampMonotonic", "-p", "ActiveEnterTimestampMonotonic", "-p", "NRestarts",
           "-p", "UnitFileState", "-p", "FragmentPath", "sglang"]
ACCOUNTS = "getent passwd sglang; getent group sglang; true"
TYPES = {stat.S_IFDIR: "d", stat.S_IFREG: "f", stat.S_IFLNK: "l", stat.S_IFIFO: "p", stat.S_IFSOCK: "s",
         stat.S_IFCHR: "c", stat.S_IFBLK: "b"}


_OWNERS = {}


def owner(st):
    key = (st.st_uid, st.st_gid)
    if key not in _OWNERS:
        _OWNERS[key] = _owner(st)
    return _OWNERS[key]


def _owner(st):
    try:
        user = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        user = str(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return "%s:%s" % (user, group)


def walk(top):
    """Every entry under ``top`` on its device, ``top`` included, as (path, lstat)."""
    try:
        root = os.lstat(top)
    except OSError:
        return
    yield top, root
    if not stat.S_ISDIR(root.st_mode):
        return
    stack = [top]
    while stack:
        current = stack.pop()
        try:
            names = os.listdir(current)
        except OSError:
            continue
        for name in names:
            path = os.path.join(current, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            yield path, st
            if stat.S_ISDIR(st.st_mode) and st.st_dev == root.st_dev:
                stack.append(path)


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def main(paths):
    try:
        with open(CACHE) as fh:
            cache = json.load(fh)
    except (OSError, ValueError):
        cache = {}
    listing, hashes, fresh = [], [], {}
    for top in paths:
        for path, st in walk(top):
            kind = TYPES.get(stat.S_IFMT(st.st_mode), "?")
            mode = "%o" % stat.S_IMODE(st.st_mode)
            if kind == "d":
                listing.append("%s %s %s %s" % (kind, mode, owner(st), path))
                continue
            listing.append("%s %s %s %d %.10f %s" % (kind, mode, owner(st), st.st_size, st.st_mtime, path))
            if kind != "f":
                continue
            identity = [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
            known = cache.get(path)
            if known and known[0] == identity:
                digest = known[1]
            else:
                try:
                    digest = sha256(path)
                except OSError:
                    continue
            fresh[path] = [identity, digest]
            hashes.append("%s  %s" % (digest, path))
    tmp = CACHE + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(fresh, fh)
    os.replace(tmp, CACHE)
    service = subprocess.run(SERVICE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, universal_newlines=True)
    accounts = subprocess.run(ACCOUNTS, shell=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              universal_newlines=True)
    print(json.dumps({"listing": "\n".join(sorted(listing)), "hashes": "\n".join(sorted(hashes)),
                      "service": service.stdout, "accounts": accounts.stdout}))


if __name__ == "__main__":
    main(sys.argv[1:])
