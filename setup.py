"""The metadata is in setup.cfg; this adds one build step: the wheel carries the
documentation's pages, the examples they include and the example configurations
(``plant-store docs``, ``plant-store config example``), copied from docs/, docs/examples/
and conf/ into ``plant_store/shipped/``."""

import pathlib
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = pathlib.Path(__file__).parent
SHIPPED = {"docs": ("*.rst", "*.md"), "docs/examples": ("*.py", "*.ini"),
           "conf": ("*.example", "*.ini")}


class BuildWithPages(build_py):
    def run(self):
        super().run()
        for folder, patterns in SHIPPED.items():
            target = pathlib.Path(self.build_lib) / "plant_store" / "shipped" / folder
            target.mkdir(parents=True, exist_ok=True)
            for pattern in patterns:
                for path in (ROOT / folder).glob(pattern):
                    shutil.copyfile(path, target / path.name)


setup(cmdclass={"build_py": BuildWithPages})
