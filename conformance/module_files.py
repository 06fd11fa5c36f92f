"""One file of a package loaded by path as a module of its dotted name, without importing the
package (an upstream package whose __init__ patches vLLM or needs what is not installed)."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path


def load_module_file(name: str, path: Path) -> types.ModuleType:
    """The module `name` run from `path`; registered in sys.modules first, as an import would."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} is not a Python module file (for {name})")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
