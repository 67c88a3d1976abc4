#!/usr/bin/env bash
# K ranks of tests/clients/nccl_xclient (an nccl.h client) on this host, as
# torchrun places them: host $SIMHOST_INDEX of $SIMHOST_COUNT (unset: one
# host), ranks INDEX*K .. INDEX*K+K-1, libeasyscale.so preloaded, the unique
# id through ID_FILE (a directory every host sees). Exit 1 if a rank failed.
#   hosts_client.sh ID_FILE K [--loose | --bench]
set -u
[ $# -ge 2 ] || { echo "usage: hosts_client.sh ID_FILE K [--loose]" >&2; exit 2; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${ES_BUILD:-$root/build}
h=${SIMHOST_INDEX:-0} n=${SIMHOST_COUNT:-1} k=$2
[ -n "${SIMHOST_IFNAME:-}" ] && export NCCL_SOCKET_IFNAME=$SIMHOST_IFNAME
export WORLD_SIZE=$((n * k)) GROUP_RANK=$h GROUP_WORLD_SIZE=$n LOCAL_WORLD_SIZE=$k
pids=()
for ((l = 0; l < k; l++)); do
    RANK=$((h * k + l)) LOCAL_RANK=$l LD_PRELOAD=${LD_PRELOAD:+$LD_PRELOAD:}$build/lib/libeasyscale.so \
        "$root/scripts/simenv" "$build/tests/clients/nccl_xclient" "$1" ${3:-} &
    pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
exit $rc
