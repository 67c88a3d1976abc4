#!/usr/bin/env bash
# The cases of tests/scripts/simhosts_test.c: run outside the hosts as
# `simhosts_case.sh CASE` (the driver: starts scripts/simhosts and checks
# what is left), and inside each host as `simhosts_case.sh CASE-host` (the
# host's part, told apart by SIMHOST_INDEX). Hosts meet through files in
# $SCRATCH, a directory on the shared file system (never /tmp, which each
# host has of its own). Every line the C test asserts is printed here.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
simhosts=$root/scripts/simhosts
self=$here/simhosts_case.sh
: "${SCRATCH:?SCRATCH must name the scratch directory of the test}"

# wait_file PATH [SECONDS]: waits until PATH exists (60 s by default)
wait_file() {
    local t=$((SECONDS + ${2:-60}))
    while [ ! -e "$1" ]; do
        [ $SECONDS -lt $t ] || { echo "timeout waiting for $1"; return 1; }
        sleep 0.05
    done
}

# A TCP server on this host's address, port 7000: answers "pong from I" to
# each connection, until $SCRATCH/stop-servers exists.
serve() {
    python3 -c '
import os, socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((os.environ["SIMHOST_ADDR"], 7000))
s.listen(16)
s.settimeout(0.2)
open(os.environ["SCRATCH"] + "/listening-" + os.environ["SIMHOST_INDEX"], "w").close()
while not os.path.exists(os.environ["SCRATCH"] + "/stop-servers"):
    try:
        c, _ = s.accept()
    except socket.timeout:
        continue
    c.sendall(("pong from " + os.environ["SIMHOST_INDEX"] + "\n").encode())
    c.close()
'
}

# ask ADDR [SECONDS]: one TCP exchange with the server at ADDR (bash's
# /dev/tcp); prints its answer; fails after SECONDS (default 5)
ask() {
    timeout "${2:-5}" bash -c 'exec 5<>"/dev/tcp/$1/7000" && read -r l <&5 && echo "$l"' ask "$1" 2>/dev/null
}

# leftovers ID: what a run left: processes (by its ID in their command
# line or environment), links in the machine's namespace, named netns,
# mounts of ours, the state directory. Prints "leftover: ..." lines.
leftovers() {
    local id=$1 pid=${1#esh-} f
    # one grep per kind over every process (the patterns in brackets do not
    # match the grep's own command line)
    for f in $(grep -laz -e "^simhosts-case-marke[r]$" /proc/[0-9]*/cmdline 2>/dev/null) \
             $(grep -la -e "[/]$id/" -e "[e]sh$pid" /proc/[0-9]*/cmdline 2>/dev/null) \
             $(grep -laz -e "^SIMHOST_RUN=$id\$" /proc/[0-9]*/environ 2>/dev/null); do
        f=${f%/*}
        echo "leftover: process ${f#/proc/}: $(tr '\0' ' ' <"$f/cmdline" 2>/dev/null)"
    done | sort -u
    ip -o link show | grep "esh$pid" | sed 's/^/leftover: link /'
    ip netns list | grep -e "$id" -e "esh$pid" | sed 's/^/leftover: netns /'
    grep -e simhost- /proc/self/mountinfo | sed 's/^/leftover: mount /'
    [ -e "${SIMHOSTS_STATE:-/run/simhosts}/$id" ] && echo "leftover: state ${SIMHOSTS_STATE:-/run/simhosts}/$id"
    return 0
}

case=$1
case $case in
# ---- outside: the drivers --------------------------------------------------
cleanup)
    # a normal run, a failed run, an interrupted run (SIGTERM), a killed run
    # (SIGKILL): after each, nothing of it is left (the killed one's state
    # directory until --cleanup-stale)
    "$simhosts" --hosts 2 --run-file "$SCRATCH/run-ok" -- sh -c 'echo ran $SIMHOST_INDEX'
    echo "normal: rc=$?"
    leftovers "$(cat "$SCRATCH/run-ok")"
    "$simhosts" --hosts 2 --run-file "$SCRATCH/run-fail" -- sh -c 'exit $((SIMHOST_INDEX * 3))'
    echo "failed: rc=$?"
    leftovers "$(cat "$SCRATCH/run-fail")"
    for sig in TERM KILL; do
        rm -f "$SCRATCH/run-$sig" "$SCRATCH"/asleep-*
        "$simhosts" --hosts 2 --run-file "$SCRATCH/run-$sig" -- \
            bash -c 'touch "$SCRATCH/asleep-$SIMHOST_INDEX"; exec -a simhosts-case-marker sleep 1000' &
        sp=$!
        wait_file "$SCRATCH/asleep-0" && wait_file "$SCRATCH/asleep-1"
        id=$(cat "$SCRATCH/run-$sig")
        # while it runs, its processes are there (the check can fail)
        n=$(leftovers "$id" | grep -c ": simhosts-case-marker 1000")
        echo "$sig: running sleeps=$n"
        kill -$sig $sp
        wait $sp 2>/dev/null
        echo "$sig: rc=$?"
        # the kernel tears the namespaces down after the holders die
        for ((t = 0; t < 100; t++)); do
            leftovers "$id" | grep -q "leftover: process" || break
            sleep 0.1
        done
        leftovers "$id"
    done
    "$simhosts" --cleanup-stale | grep "removed stale run $id"
    leftovers "$id"
    echo "cleanup done"
    ;;
isolation)
    "$simhosts" --hosts 2 --run-file "$SCRATCH/run" -- "$self" isolation-host &
    sp=$!
    wait_file "$SCRATCH/host1-ready"
    # the machine (outside every host) sees none of host 1's things either
    [ -e /dev/shm/simhosts-mark ] && echo "machine: SEES host 1's shm file" || echo "machine: no shm file of host 1"
    [ -e /tmp/simhosts-mark ] && echo "machine: SEES host 1's tmp file" || echo "machine: no tmp file of host 1"
    python3 -c '
import socket
s = socket.socket(socket.AF_UNIX)
try:
    s.connect("\0simhosts-abstract"); print("machine: CONNECTS to host 1 abstract socket")
except OSError as e:
    print("machine: cannot reach host 1 abstract socket (%s)" % e.strerror)
'
    touch "$SCRATCH/machine-checked"
    wait $sp
    echo "rc=$?"
    ;;
env)
    "$simhosts" --hosts 2 -- sh -c 'echo "host $SIMHOST_INDEX of $SIMHOST_COUNT addr $SIMHOST_ADDR if $SIMHOST_IFNAME addrs $SIMHOST_ADDRS name $(hostname) ip $(ip -o -4 addr show dev $SIMHOST_IFNAME | awk "{print \$4}") tmpdir $TMPDIR shm $SIMCUDA_SHM_NAME devices $SIMCUDA_DEVICES"'
    echo "rc=$?"
    ;;
mesh)
    # mesh N [OPTIONS]: every host serves, and asks every other one
    n=$2
    shift 2
    "$simhosts" --hosts "$n" "$@" -- "$self" mesh-host
    echo "rc=$?"
    ;;
cuda)
    "$simhosts" --hosts 2 --host-devices 0=a100:8G --host-devices 1=t4:4G,t4:4G -- "$self" cuda-host
    echo "rc=$?"
    ;;
cut)
    "$simhosts" --hosts 2 --run-file "$SCRATCH/run" -- "$self" cut-host &
    sp=$!
    wait_file "$SCRATCH/cut-outside"
    # from outside: cut host 1 again (it is down) and mend it
    "$simhosts" mend --run "$(cat "$SCRATCH/run")" --host 1
    echo "outside mend: rc=$?"
    touch "$SCRATCH/mended-outside"
    wait $sp
    echo "rc=$?"
    ;;

# ---- inside the hosts ---------------------------------------------------------
isolation-host)
    i=$SIMHOST_INDEX
    if [ "$i" = 1 ]; then
        echo "host 1 secret" >/dev/shm/simhosts-mark
        echo "host 1 secret" >/tmp/simhosts-mark
        python3 -c '
import os, socket, time
u = socket.socket(socket.AF_UNIX); u.bind("/tmp/simhosts-sock"); u.listen(4)
a = socket.socket(socket.AF_UNIX); a.bind("\0simhosts-abstract"); a.listen(4)
open(os.environ["SCRATCH"] + "/bound", "w").close()
while not os.path.exists(os.environ["SCRATCH"] + "/checked"):
    time.sleep(0.05)
' &
        py=$!
        wait_file "$SCRATCH/bound" || exit 1
        # positive controls: on host 1 itself all of it is there
        [ -e /dev/shm/simhosts-mark ] && echo "host 1: own shm file seen"
        [ -e /tmp/simhosts-mark ] && echo "host 1: own tmp file seen"
        python3 -c '
import socket
for a in ("/tmp/simhosts-sock", "\0simhosts-abstract"):
    s = socket.socket(socket.AF_UNIX); s.connect(a); print("host 1: own socket %r connects" % a.lstrip("\0"))
'
        touch "$SCRATCH/host1-ready"
        # the machine (outside every host) does not see them either
        wait_file "$SCRATCH/checked" || exit 1
        wait_file "$SCRATCH/machine-checked" || exit 1
        touch "$SCRATCH/checked"
        wait $py
    else
        wait_file "$SCRATCH/host1-ready" || exit 1
        [ -e /dev/shm/simhosts-mark ] && echo "host 0: SEES host 1's shm file" || echo "host 0: no shm file of host 1"
        [ -e /tmp/simhosts-mark ] && echo "host 0: SEES host 1's tmp file" || echo "host 0: no tmp file of host 1"
        python3 -c '
import socket
for a in ("/tmp/simhosts-sock", "\0simhosts-abstract"):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(a); print("host 0: CONNECTS to host 1 socket %r" % a.lstrip("\0"))
    except OSError as e:
        print("host 0: cannot reach host 1 socket %r (%s)" % (a.lstrip("\0"), e.strerror))
'
        # no interface but loopback and its own
        echo "host 0: links $(ip -o link show | awk -F': ' '{sub(/@.*/, "", $2); print $2}' | sort | tr '\n' ' ')"
        # outside, too: the machine's /dev/shm (the test's) has no such file
        touch "$SCRATCH/checked"
    fi
    ;;
cuda-host)
    i=$SIMHOST_INDEX
    if [ "$i" = 1 ]; then
        # a driver client that holds a context and memory on each of its GPUs
        python3 -c '
import ctypes, os, time
cu = ctypes.CDLL("libcuda.so.1")
assert cu.cuInit(0) == 0
n = ctypes.c_int(); cu.cuDeviceGetCount(ctypes.byref(n))
ctxs = []
for d in range(n.value):
    dev = ctypes.c_int(); cu.cuDeviceGet(ctypes.byref(dev), d)
    ctx = ctypes.c_void_p(); assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
    assert cu.cuCtxSetCurrent(ctx) == 0
    p = ctypes.c_uint64(); assert cu.cuMemAlloc_v2(ctypes.byref(p), 1 << 20) == 0
    ctxs.append(ctx)
print("host 1: client holds %d GPUs" % n.value, flush=True)
open(os.environ["SCRATCH"] + "/cuda-ready", "w").close()
while not os.path.exists(os.environ["SCRATCH"] + "/cuda-checked"):
    time.sleep(0.05)
' &
        py=$!
        wait_file "$SCRATCH/cuda-ready" 120 || exit 1
        n=0
        for p in /proc/[0-9]*; do
            grep -q simcuda-gpu "$p/cmdline" 2>/dev/null && n=$((n + 1))
        done
        echo "host 1: own device servers: $n"
        wait $py || exit 1
    else
        wait_file "$SCRATCH/cuda-ready" 120 || exit 1
        "$ES_BUILD/bin/es-devices" 2>&1 | sed -n 's/^driver API.*, \([0-9]*\) device(s)$/host 0: es-devices sees \1 devices/p; s/^  \[\([0-9]\)\] \([^ ]* [^ ]*\).*/host 0: device \1 \2/p'
        n=0
        for p in /proc/[0-9]*; do
            grep -q simcuda-gpu "$p/cmdline" 2>/dev/null && n=$((n + 1))
        done
        echo "host 0: device servers visible: $n"
        echo "host 0: shm $(ls /dev/shm | tr '\n' ' ')"
        touch "$SCRATCH/cuda-checked"
    fi
    # each host's own view at the end: its table and its own servers
    if [ "$i" = 1 ]; then
        echo "host 1: shm $(ls /dev/shm | tr '\n' ' ')"
    fi
    ;;
mesh-host)
    i=$SIMHOST_INDEX
    serve &
    srv=$!
    IFS=, read -ra addrs <<<"$SIMHOST_ADDRS"
    for ((j = 0; j < SIMHOST_COUNT; j++)); do wait_file "$SCRATCH/listening-$j" || exit 1; done
    for ((j = 0; j < SIMHOST_COUNT; j++)); do
        [ $j = "$i" ] && continue
        echo "$i->$j ${addrs[j]}: $(ask "${addrs[j]}")"
    done
    # negative control: an address of the subnet that no host has
    last=${addrs[SIMHOST_COUNT - 1]}
    none=${last%.*}.$((${last##*.} + 1))
    r=$(ask "$none" 2)
    echo "$i->none $none: rc=$? '$r'"
    touch "$SCRATCH/asked-$i"
    for ((j = 0; j < SIMHOST_COUNT; j++)); do wait_file "$SCRATCH/asked-$j" || exit 1; done
    touch "$SCRATCH/stop-servers"
    wait $srv
    ;;
cut-host)
    i=$SIMHOST_INDEX
    if [ "$i" = 1 ]; then
        serve
        exit 0
    fi
    a1=${SIMHOST_ADDRS#*,}
    wait_file "$SCRATCH/listening-1" || exit 1
    echo "before: $(ask "$a1")"
    $SIMHOST_CUT_CMD 1
    echo "cut: rc=$?"
    r=$(ask "$a1" 3)
    echo "after cut: rc=$? '$r'"
    # again from outside (the driver mends it)
    touch "$SCRATCH/cut-outside"
    wait_file "$SCRATCH/mended-outside" || exit 1
    echo "after mend: $(ask "$a1")"
    $SIMHOST_CUT_CMD 7 2>&1
    echo "cut of no host: rc=$?"
    touch "$SCRATCH/stop-servers"
    ;;
*)
    echo "simhosts_case.sh: unknown case '$case'" >&2
    exit 2
    ;;
esac
