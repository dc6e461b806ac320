"""The emulated Linux NFS 4.1 client in virtual time: for each VFS operation, the RPCs
it sends (or not) and what the caller waits for; one test per row of the table in
docs/EMULATOR.md, "What NFS sends"."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusetrace.emulator.call import Call
from fusetrace.emulator.model import Model
from fusetrace.emulator.nfsclient import VFS_OPS, NfsClient
from fusetrace.emulator.ops import Gate
from fusetrace.emulator.params import RPC_LATENCIES, MiB
from fusetrace.emulator.profiles import apply_overrides, load_profile
from fusetrace.emulator.simulate import dd_write, dd_writers

# fixed latencies: reads 1 ms, writes and commits 10 ms, every RPC its class's, no transfer
# time, no slots, no stripes
FIXED = [
    *(f"{key}_latency_ms=0" for key in RPC_LATENCIES),
    "file_stripe_size=0",
    "read_latency_ms=1",
    "read_latency_p99_ms=1",
    "meta_read_latency_ms=1",
    "meta_read_latency_p99_ms=1",
    "write_latency_ms=10",
    "write_latency_p99_ms=10",
    "meta_write_latency_ms=10",
    "meta_write_latency_p99_ms=10",
    "commit_latency_ms=10",
    "commit_latency_p99_ms=10",
    "stream_mibps=0",
    "file_write_slots=0",
    "dir_write_slots=0",
]
MS = 1e-3


def client(*overrides: str) -> NfsClient:
    return NfsClient(Model(apply_overrides(load_profile("efs-bursting"), [*FIXED, *overrides]), 0.0))


def took(adm, now: float) -> float:
    return adm.done_at - now


def test_a_lookup_is_sent_once_then_trusted_while_its_directory_is():
    c = client()
    first = c.admit(Call("lookup", directory=1, name="a"), 0.0)
    # the walk's first search of the directory asks ACCESS (default_permissions: FUSE sends none)
    assert first.rpcs == "ACCESS,LOOKUP" and took(first, 0.0) == pytest.approx(2 * MS)
    assert c.admit(Call("lookup", directory=1, name="b"), 0.5).rpcs == "LOOKUP"  # the answer is kept
    # the name (positive or negative), while the directory's attributes are trusted: acdirmin, 30 s
    assert c.admit(Call("lookup", directory=1, name="a"), 1.0).gate is Gate.CACHE
    assert c.admit(Call("lookup", directory=1, name="a"), 20.0).gate is Gate.CACHE
    stale = c.admit(Call("lookup", directory=1, name="a"), 40.0)
    assert stale.rpcs == "GETATTR"  # revalidates the directory, not the name
    assert c.admit(Call("lookup", directory=1, name="a"), 41.0).gate is Gate.CACHE
    c.admit(Call("create", directory=1, name="b"), 42.0)  # its reply brings the directory's attributes
    assert c.admit(Call("lookup", directory=1, name="a"), 43.0).gate is Gate.CACHE


def test_attributes_are_trusted_for_acregmin_doubling_while_unchanged():
    c = client()
    assert c.admit(Call("getattr", file=7), 0.0).rpcs == "GETATTR"
    assert c.admit(Call("getattr", file=7), 2.0).gate is Gate.CACHE  # within 3 s
    assert c.admit(Call("getattr", file=7), 3.5).rpcs == "GETATTR"  # fetched again, unchanged: trusted 6 s
    assert c.admit(Call("getattr", file=7), 9.0).gate is Gate.CACHE
    assert c.admit(Call("getattr", file=7), 10.0).rpcs == "GETATTR"


def test_open_always_sends_open_close_to_open():
    c = client()
    c.admit(Call("getattr", file=7), 0.0)
    again = c.admit(Call("open", file=7), 0.5)
    assert again.rpcs == "OPEN" and took(again, 0.5) == pytest.approx(MS)
    assert c.admit(Call("getattr", file=7), 1.0).gate is Gate.CACHE  # OPEN brought the attributes
    assert c.admit(Call("access", file=7), 1.0).gate is Gate.CACHE  # and the access rights


def test_a_stat_of_a_file_being_written_waits_for_its_data():
    c = client("burst_mibps=1000000")
    c.admit(Call("write", file=7, size=MiB), 0.0)  # buffered: its WRITE takes 10 ms
    stat = c.admit(Call("getattr", file=7), 0.001)
    assert stat.gate is Gate.WRITEBACK and stat.done_at == pytest.approx(0.010)  # flushed first
    assert stat.rpcs == "WRITE(FILE_SYNC)"  # one wsize, sent stable; its reply brought the attributes: no GETATTR
    assert c.admit(Call("getattr", file=7), 0.02).gate is Gate.CACHE
    assert took(c.admit(Call("getattr", file=8), 0.001), 0.001) == pytest.approx(MS)  # another file does not wait


def test_after_the_cliff_a_stat_waits_behind_the_data_queued_before_it():
    c = client("burst_credit_balance=0", "stored_size=1 GiB", "baseline_floor_mibps=1")  # 1 MiB/s
    for _ in range(4):
        c.admit(Call("write", file=7, size=MiB), 0.0)  # 4 MiB queued at 1 MiB/s
    assert all(took(c.admit(Call("getattr", file=f), 0.1), 0.1) > 3.5 for f in (7, 8))  # `ls` froze


def test_setattr_syncs_the_file_then_sends_setattr():
    c = client("burst_mibps=1000000")
    c.admit(Call("write", file=7, size=MiB), 0.0)
    adm = c.admit(Call("setattr", file=7), 0.0)
    assert adm.rpcs == "WRITE(FILE_SYNC),SETATTR" and took(adm, 0.0) == pytest.approx(20 * MS)
    assert c.admit(Call("setattr", file=7), 1.0).rpcs == "SETATTR"  # nothing left to write


def test_the_write_back_caches_times_cost_nothing_and_leave_the_data_to_the_close():
    # FUSE's write-back cache hands the kernel's mtime and ctime over in a setattr of
    # their own, which NFS never sends: no RPC, no flush; close(2) then sends the data
    c = client("burst_mibps=1000000")
    c.admit(Call("write", file=7, size=MiB), 0.0)
    times = c.admit(Call("setattr", file=7, kernel_only=True), 0.0)
    assert times.gate is Gate.KERNEL and times.rpcs == "" and took(times, 0.0) == 0
    close = c.admit(Call("flush", file=7), 0.0)
    assert close.rpcs == "WRITE(FILE_SYNC),CLOSE" and took(close, 0.0) == pytest.approx(11 * MS)


def test_a_create_long_after_a_lookup_of_its_name_pays_its_own_round_trip():
    c = client()
    c.admit(Call("lookup", directory=1, name="f"), 0.0)  # [ -e f ] ...
    create = c.admit(Call("create", directory=1, name="f"), 0.5)  # ... || touch f: two calls, two round trips
    assert took(create, 0.5) == pytest.approx(10 * MS)


def test_an_open_that_truncates_a_non_empty_file_sends_a_setattr_after_the_open():
    """`cp` over an existing file, `>` in a shell: NFS 4 opens, then cuts the size with a
    SETATTR the caller waits for; an empty file's size is left alone."""
    c = client()
    cut = c.admit(Call("open", file=7, size=4096), 0.0)
    assert cut.rpcs == "OPEN,SETATTR" and took(cut, 0.0) == pytest.approx(MS + 10 * MS)
    assert c.admit(Call("open", file=8, size=0), 1.0).rpcs == "OPEN"


def test_touch_is_open_create_setattr_and_close():
    c = client()
    lookup = c.admit(Call("lookup", directory=1, name="new"), 0.0)  # FUSE asks first; NFS would not
    create = c.admit(Call("create", directory=1, name="new"), lookup.done_at)
    assert create.rpcs == "OPEN(create)"
    assert create.done_at == pytest.approx(11 * MS)  # ACCESS, then from the LOOKUP's start: one OPEN
    setattr_ = c.admit(Call("setattr", file=9), create.done_at)
    close = c.admit(Call("flush", file=9), setattr_.done_at)  # close(2): FUSE's flush
    release = c.admit(Call("release", file=9), close.done_at)
    assert setattr_.rpcs == "SETATTR"
    assert close.rpcs == "CLOSE" and took(close, setattr_.done_at) == pytest.approx(MS)  # nothing to write
    assert release.gate is Gate.CACHE and release.rpcs == ""  # FUSE's release: nobody waits for it
    again = c.admit(Call("flush", file=9, closes=False), 2.0)  # a duplicate's close(2): no CLOSE of its own
    assert again.gate is Gate.CACHE and again.rpcs == ""
    assert c.model.metrics(1.0)["MetadataReadOps"] == 3  # ACCESS, the LOOKUP FUSE sent, and the CLOSE


def test_a_read_is_a_read():
    adm = client().admit(Call("read", file=7, size=4096), 0.0)
    assert adm.rpcs == "READ" and took(adm, 0.0) == pytest.approx(MS)


def test_a_flush_of_one_wsize_goes_file_sync_a_larger_one_commits_nothing_sends_nothing():
    c = client("burst_mibps=1000000")  # no throughput limit to speak of
    c.admit(Call("write", file=7, size=4096), 0.0)
    small = c.admit(Call("fsync", file=7), 0.0)
    assert small.rpcs == "WRITE(FILE_SYNC)" and took(small, 0.0) == pytest.approx(10 * MS)  # one round trip
    for _ in range(3):
        c.admit(Call("write", file=7, size=MiB), 1.0)
    large = c.admit(Call("fsync", file=7), 1.0)
    assert large.rpcs == "COMMIT" and took(large, 1.0) == pytest.approx(20 * MS)  # parallel WRITEs, a COMMIT
    assert c.admit(Call("fsync", file=7), 2.0).gate is Gate.CACHE  # nothing written since: nothing sent
    c.admit(Call("write", file=7, size=4096), 3.0)
    late = c.admit(Call("fsync", file=7), 4.0)  # the eager write-back went UNSTABLE long ago: its COMMIT
    assert late.rpcs == "COMMIT" and took(late, 4.0) == pytest.approx(10 * MS)


def test_a_stat_of_a_file_whose_data_is_on_its_way_flushes_it_file_sync_so_its_close_commits_nothing():
    """nfs_getattr writes the file back first (FLUSH_COND_STABLE): what fits one WRITE goes
    FILE_SYNC, and the close after owes no COMMIT; more than that still owes one."""
    c = client("burst_mibps=1000000")
    c.admit(Call("write", file=7, size=4096), 0.0)
    stat = c.admit(Call("getattr", file=7), 0.0)
    assert stat.gate is Gate.WRITEBACK and stat.rpcs == "WRITE(FILE_SYNC)"
    assert c.admit(Call("flush", file=7), 1.0).rpcs == "CLOSE"
    for _ in range(3):
        c.admit(Call("write", file=8, size=MiB), 2.0)
    assert c.admit(Call("getattr", file=8), 2.0).gate is Gate.WRITEBACK
    assert c.admit(Call("flush", file=8), 3.0).rpcs == "COMMIT,CLOSE"


def test_a_read_only_close_flushes_nothing_and_leaves_a_writers_data_to_its_own_flush():
    c = client("burst_mibps=1000000")
    c.admit(Call("write", file=7, size=MiB, write_mode="sync"), 0.0)
    reader = c.admit(Call("flush", file=7, writable=False), 0.0)
    assert reader.rpcs == "CLOSE" and took(reader, 0.0) == pytest.approx(MS)
    assert c.admit(Call("fsync", file=7), 0.0).rpcs == "WRITE(FILE_SYNC)"  # the writer's data, still its own


def test_a_direct_write_is_sent_as_it_comes_stable():
    c = client()
    adm = c.admit(Call("write", file=7, size=4096, write_mode="direct"), 0.0)
    assert adm.rpcs == "WRITE" and took(adm, 0.0) == pytest.approx(10 * MS)
    assert c.admit(Call("fsync", file=7), 0.1).rpcs == ""  # nothing unstable to commit


def test_a_listing_is_one_readdirplus_per_batch_and_kept_until_the_directory_changes():
    c = client("nfs_readdir_entries=100")
    rpcs = [c.admit(Call("readdir", file=3, offset=i, size=50), 0.0).rpcs for i in range(0, 700, 50)]
    assert sum(r.startswith("READDIRPLUS") for r in rpcs) == 3  # replies of 100, 200 and 400 entries
    c.admit(Call("getattr", file=3, is_dir=True), 0.0)
    again = [c.admit(Call("readdir", file=3, offset=i, size=50), 1.0).gate for i in range(0, 700, 50)]
    assert set(again) == {Gate.CACHE}
    c.admit(Call("create", directory=3, name="x"), 2.0)
    assert c.admit(Call("readdir", file=3, offset=0, size=32), 3.0).rpcs == "READDIRPLUS"
    assert (
        c.admit(Call("readdir", file=3, offset=0, size=32), 70.0).rpcs == "READDIRPLUS"
    )  # attributes stale (acdirmax)


def test_two_listings_of_one_directory_at_once_are_each_charged():
    c = client("nfs_readdir_entries=100")
    assert c.admit(Call("readdir", file=3, handle=1, offset=0, size=50), 0.0).rpcs == "READDIRPLUS"
    assert c.admit(Call("readdir", file=3, handle=2, offset=0, size=50), 0.0).gate is Gate.CACHE  # the listing, cached
    assert (
        c.admit(Call("readdir", file=3, handle=1, offset=100, size=50), 0.0).rpcs == "READDIRPLUS"
    )  # still handle 1's


def test_a_rename_changes_both_directories_and_names_the_new_entry():
    c = client()
    for d in (3, 4):
        c.admit(Call("readdir", file=d, offset=0, size=10), 0.0)
    c.admit(Call("rename", directory=3, name="x", new_directory=4, new_name="y"), 1.0)
    assert [c.admit(Call("readdir", file=d, offset=0, size=10), 2.0).rpcs for d in (3, 4)] == ["READDIRPLUS"] * 2
    assert c.admit(Call("lookup", directory=4, name="y"), 2.0).gate is Gate.CACHE


def test_opendir_revalidates_the_directory_close_to_open():
    c = client()
    # the open's permission check asks ACCESS the first time (kept after)
    assert [c.admit(Call("opendir", file=3), t).rpcs for t in (0.0, 10.0)] == ["ACCESS,GETATTR", "GETATTR"]


def test_access_answers_are_kept_per_user_readlinks_for_all():
    """nfs_access_get_cached keys ACCESS answers by credential: another user's first search
    of a directory asks again, however recently the first user's was answered."""
    c = client()
    assert c.admit(Call("lookup", directory=1, name="a", uid=1000), 0.0).rpcs == "ACCESS,LOOKUP"
    assert c.admit(Call("lookup", directory=1, name="b", uid=1001), 0.1).rpcs == "ACCESS,LOOKUP"
    assert c.admit(Call("lookup", directory=1, name="c", uid=1000), 0.2).rpcs == "LOOKUP"
    assert c.admit(Call("opendir", file=1, uid=0), 0.3).rpcs == "ACCESS,GETATTR"
    c.admit(Call("mkdir", directory=1, name="d", uid=1000), 0.4)  # the change's walk searched 1 as 1000 only
    c.admit(Call("open", file=7, uid=1000), 0.5)  # OPEN asks ACCESS in its compound, for its caller
    assert [c.admit(Call("access", file=f, uid=1002), 0.6).rpcs for f in (1, 7)] == ["ACCESS", "ACCESS"]
    assert [c.admit(Call("access", file=f, uid=1000), 0.6).gate for f in (1, 7)] == [Gate.CACHE, Gate.CACHE]
    assert c.admit(Call("readlink", file=9, uid=1000), 0.7).rpcs == "READLINK"
    assert c.admit(Call("readlink", file=9, uid=1001), 0.8).gate is Gate.CACHE


def test_statfs_is_always_sent_access_and_readlink_are_cached_with_the_attributes():
    c = client()
    assert [c.admit(Call("statfs", file=1), t).rpcs for t in (0.0, 0.1)] == ["STATFS", "STATFS"]
    for op, rpc in (("access", "ACCESS"), ("readlink", "READLINK")):
        assert c.admit(Call(op, file=5), 0.0).rpcs == rpc
        assert c.admit(Call(op, file=5), 1.0).gate is Gate.CACHE


def test_extended_attributes_are_answered_by_the_client_unless_the_profile_has_them():
    assert client().admit(Call("getxattr", file=5), 0.0).gate is Gate.CACHE
    assert client("xattrs=true").admit(Call("setxattr", file=5), 0.0).rpcs == "SETXATTR"


def test_namespace_changes_send_their_rpc_and_a_removed_name_is_known_absent():
    c = client()
    for op, rpc in (
        ("mkdir", "CREATE"),
        ("symlink", "CREATE"),
        ("mknod", "CREATE"),
        ("link", "LINK"),
        ("rename", "RENAME"),
        ("unlink", "REMOVE"),
        ("rmdir", "REMOVE"),
    ):
        adm = c.admit(Call(op, directory=2, name=op), 0.0)
        assert adm.rpcs == rpc and took(adm, 0.0) == pytest.approx(10 * MS)
    c.admit(Call("getattr", file=2, is_dir=True), 1.0)
    assert c.admit(Call("lookup", directory=2, name="unlink"), 1.0).gate is Gate.CACHE
    assert [c.admit(Call(op, file=2), 1.0).gate for op in ("fsyncdir", "releasedir", "forget")] == [Gate.CACHE] * 3


def test_a_name_of_a_file_open_here_is_renamed_away_and_its_last_close_removes_it():
    """nfs_unlink and nfs_rename: a file still open keeps its data under a hidden name (a
    LOOKUP that the name is free, then RENAME); the last close's REMOVE is not waited for."""
    c = client("dir_write_slots=1", "dir_write_hold_ms=5")
    gone = c.admit(Call("unlink", directory=2, name="a", busy=True), 0.0)
    assert gone.rpcs == "LOOKUP,RENAME" and took(gone, 0.0) == pytest.approx(11 * MS)
    assert c.admit(Call("unlink", directory=2, name="b"), 1.0).rpcs == "REMOVE"
    # the name went to the hidden one: a lookup of it asks again (a removed one is known absent)
    assert c.admit(Call("lookup", directory=2, name="a"), 1.5).rpcs == "LOOKUP"
    assert c.admit(Call("lookup", directory=2, name="b"), 1.5).gate is Gate.CACHE
    over = c.admit(Call("rename", directory=2, name="c", new_directory=3, new_name="d", busy=True), 2.0)
    assert over.rpcs == "LOOKUP,RENAME,RENAME" and took(over, 2.0) == pytest.approx(21 * MS)
    c.admit(Call("readdir", file=2, offset=0, size=10), 3.0)
    closed = c.admit(Call("release", file=9, directory=2), 4.0)
    assert closed.rpcs == "REMOVE" and closed.gate is Gate.CACHE and took(closed, 4.0) == 0
    # the REMOVE holds the directory's one slot for changes for 5 ms, and the cached listing is stale
    assert took(c.admit(Call("mkdir", directory=2, name="e"), 4.0), 4.0) == pytest.approx(15 * MS)
    assert c.admit(Call("readdir", file=2, offset=0, size=10), 5.0).rpcs == "READDIRPLUS"
    assert c.admit(Call("release", file=9), 6.0).gate is Gate.CACHE  # any other release sends nothing


# ---- synchronous writes as NFS sends them ----------------------------------------------------

TUTORIAL = ["stored_size=2 TiB"]  # the 2018 tutorial's file system: burst 200 MiB/s


@pytest.mark.parametrize("block_mib", [1, 4, 16])
def test_dd_oflag_sync_is_one_flush_per_write_and_faster_per_mb_with_larger_blocks(block_mib):
    def rate(mib: int) -> float:
        model = Model(apply_overrides(load_profile("efs-bursting"), TUTORIAL), 0.0)
        return dd_write(model, mib * MiB, 256 // mib, sync=True).mb_per_s

    one, this = rate(1), rate(block_mib)
    fsync = dd_write(Model(apply_overrides(load_profile("efs-bursting"), TUTORIAL), 0.0), MiB, 256).mb_per_s
    if block_mib == 1:  # one FILE_SYNC WRITE per MiB: its round trip and transfer each time
        assert this < fsync / 2
    elif block_mib == 4:  # four WRITEs into one 4 MiB stripe go one after another: little gained
        assert one < this < 1.5 * one
    else:  # WRITEs over four stripes in parallel and one COMMIT: at least twice the rate of 1 MiB
        assert 2 * one < this <= fsync * 1.001


def test_parallel_oflag_sync_writers_add_up_to_the_file_systems_limit():
    rates = {
        n: dd_writers(
            Model(apply_overrides(load_profile("efs-bursting"), TUTORIAL), 0.0), n, MiB, 64, sync=True
        ).mb_per_s
        for n in (1, 4, 16)
    }
    assert rates[4] > 2 * rates[1]
    assert rates[16] == pytest.approx(200 * MiB / 1e6, rel=0.05)  # the burst throughput


# ---- any sequence -------------------------------------------------------------------------------

calls = st.lists(
    st.tuples(
        st.sampled_from(sorted(VFS_OPS)),
        st.integers(1, 4),
        st.integers(0, 3 * MiB),
        st.floats(0, 5),
        st.sampled_from(["buffered", "sync", "direct"]),
    ),
    max_size=60,
)


@settings(max_examples=60, deadline=None)
@given(calls)
def test_any_sequence_completes_no_sooner_than_asked_and_its_time_adds_up(seq):
    c = client("burst_credit_balance=100 MiB")
    now = 0.0
    for op, inode, size, gap, mode in seq:
        now += gap
        adm = c.admit(
            Call(
                op,
                file=inode,
                directory=inode,
                name=str(size % 3),
                size=size % 200 if op == "readdir" else size,
                offset=size % 300,
                write_mode=mode if op == "write" else "buffered",
            ),
            now,
        )
        assert adm.done_at >= now
        assert adm.wait >= 0 and adm.latency >= 0 and adm.transfer >= 0
        if adm.gate is not Gate.BUFFERED:  # a buffered write's ack is its client cost, not a split
            assert adm.wait + adm.latency + adm.transfer == pytest.approx(adm.done_at - now, abs=1e-9)
        assert (adm.gate is Gate.CACHE) <= (adm.done_at == now)


@settings(max_examples=60, deadline=None)
@given(
    calls, st.lists(st.tuples(st.integers(0, 60), st.sampled_from(["setattr", "read"]), st.integers(1, 4)), max_size=20)
)
def test_the_kernels_own_requests_cost_nothing_and_change_nothing(seq, kernels):
    """FUSE's write-back cache adds requests an NFS client never sends (page fills, hand-overs
    of times): wherever they come in a sequence, each is answered at once with the gate
    `kernel` and no RPC, and every other request is admitted exactly as without them."""

    def run(extra: list) -> list:
        c = client("burst_credit_balance=100 MiB")
        now, out = 0.0, []
        for i in range(len(seq) + 1):
            for _, kop, kinode in (k for k in extra if min(k[0], len(seq)) == i):
                own = c.admit(Call(kop, file=kinode, size=4096, kernel_only=True), now)
                assert (own.gate, own.done_at, own.rpcs) == (Gate.KERNEL, now, "")
            if i == len(seq):
                break
            op, inode, size, gap, mode = seq[i]
            now += gap
            out.append(
                c.admit(
                    Call(
                        op,
                        file=inode,
                        directory=inode,
                        name=str(size % 3),
                        size=size % 200 if op == "readdir" else size,
                        offset=size % 300,
                        write_mode=mode if op == "write" else "buffered",
                    ),
                    now,
                )
            )
        return out

    assert run(kernels) == run([])


def test_an_rpc_with_a_latency_of_its_own_takes_it_and_keeps_its_class_spread():
    """OPEN and CLOSE cost their own medians (efs-2018: mountstats and kx); the rest of
    their class, GETATTR here, the class's."""
    c = client("open_latency_ms=3", "close_latency_ms=0.5")
    assert took(c.admit(Call("open", file=5), 0.0), 0.0) == pytest.approx(3 * MS)
    closed = c.admit(Call("flush", file=5, writable=False), 1.0)
    assert closed.rpcs == "CLOSE" and took(closed, 1.0) == pytest.approx(0.5 * MS)
    assert took(c.admit(Call("getattr", file=6), 2.0), 2.0) == pytest.approx(1 * MS)
    spread = Model(apply_overrides(load_profile("efs-2018"), []), 0.0)._rpc_latency["OPEN"]
    assert spread.median == pytest.approx(2.43e-3) and spread.sigma == pytest.approx(
        Model(load_profile("efs-2018"), 0.0)._meta_read.latency.sigma
    )


def test_writes_into_one_stripe_go_one_after_another_and_stripes_in_parallel():
    """diskracer-2020-dsync: four 1 MiB WRITEs into one 4 MiB stripe cost four times the
    bytes; the same four spread over four stripes cost one.  Latency 10 ms, 32 MiB/s."""

    def last_of_four(step: int) -> float:
        c = client("file_stripe_size=4 MiB", "stripe_write_mibps=32")
        calls = [Call("write", file=1, size=MiB, offset=i * step, write_mode="direct") for i in range(4)]
        return max(c.admit(call, 0.0).done_at for call in calls)

    assert last_of_four(MiB) == pytest.approx(10 * MS + 4 / 32)
    assert last_of_four(4 * MiB) == pytest.approx(10 * MS + 1 / 32)
