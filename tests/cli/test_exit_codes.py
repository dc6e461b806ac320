"""Exit code 2 for every usage error and bad input, one line, no traceback; 1 for what the
system refuses; and `fusetrace` alone prints the commands and where to start."""

import pytest
from support import fusetrace, one_line_error
from support.replays import rec, synthetic

from fusetrace import cli


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A source, an empty mount point, a trace, a faults file with an event and one with a
    bad rule: what the misuses below name."""
    base = tmp_path_factory.mktemp("misuse")
    (base / "src").mkdir()
    (base / "mnt").mkdir()
    synthetic(base / "trace", [rec(t, "getattr", "/") for t in range(0, 50, 1)])
    (base / "events.toml").write_text('[[event]]\nat = "1s"\nstall = "1s"\n')
    (base / "badrule.toml").write_text('[[rule]]\nop = "write"\nerrno = "EWHAT"\n')
    return base


# (argv with {src}, {mnt}, {trace}, {base} for the world's paths; words of the one line)
USAGE = [
    (["nosuch"], ["invalid choice: 'nosuch'"]),
    (["mount", "{src}", "{mnt}", "--set", "read_iops=5"], ["--set needs --emulate PROFILE"]),
    (["mount", "{src}", "{mnt}", "--threads", "0"], ["--threads 0: must be from 1 to"]),
    (["mount", "{src}", "{mnt}", "--threads", "many"], ["invalid int value: 'many'"]),
    (["mount", "{src}", "{mnt}", "--emulate", "efs-nosuch"], ["efs-nosuch"]),
    (["mount", "{src}", "{mnt}", "--emulate", "efs-2016", "--set", "read_iops=x"], ["--set read_iops"]),
    (["mount", "{src}", "{mnt}", "--shared", "redis://127.0.0.1:1/0"], ["--shared URL and --fs-id ID go together"]),
    (
        ["mount", "{src}", "{mnt}", "--emulate", "efs-2016", "--shared", "http://x", "--fs-id", "a"],
        ["expected a Redis URL"],
    ),
    (["mount", "{src}", "{mnt}", "--faults", "{base}/events.toml"], ["[[event]] tables need --emulate"]),
    (["mount", "{src}", "{mnt}", "--faults", "{base}/badrule.toml"], ["not an errno name"]),
    (["mount", "{src}", "{mnt}", "--host", "a b", "--trace", "{base}/t2"], ["not a host name"]),
    (["{src}", "{mnt}", "-o", "bogus"], ["-o bogus: unknown mount option"]),
    (["umount"], ["required: mountpoint"]),
    (["list", "extra"], ["unrecognized arguments: extra"]),
    (["set", "{mnt}", "read_iops"], ["expected KEY=VALUE"]),
    (["set", "{mnt}", "nosuch_key=1"], ["nosuch_key"]),
    (["fault", "{mnt}", "add", "--stall", "5s", "--timeo", "3"], ["timeo, retrans and errno go with soft = true"]),
    (["fault", "{mnt}", "add", "--errno", "EIO", "--stale"], ["exactly one effect"]),
    (["fault", "{mnt}", "add", "--op", "wirte", "--errno", "EIO"], ["wirte"]),
    (["fault", "{mnt}", "event", "--at", "1s", "--set", "novalue"], ["expected KEY=VALUE"]),
    (["report", "{trace}", "--op", "wirte"], ["--op wirte: not a traced operation"]),
    (["report", "{trace}", "--by", "color"], ["invalid choice: 'color'"]),
    (["report", "{trace}", "--since", "abc"], ["--since abc: not seconds"]),
    (["report", "{trace}", "--since", "2", "--until", "1"], ["is not before --until"]),
    (["report", "{trace}", "--path", "/[ab"], ["a [ opens a character class"]),
    (["report", "{trace}", "--plot", "x.jpg"], ["name the file .png"]),
    (["report", "{trace}", "--top", "0"], ["must be above 0"]),
    (["report", "{base}/nothing"], ["no such trace directory"]),
    (["export", "{trace}", "--format", "xml", "-o", "{base}/x"], ["invalid choice: 'xml'"]),
    (["simulate", "{trace}"], ["required: --profile"]),
    (["simulate", "{trace}", "--profile", "efs-2016", "--days", "0"], ["must be above 0"]),
    (["simulate", "{trace}", "--profile", "efs-nosuch"], ["efs-nosuch"]),
    (["compare", "{trace}", "{trace}", "--tolerance", "5000"], ["a percentage under 1000"]),
    (["fit", "{trace}", "-o", "{base}/fit.toml", "--base", "efs-nosuch"], ["--base efs-nosuch"]),
    (["replay", "{trace}", "{base}", "--speed", "-1"], ["must be above 0"]),
    (["scenario", "run"], ["name one or more scenarios, or --all"]),
    (["scenario", "run", "--all", "efs-2016-fio"], ["--all runs every scenario; give it no names"]),
    (["scenario", "run", "efs-nosuch"], ["scenario efs-nosuch: no such scenario"]),
    (["scenario", "run", "efs-2016-fio", "--clients", "65"], ["at most 64"]),
]


def _argv(argv: list[str], world) -> list[str]:
    paths = {"src": world / "src", "mnt": world / "mnt", "trace": world / "trace", "base": world}
    return [a.format(**paths) for a in argv]


@pytest.mark.parametrize("argv, words", USAGE, ids=[" ".join(a[:3]) for a, _ in USAGE])
def test_a_usage_error_exits_2_in_one_line(world, argv, words):
    done = fusetrace(*_argv(argv, world), check=False)
    one_line_error(done, *words, code=2)


# what the system refuses, with a command line that is right: 1
REFUSED = [
    (["umount", "{mnt}"], ["not mounted"]),
    (["stats", "{mnt}"], ["no fusetrace mount here"]),
    (["mount", "{base}/nosuch", "{mnt}"], ["no such directory"]),
    (["report", "{trace}", "--plot", "{base}/nosuch/x.png"], ["no such directory"]),
]


@pytest.mark.parametrize("argv, words", REFUSED, ids=[" ".join(a[:2]) for a, _ in REFUSED])
def test_what_the_system_refuses_exits_1(world, argv, words):
    done = fusetrace(*_argv(argv, world), check=False)
    one_line_error(done, *words, code=1)


def test_no_arguments_print_the_commands_and_where_to_start():
    done = fusetrace(check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert "Traceback" not in done.stderr and "the following arguments are required" not in done.stderr
    lines = done.stderr.splitlines()
    _, helps, _ = cli.build_parser()
    for name, text in helps.items():  # every command, on a line of its own with its help
        assert f"  {name}  " in next(line for line in lines if line.split()[:1] == [name]) and text in done.stderr
    assert "list" in helps and lines[-1].startswith("start with: fusetrace mount SOURCE MOUNTPOINT --trace DIR")
