#!/usr/bin/env bash
# One simulated host's node of a job across hosts (tests/controller/
# hosts_test.c runs it in every host of scripts/simhosts): easyscale-ctl run
# as node $SIMHOST_INDEX of $SIMHOST_COUNT, node 0 the first address, K ESTs
# of the trainer on this host, NCCL over the hosts' interfaces; with
# SCHEDULE, run's --schedule (the same file on every host).
#   hosts_node.sh TOKEN_FILE PORT STEPS HEARTBEAT_TIMEOUT_S K virtual|nccl [SCHEDULE]
set -u
[ $# -eq 6 ] || [ $# -eq 7 ] || {
    echo "usage: hosts_node.sh TOKEN_FILE PORT STEPS HEARTBEAT_TIMEOUT_S K virtual|nccl [SCHEDULE]" >&2
    exit 2
}
sched=()
[ $# -eq 7 ] && sched=(--schedule "$7")
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${ES_BUILD:-$root/build}
master=${SIMHOST_ADDRS%%,*}
export EASYSCALE_COLLECTIVES=$6 NCCL_SOCKET_IFNAME=$SIMHOST_IFNAME
exec "$root/scripts/simenv" "$build/bin/easyscale-ctl" run --nnodes "$SIMHOST_COUNT" \
    --node-rank "$SIMHOST_INDEX" --master "$master:$2" --token-file "$1" --ests-per-node "$5" \
    --progress off --heartbeat-timeout "$4" "${sched[@]}" -- \
    python3 "$root/examples/train.py" --steps "$3" --log-every 1000 --deterministic-kernels
