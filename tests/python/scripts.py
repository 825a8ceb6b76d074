"""The repository's scripts as modules, for tests that call their functions: programs run by path
(reports/make_report.py, ci/kernel_time.py) are not part of the installed package, so they are
loaded from their files."""
import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def import_script(relative_path: str):
    """The module of REPO/relative_path, loaded once and named after its file."""
    path = REPO / relative_path
    if path.stem not in sys.modules:
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module  # before running it: dataclasses look their module up there
        spec.loader.exec_module(module)
    return sys.modules[path.stem]
