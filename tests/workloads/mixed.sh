#!/bin/sh
# A mixed workload for the rehearsal loop (tests/rehearse/test_rehearsal_loop.py, bench/rehearsal.py):
# data and metadata from several processes at once, with real tools.  $1: the directory,
# $2: how many rounds (a scale; 1 takes about two seconds on an emulated efs-bursting mount).
set -eu
d=$1
rounds=${2:-1}
n=$((rounds * 40))
mkdir -p "$d/src" "$d/meta"
# small files, each created, written and closed: create, write, flush, release
( i=0; while [ $i -lt $n ]; do i=$((i + 1)); head -c 16384 /dev/zero > "$d/src/f$i"; done ) &
# bigger files made durable: buffered writes, then the commit of conv=fsync
( i=0; while [ $i -lt $((rounds * 3)) ]; do i=$((i + 1))
    dd if=/dev/zero of="$d/big$i" bs=64k count=16 conv=fsync status=none; done ) &
# the namespace: mkdir, create, rename, stat, then remove it all
( i=0; while [ $i -lt $n ]; do i=$((i + 1))
    mkdir "$d/meta/d$i"; touch "$d/meta/d$i/x"; mv "$d/meta/d$i/x" "$d/meta/d$i/y"
    stat "$d/meta/d$i/y" > /dev/null; done
  rm -r "$d/meta" ) &
wait
# readers: an archive of the tree and every file read back
tar cf - -C "$d" src > /dev/null &
( i=0; while [ $i -lt $n ]; do i=$((i + 1)); cat "$d/src/f$i" > /dev/null; done ) &
wait
