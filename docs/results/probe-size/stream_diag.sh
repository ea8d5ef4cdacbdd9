#!/bin/bash
# Writes /tmp/ab/e-LABEL-*.jsonl (needs /tmp/ab/key, mode 600); analyse with stream_trends.py.
set -u
M=/work/main/target/release/mgrp
N=di$$
BUSY=${BUSY:-0}
SPIN=
cleanup(){ [ -n "$SPIN" ] && kill $SPIN 2>/dev/null; kill $AGENT $AWAKE $CROSS 2>/dev/null; wait $CROSS 2>/dev/null; $M testbed down --name $N >/dev/null 2>&1; }
trap cleanup EXIT
python3 -c "import os,struct,time; f=os.open('/dev/cpu_dma_latency',os.O_WRONLY); os.write(f,struct.pack('i',0)); time.sleep(900)" & AWAKE=$!
$M testbed up --name $N --capacity 100mbit --json > /tmp/ab/tb.json
ip netns exec mgrp-$N-rcv $M agent --key-file /tmp/ab/key --no-api --stats-every 0 > /tmp/ab/agent.log 2>&1 & AGENT=$!
[ $BUSY = 1 ] && { sh -c 'while :; do :; done' & SPIN=$!; }
$M testbed run --on $N --cross cbr:50mbit --duration 75s --json --out /tmp/ab/cross-$1.json > /dev/null 2>/tmp/ab/cross.err & CROSS=$!
sleep 2
for round in 1 2; do
for spec in 333:100us:30a 708:200us:30b 1472:404us:30c 395:100us:35a 833:200us:35b 1472:346us:35c; do
  IFS=: read l g lab <<< "$spec"
  ip netns exec mgrp-$N-snd $M probe 198.18.3.2 --key-file /tmp/ab/key -n 50 -l $l -g $g --trains 25 --every 120ms --json >> /tmp/ab/e-$1-$lab.jsonl 2>/tmp/ab/c.err
done; done
