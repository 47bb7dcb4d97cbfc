"""The project's requirements (install_requires and the test extra) without version
specifiers, one per line: .ci/run installs them into a second virtual environment, so the
tests that touch other libraries' behaviour also run on the newest release of each."""

import configparser
import pathlib

from packaging.requirements import Requirement

setup = configparser.ConfigParser()
setup.read(pathlib.Path(__file__).parent.parent / "setup.cfg")
lines = (setup["options"]["install_requires"].splitlines()
         + setup["options.extras_require"]["test"].splitlines())
for line in lines:
    line = line.split("#", 1)[0].strip()
    if line:
        requirement = Requirement(line)
        extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
        marker = f"; {requirement.marker}" if requirement.marker else ""
        print(f"{requirement.name}{extras}{marker}")
