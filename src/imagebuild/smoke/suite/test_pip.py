"""pip check: every installed distribution's requirements are installed, in versions they accept."""


def test_pip_check(check):
    check("pip.check")
