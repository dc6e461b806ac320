import os


def test_write_read_list(mount):
    m = mount("--attr-timeout", "0", "--entry-timeout", "0")
    (m.mountpoint / "a").write_text("hello")
    os.mkdir(m.mountpoint / "d")
    assert (m.source / "a").read_text() == "hello"
    assert sorted(os.listdir(m.mountpoint)) == ["a", "d"]
    assert (m.mountpoint / "a").read_text() == "hello"
