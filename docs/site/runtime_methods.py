"""A griffe extension for the API reference: methods the adapters build at import time.

The clients' and agents' operations are written once and attached to each class as
``create_chat = _op(ChatOperations.create_chat)``; read from the source, that is an attribute with
no docstring. This extension asks the running class instead and, where it finds a function,
documents the member as that function: its signature and its docstring.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import griffe

_KINDS = {
    inspect.Parameter.POSITIONAL_ONLY: griffe.ParameterKind.positional_only,
    inspect.Parameter.POSITIONAL_OR_KEYWORD: griffe.ParameterKind.positional_or_keyword,
    inspect.Parameter.VAR_POSITIONAL: griffe.ParameterKind.var_positional,
    inspect.Parameter.KEYWORD_ONLY: griffe.ParameterKind.keyword_only,
    inspect.Parameter.VAR_KEYWORD: griffe.ParameterKind.var_keyword,
}


def _text(value: Any) -> str | None:
    if value is inspect.Parameter.empty or value is inspect.Signature.empty:
        return None
    return value if isinstance(value, str) else inspect.formatannotation(value)


def _function(name: str, func: Any, lineno: int | None) -> griffe.Function:
    signature = inspect.signature(func)
    parameters = griffe.Parameters(
        *(
            griffe.Parameter(
                p.name,
                annotation=_text(p.annotation),
                kind=_KINDS[p.kind],
                default=None if p.default is inspect.Parameter.empty else repr(p.default),
            )
            for p in signature.parameters.values()
        )
    )
    function = griffe.Function(
        name,
        lineno=lineno,
        parameters=parameters,
        returns=_text(signature.return_annotation),
        docstring=griffe.Docstring(inspect.cleandoc(func.__doc__)),
    )
    if inspect.iscoroutinefunction(func):
        function.labels.add("async")
    return function


class RuntimeMethods(griffe.Extension):
    """Document a class attribute whose value is a function built at import time."""

    def on_class_members(self, *, cls: griffe.Class, **kwargs: Any) -> None:
        try:
            runtime = getattr(importlib.import_module(cls.module.path), cls.name)
        except (ImportError, AttributeError):
            return
        for name, member in list(cls.members.items()):
            if member.is_alias or not member.is_attribute or member.docstring:
                continue
            func = inspect.getattr_static(runtime, name, None)
            if inspect.isfunction(func) and func.__doc__:
                cls.set_member(name, _function(name, func, member.lineno))
