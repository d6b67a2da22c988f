"""Every public callable of the package is fully annotated: the package ships `py.typed`, so a user's type
checker reads these signatures. Public means a function or class named in a curated `__all__` (the top level
and every subpackage: the packages tests/test_public_api.py checks, and lm/), with a class's ``__init__`` and
public methods, its own and those it inherits from the package's classes. Each parameter but ``self``/``cls``
needs an annotation, and each callable but ``__init__`` a return annotation."""

import importlib
import inspect
import pkgutil
import warnings

import rubricforge_dspy

# Every package of the library (test_public_api.py checks each has a curated `__all__`; lm/ is walked too). Found
# by walking, not imported from test_public_api.py: no test module imports another (tests/test_layout.py).
WALKED = ["rubricforge_dspy"] + sorted(info.name for info in pkgutil.walk_packages(rubricforge_dspy.__path__,
                                                                                  "rubricforge_dspy.") if info.ispkg)


def unannotated(function):
    """The names of `function`'s parameters without an annotation, and ``"return"`` if it lacks one."""
    signature = inspect.signature(function)
    missing = [parameter.name for index, parameter in enumerate(signature.parameters.values())
               if parameter.annotation is inspect.Parameter.empty
               and not (index == 0 and parameter.name in ("self", "cls"))]
    if signature.return_annotation is inspect.Signature.empty and function.__name__ != "__init__":
        missing.append("return")
    return missing


def methods(cls):
    """``name -> function`` for `cls`'s ``__init__`` and public methods (properties: their getter), defined by
    it or by one of the package's classes it derives from; what DSPy or the standard library defines is theirs."""
    found = {}
    for owner in reversed(cls.__mro__):
        if not owner.__module__.startswith("rubricforge_dspy"):
            continue
        for name, value in vars(owner).items():
            if name.startswith("_") and name != "__init__":
                continue
            if isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            elif isinstance(value, property):
                value = value.fget
            if inspect.isfunction(value):
                found[name] = value
    return found


def missing_annotations(module):
    """``qualified name -> missing parameter names`` over the public callables of `module`'s ``__all__``."""
    missing = {}
    for name in module.__all__:
        value = getattr(module, name)
        if inspect.isclass(value):
            callables = {f"{name}.{method}": function for method, function in methods(value).items()}
        elif inspect.isfunction(value):
            callables = {name: value}
        else:
            continue
        for qualified, function in callables.items():
            if gaps := unannotated(function):
                missing[qualified] = gaps
    return missing


def test_every_public_callable_is_annotated():
    problems = []
    for package in WALKED:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # names moved off the top level still resolve
            missing = missing_annotations(importlib.import_module(package))
        problems += [f"{package}.{name}: {', '.join(gaps)}" for name, gaps in missing.items()]
    assert not problems, "public callables missing annotations:\n" + "\n".join(sorted(problems))


def test_the_walk_finds_an_unannotated_parameter_return_and_method():
    class Sample:
        def __init__(self, size): ...

        def fine(self, size: int) -> int: ...

        def bare(self, *args: int, **options) -> None: ...

        @property
        def width(self): ...

        def _private(self, anything): ...

    Sample.__module__ = "rubricforge_dspy.sample"

    def half(count: int, scale): ...

    def whole(count: int, scale: float = 1.0) -> float: ...

    module = type("Module", (), {"__all__": ["Sample", "half", "whole", "CONSTANT"], "Sample": Sample,
                                 "half": half, "whole": whole, "CONSTANT": 3})
    assert missing_annotations(module) == {"Sample.__init__": ["size"], "Sample.bare": ["options"],
                                           "Sample.width": ["return"], "half": ["scale", "return"]}


def test_the_walk_checks_methods_inherited_from_the_package_not_from_elsewhere():
    class Base:
        def shared(self, value): ...

    Base.__module__ = "rubricforge_dspy.sample"

    class Child(Base):
        pass

    Child.__module__ = "rubricforge_dspy.sample"

    class Foreign:
        def theirs(self, value): ...

    Foreign.__module__ = "dspy.sample"

    class Ours(Foreign):
        pass

    Ours.__module__ = "rubricforge_dspy.sample"
    module = type("Module", (), {"__all__": ["Child", "Ours"], "Child": Child, "Ours": Ours})
    assert missing_annotations(module) == {"Child.shared": ["value", "return"]}
