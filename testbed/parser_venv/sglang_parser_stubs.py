"""Stand-ins for the GPU-only packages SGLang imports on the way to ServerArgs.

Test venv only (loaded from a .pth file there, never shipped to hosts): the
parser tests import ``sglang.srt.server_args`` on a CPU machine, and three
packages it imports at module level cannot be installed there usefully:
``triton`` (1 GB, GPU kernels), ``torchvision`` (PyPI's build links CUDA and
fails under CPU torch) and ``sgl_kernel`` (CUDA only). Nothing the parse runs
calls into them; they are imported for kernels defined at module level. A stub
module answers every attribute with a stub that can be called, decorated with,
subscripted and compared, so those definitions import and are never run.
"""

import importlib.abc
import importlib.machinery
import sys
import types

STUBBED = ("triton", "torchvision", "sgl_kernel")
# Asking triton for its GPU driver is how SGLang probes the platform: say there is none.
_NO_DRIVER = "driver"


class _Stub:
    """Anything: callable, decorator, attribute source, subscriptable."""

    __version__ = "3.4.0"

    def __init__(self, name="stub"):
        self._name = name

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # used as a decorator: keep the function
        return _Stub(self._name + "()")

    def __getattr__(self, name):
        return _attribute(self._name, name)

    def __getitem__(self, item):
        return _Stub(self._name + "[]")

    def __iter__(self):
        return iter(())

    def __bool__(self):
        return False

    def __mro_entries__(self, bases):
        return (object,)

    def __repr__(self):
        return "<stub %s>" % self._name


class _StubMeta(type):
    """Class attributes of a stub class are stubs too (InterpolationMode.NEAREST_EXACT)."""

    def __getattr__(cls, attr):
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        return _Stub(cls.__qualname__ + "." + attr)


def _stub_class(name):
    """A real type for CamelCase names (JITFunction, Config): isinstance and subclassing work."""
    return _StubMeta(name.rsplit(".", 1)[-1], (), {
        "__init__": lambda self, *args, **kwargs: None,
        "__getattr__": lambda self, attr: _Stub(name + "()." + attr),
        "__module__": name.rsplit(".", 1)[0],
    })


def _attribute(owner, name):
    if name.startswith("__") and name.endswith("__"):
        raise AttributeError(name)
    if name == _NO_DRIVER:
        raise RuntimeError("no GPU driver: %s is a parser-test stub" % owner)
    if name[:1].isupper() and not name.isupper():
        return _stub_class(owner + "." + name)
    return _Stub(owner + "." + name)


class _StubModule(types.ModuleType):
    __version__ = "3.4.0"

    def __getattr__(self, name):
        return _attribute(self.__name__, name)


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in STUBBED:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []
        module.__file__ = "<sglang parser test stub>"
        return module

    def exec_module(self, module):
        pass


def install():
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
