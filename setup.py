"""Ship configs/, kernels/ and data/models/ inside the wheel.

The folders stay at the repository root (the product's layout); a regular build copies them
to ``cognate/_data/{configs,kernels,models}`` in the built package, where
``cognate.paths`` finds them first. An editable install builds nothing here: ``cognate.paths``
then falls back to the source tree.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
# package-data folder (under cognate/_data) -> source folder (relative to the repository root)
PACKAGE_DATA = {"configs": "configs", "kernels": "kernels", "models": "data/models"}
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "*.o")


class BuildPyWithData(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # editable: cognate.paths reads the source tree
        target = Path(self.build_lib) / "cognate" / "_data"
        for name, source in PACKAGE_DATA.items():
            dest = target / name
            if dest.exists():
                shutil.rmtree(dest)
            shutil.copytree(ROOT / source, dest, ignore=IGNORE)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = super().get_outputs(include_bytecode)
        if getattr(self, "editable_mode", False):
            return outputs
        target = Path(self.build_lib) / "cognate" / "_data"
        for name, source in PACKAGE_DATA.items():
            for path in (ROOT / source).rglob("*"):
                if path.is_file() and not IGNORE(str(path.parent), [path.name]):
                    outputs.append(str(target / name / path.relative_to(ROOT / source)))
        return outputs


setup(cmdclass={"build_py": BuildPyWithData})
