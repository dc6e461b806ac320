"""Scenario files written by the tests."""


def write_scenario(tmp_path, text: str, name: str = "sc.toml"):
    """A scenario file in tmp_path: the required keys, then `text`."""
    path = tmp_path / name
    path.write_text('title = "t"\nsystem = "s"\nsource = "none"\nprofile = "efs-tiny"\n' + text)
    return path
