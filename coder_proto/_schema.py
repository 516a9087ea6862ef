"""JSON Schema validation by the ``jsonschema`` library, with readable problems.

The schema's ``$schema`` picks the draft (2020-12 when it names none). ``compile_schema``
checks the schema itself first: an unknown ``$schema``, a schema the draft's meta-schema
rejects, or a ``$ref`` that does not resolve inside the schema is a ``CoderAgentError`` (no
reference is ever fetched). ``problems`` turns the library's errors into one line each, path
first: ``$.items[2].name: expected string``.

``coder_proto._agent.tools`` imports this module when the first schema is compiled, so importing the
core does not import ``jsonschema``.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Iterable, Mapping
from typing import Any, Final

import jsonschema
import jsonschema.protocols
import referencing
import referencing.exceptions
import referencing.jsonschema

from ._errors import CoderAgentError
from ._json import js_stringify
from ._timestamps import is_rfc3339_time, parse_rfc3339

__all__ = ["CHECKED_FORMATS", "Validator", "compile_schema", "problems"]

Validator: typing.TypeAlias = jsonschema.protocols.Validator

#: The ``format`` values that are checked. The list is fixed (it does not grow when optional
#: packages happen to be installed) so the same input is accepted everywhere; any other
#: format is an annotation only, as JSON Schema allows for formats a validator does not know.
CHECKED_FORMATS: Final = (
    "date",
    "date-time",
    "email",
    "idn-email",
    "ipv4",
    "ipv6",
    "regex",
    "time",
    "uuid",
)

# The library's own checkers for the formats it checks with the standard library alone, plus
# RFC 3339 date-time and time (it needs an optional package for those).
_FORMAT_CHECKER: Final = jsonschema.FormatChecker(
    [f for f in CHECKED_FORMATS if f not in ("date-time", "time")]
)
_FORMAT_CHECKER.checks("date-time")(
    lambda v: not isinstance(v, str) or parse_rfc3339(v) is not None
)
_FORMAT_CHECKER.checks("time")(lambda v: not isinstance(v, str) or is_rfc3339_time(v))

# References resolve inside the schema only: an empty
# registry without a ``retrieve`` function, so a remote ``$ref`` is an error at definition
# and never a network request.
_REGISTRY: Final = referencing.Registry()
_REF_KEYWORDS: Final = ("$ref", "$dynamicRef", "$recursiveRef")


def compile_schema(schema: Any, what: str = "schema") -> Validator:
    """A validator for ``schema``, after checking the schema itself: its ``$schema`` names a
    draft the library knows (none: 2020-12), it is valid against that draft's meta-schema,
    and every ``$ref`` resolves inside it. Raises ``CoderAgentError`` beginning with ``what``
    otherwise."""
    if not isinstance(schema, Mapping | bool):
        raise CoderAgentError(f"{what} must be a JSON object")
    # The draft: the one ``$schema`` names, 2020-12 without it.
    cls: Any = jsonschema.Draft202012Validator
    if isinstance(schema, Mapping) and "$schema" in schema:
        dialect = schema["$schema"]
        unknown: Any = None
        cls = (
            jsonschema.validators.validator_for(schema, default=unknown)
            if isinstance(dialect, str)
            else None
        )
        if cls is None:
            raise CoderAgentError(
                f"{what}: unknown $schema {dialect!r} (known: drafts 2020-12, 2019-09, 7, 6, 4 "
                "and 3; leave it out for 2020-12)"
            )
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise CoderAgentError(
            f"{what} is not a valid JSON Schema: {_json_path(exc.absolute_path)}: {exc.message}"
        ) from None
    validator = cls(schema, registry=_REGISTRY, format_checker=_FORMAT_CHECKER)
    _check_references(schema, cls, what)
    return typing.cast(Validator, validator)


def _check_references(schema: Any, cls: Any, what: str) -> None:
    specification = referencing.jsonschema.specification_with(
        cls.META_SCHEMA["$schema"], default=referencing.jsonschema.DRAFT202012
    )
    root = specification.create_resource(schema)
    resolver = _REGISTRY.resolver_with_root(root)
    pending = [(root, resolver.in_subresource(root))]
    while pending:
        resource, scope = pending.pop()
        contents = resource.contents
        if isinstance(contents, Mapping):
            for keyword in _REF_KEYWORDS:
                ref = contents.get(keyword)
                if isinstance(ref, str):
                    try:
                        scope.lookup(ref)
                    except referencing.exceptions.Unresolvable:
                        raise CoderAgentError(
                            f"{what}: {keyword} {ref!r} does not resolve (references must "
                            "point inside the schema)"
                        ) from None
        pending += ((sub, scope.in_subresource(sub)) for sub in resource.subresources())


def problems(validator: Validator, value: Any) -> list[str]:
    """The problems of ``value`` under a validator from ``compile_schema``."""
    found: list[str] = []
    for error in validator.iter_errors(value):
        for problem in _describe(error):
            if problem not in found:
                found.append(problem)
    return found


_NAME_RE_PATH: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def _json_path(parts: Iterable[str | int]) -> str:
    out = "$"
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _NAME_RE_PATH.match(part):
            out += f".{part}"
        else:
            out += f"[{_text(part)}]"
    return out


def _text(value: Any) -> str:
    """A schema value as JSON text (what the model sees in the schema), else its repr."""
    try:
        return js_stringify(value)
    except TypeError:
        return repr(value)


def _plural(count: Any, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


# Keywords whose values are maps from property (or definition) names to schemas: a
# "propertyNames" right after one of them is a name, not the keyword.
_NAME_MAPS: Final = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"}
)


def _checks_a_property_name(error: jsonschema.ValidationError) -> bool:
    previous: object = None
    for part in error.relative_schema_path:
        if part == "propertyNames" and previous not in _NAME_MAPS:
            return True
        previous = part
    return False


def _describe(error: jsonschema.ValidationError) -> list[str]:
    """One or more readable problems for a library error."""
    path = _json_path(error.absolute_path)
    keyword = error.validator
    expected: Any = error.validator_value
    instance = error.instance
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    if _checks_a_property_name(error):
        # The value checked is a property name of the object at ``path``.
        return [f"{path}: property name {_text(instance)} {_describe_value(error)}"]
    if keyword == "required" and isinstance(expected, list) and isinstance(instance, Mapping):
        return [
            f"{_json_path([*error.absolute_path, name])}: required"
            for name in expected
            if name not in instance
        ]
    if keyword in ("dependentRequired", "dependencies") and isinstance(instance, Mapping):
        out = []
        for trigger, needed in expected.items():
            if trigger in instance and isinstance(needed, list):
                out += [
                    f"{_json_path([*error.absolute_path, name])}: required when {_text(trigger)} is present"
                    for name in needed
                    if name not in instance
                ]
        if out:
            return out
    if keyword == "additionalProperties" and expected is False and isinstance(instance, Mapping):
        known = schema.get("properties", {})
        patterns = list(schema.get("patternProperties", {}))
        return [
            f"{_json_path([*error.absolute_path, name])}: unexpected property"
            for name in instance
            if name not in known and not any(re.search(p, name) for p in patterns)
        ]
    return [f"{path}: {_describe_value(error)}"]


def _describe_value(error: jsonschema.ValidationError) -> str:
    keyword = error.validator
    expected: Any = error.validator_value
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    if keyword is None:  # the schema ``false``
        return "no value is allowed here"
    if keyword == "type":
        names = expected if isinstance(expected, list) else [expected]
        return "expected " + " or ".join(str(n) for n in names)
    if keyword == "enum":
        return f"expected one of {_text(expected)}"
    if keyword == "const":
        return f"expected {_text(expected)}"
    if keyword == "format":
        return f"not a valid {expected}"
    if keyword == "minLength":
        return f"shorter than {_plural(expected, 'character')}"
    if keyword == "maxLength":
        return f"longer than {_plural(expected, 'character')}"
    if keyword == "pattern":
        return f"does not match {_text(expected)}"
    if keyword == "minimum":
        return f"{'not above' if schema.get('exclusiveMinimum') is True else 'below'} {_text(expected)}"
    if keyword == "maximum":
        return f"{'not below' if schema.get('exclusiveMaximum') is True else 'above'} {_text(expected)}"
    if keyword == "exclusiveMinimum":
        return f"not above {_text(expected)}"
    if keyword == "exclusiveMaximum":
        return f"not below {_text(expected)}"
    if keyword in ("multipleOf", "divisibleBy"):
        return f"not a multiple of {_text(expected)}"
    if keyword == "minItems":
        return f"fewer than {_plural(expected, 'item')}"
    if keyword == "maxItems":
        return f"more than {_plural(expected, 'item')}"
    if keyword in ("items", "additionalItems") and expected is False:
        allowed = len(schema.get("prefixItems", schema.get("items", ())) or ())
        return f"more than {_plural(allowed, 'item')}"
    if keyword == "uniqueItems":
        return "items are not unique"
    if keyword == "minProperties":
        return f"fewer than {_plural(expected, 'property').replace('propertys', 'properties')}"
    if keyword == "maxProperties":
        return f"more than {_plural(expected, 'property').replace('propertys', 'properties')}"
    if keyword == "contains":
        return "no item matches the required shape"
    if keyword == "minContains":
        return f"fewer than {_plural(expected, 'item')} match the required shape"
    if keyword == "maxContains":
        return f"more than {_plural(expected, 'item')} match the required shape"
    if keyword == "not":
        return f"must not match {_text(expected)}"
    if keyword in ("anyOf", "oneOf"):
        if keyword == "oneOf" and not error.context:
            return "matches more than one of the allowed shapes"
        # The library's pick among the branches' errors: the deepest one, in a branch whose
        # type the value has.
        best = jsonschema.exceptions.best_match([error])
        hint = f" (closest: {_describe(best)[0]})" if best is not error else ""
        return f"does not match any of the allowed shapes{hint}"
    message = error.message
    return message[:1].lower() + message[1:]
