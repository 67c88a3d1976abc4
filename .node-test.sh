#!/bin/bash
cd /work/main
m=${SIMHOST_ADDRS%%,*}
export NCCL_SOCKET_IFNAME=$SIMHOST_IFNAME EASYSCALE_LOG=${EASYSCALE_LOG:-warn}
exec scripts/simenv build/bin/easyscale-ctl run --nnodes 2 --node-rank $SIMHOST_INDEX --master $m:29500 --token-file /work/main/.tok-test --ests-per-node ${K:-2} --progress off -- python3 examples/train.py --steps 40 --log-every 40 --deterministic-kernels
