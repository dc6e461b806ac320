#!/bin/sh
# A mixed workload for the rehearsal loop (tests/rehearse/test_rehearsal_loop.py, bench/rehearsal.py):
# data and metadata from several processes at once, with real tools: small files made and
# removed, files made durable, an fsync-heavy sqlite database, random 4 KiB I/O, listings
# and stats.  $1: the directory,
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
# an fsync-heavy database: one sqlite3 process, a transaction per insert (its journal made,
# written, synced and removed each time)
( i=0; echo "create table t(k integer primary key, v blob);"
  while [ $i -lt $((rounds * 10)) ]; do i=$((i + 1)); echo "insert into t(v) values (randomblob(2048));"; done
) | sqlite3 "$d/db.sqlite" &
# random 4 KiB reads and writes in one file
fio --name=rand --filename="$d/rand.dat" --rw=randrw --bs=4k --size=1m --io_size=$((rounds * 256))k \
    --ioengine=psync --randrepeat=1 --output=/dev/null &
# listings and stats
( i=0; while [ $i -lt $((rounds * 5)) ]; do i=$((i + 1)); ls -l "$d" > /dev/null; stat "$d/src" > /dev/null; done ) &
wait
# readers: an archive of the tree and every file read back
tar cf - -C "$d" src > /dev/null &
( i=0; while [ $i -lt $n ]; do i=$((i + 1)); cat "$d/src/f$i" > /dev/null; done ) &
wait
