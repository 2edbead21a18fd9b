"""Field validation in upstream's words: every check returns a list of causes
(`services.api.errors.cause`) whose field paths and messages match what the
real apiserver answers, so clients and tests that parse 422 bodies keep working.

The message of a cause is upstream's `field.Error.ErrorBody()`: the error type,
the offending value formatted the way Go prints it, and the detail.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from services.api.errors import cause
from services.api.quantity import ERR_FORMAT_WRONG as QUANTITY_ERR
from services.api.quantity import parse_quantity

Cause = dict[str, str]
NameValidator = Callable[[str, bool], list[str]]

INVALID = "FieldValueInvalid"
REQUIRED = "FieldValueRequired"
NOT_SUPPORTED = "FieldValueNotSupported"
DUPLICATE = "FieldValueDuplicate"
TOO_LONG = "FieldValueTooLong"
FORBIDDEN = "FieldValueForbidden"
NOT_FOUND = "FieldValueNotFound"

FIELD_IMMUTABLE = "field is immutable"
TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024


# -- causes -------------------------------------------------------------------


def go_value(value: Any) -> str:
    """A value as upstream's ErrorBody prints it: %q for strings, %v for numbers, JSON otherwise."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if value is None:
        return "null"
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def invalid(path: str, value: Any, detail: str) -> Cause:
    body = f"Invalid value: {go_value(value)}"
    return cause(path, f"{body}: {detail}" if detail else body, INVALID)


def required(path: str, detail: str = "") -> Cause:
    return cause(path, f"Required value: {detail}" if detail else "Required value", REQUIRED)


def not_supported(path: str, value: Any, supported: Iterable[str]) -> Cause:
    values = ", ".join(json.dumps(v) for v in supported)
    body = f"Unsupported value: {go_value(value)}"
    return cause(path, f"{body}: supported values: {values}" if values else body, NOT_SUPPORTED)


def duplicate(path: str, value: Any) -> Cause:
    return cause(path, f"Duplicate value: {go_value(value)}", DUPLICATE)


def forbidden(path: str, detail: str) -> Cause:
    return cause(path, f"Forbidden: {detail}" if detail else "Forbidden", FORBIDDEN)


def too_long(path: str, max_length: int) -> Cause:
    unit = "byte" if max_length == 1 else "bytes"
    return cause(path, f"Too long: may not be more than {max_length} {unit}", TOO_LONG)


def not_found(path: str, value: Any) -> Cause:
    return cause(path, f"Not found: {go_value(value)}", NOT_FOUND)


# -- name formats (k8s.io/apimachinery/pkg/util/validation) --------------------


def regex_error(msg: str, fmt: str, *examples: str) -> str:
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    text = msg + " (e.g. "
    for i, example in enumerate(examples):
        if i:
            text += " or "
        text += f"'{example}', "
    return text + f"regex used for validation is '{fmt}')"


def max_len_error(length: int) -> str:
    return f"must be no more than {length} characters"


DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_LABEL_ERR = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character"
)
DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_FMT = DNS1123_LABEL_FMT + r"(\." + DNS1123_LABEL_FMT + ")*"
DNS1123_SUBDOMAIN_ERR = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character"
)
DNS1123_SUBDOMAIN_MAX = 253
DNS1035_LABEL_FMT = "[a-z]([-a-z0-9]*[a-z0-9])?"
DNS1035_LABEL_ERR = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
    "start with an alphabetic character, and end with an alphanumeric character"
)
QUALIFIED_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
QUALIFIED_NAME_ERR = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
)
QUALIFIED_NAME_MAX = 63
LABEL_VALUE_FMT = "(" + QUALIFIED_NAME_FMT + ")?"
LABEL_VALUE_ERR = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)
LABEL_VALUE_MAX = 63
ENV_VAR_FMT = "[-._a-zA-Z][-._a-zA-Z0-9]*"
ENV_VAR_ERR = (
    "a valid environment variable name must consist of alphabetic characters, digits, '_', '-', or '.', "
    "and must not start with a digit"
)
CONFIG_KEY_FMT = "[-._a-zA-Z0-9]+"
CONFIG_KEY_ERR = "a valid config key must consist of alphanumeric characters, '-', '_' or '.'"

_DNS1123_LABEL = re.compile(f"^{DNS1123_LABEL_FMT}\\Z")
_DNS1123_SUBDOMAIN = re.compile(f"^{DNS1123_SUBDOMAIN_FMT}\\Z")
_DNS1035_LABEL = re.compile(f"^{DNS1035_LABEL_FMT}\\Z")
_QUALIFIED_NAME = re.compile(f"^{QUALIFIED_NAME_FMT}\\Z")
_LABEL_VALUE = re.compile(f"^{LABEL_VALUE_FMT}\\Z")
_ENV_VAR = re.compile(f"^{ENV_VAR_FMT}\\Z")
_CONFIG_KEY = re.compile(f"^{CONFIG_KEY_FMT}\\Z")
_PORT_NAME_CHARSET = re.compile("^[-a-z0-9]+\\Z")
_HAS_LETTER = re.compile("[a-z]")


def is_dns1123_label(value: str) -> list[str]:
    errs = []
    if len(value) > DNS1123_LABEL_MAX:
        errs.append(max_len_error(DNS1123_LABEL_MAX))
    if not _DNS1123_LABEL.match(value):
        if _DNS1123_SUBDOMAIN.match(value):
            errs.append("must not contain dots")
        else:
            errs.append(regex_error(DNS1123_LABEL_ERR, DNS1123_LABEL_FMT, "my-name", "123-abc"))
    return errs


def is_dns1123_subdomain(value: str) -> list[str]:
    errs = []
    if len(value) > DNS1123_SUBDOMAIN_MAX:
        errs.append(max_len_error(DNS1123_SUBDOMAIN_MAX))
    if not _DNS1123_SUBDOMAIN.match(value):
        errs.append(regex_error(DNS1123_SUBDOMAIN_ERR, DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errs


def is_dns1035_label(value: str) -> list[str]:
    errs = []
    if len(value) > DNS1123_LABEL_MAX:
        errs.append(max_len_error(DNS1123_LABEL_MAX))
    if not _DNS1035_LABEL.match(value):
        errs.append(regex_error(DNS1035_LABEL_ERR, DNS1035_LABEL_FMT, "my-name", "abc-123"))
    return errs


def is_qualified_name(value: str) -> list[str]:
    """Label and annotation keys: an optional DNS subdomain prefix, '/', and a name part."""
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs.extend("prefix part " + msg for msg in is_dns1123_subdomain(prefix))
    else:
        return [
            "a qualified name "
            + regex_error(QUALIFIED_NAME_ERR, QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > QUALIFIED_NAME_MAX:
        errs.append("name part " + max_len_error(QUALIFIED_NAME_MAX))
    if not _QUALIFIED_NAME.match(name):
        errs.append("name part " + regex_error(QUALIFIED_NAME_ERR, QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc"))
    return errs


def is_label_value(value: str) -> list[str]:
    errs = []
    if len(value) > LABEL_VALUE_MAX:
        errs.append(max_len_error(LABEL_VALUE_MAX))
    if not _LABEL_VALUE.match(value):
        errs.append(regex_error(LABEL_VALUE_ERR, LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errs


def is_env_var_name(value: str) -> list[str]:
    errs = []
    if not _ENV_VAR.match(value):
        errs.append(regex_error(ENV_VAR_ERR, ENV_VAR_FMT, "my.env-name", "MY_ENV.NAME", "MyEnvName1"))
    errs.extend(_no_dot_dirs(value))
    return errs


def is_config_map_key(value: str) -> list[str]:
    errs = []
    if len(value) > DNS1123_SUBDOMAIN_MAX:
        errs.append(max_len_error(DNS1123_SUBDOMAIN_MAX))
    if not _CONFIG_KEY.match(value):
        errs.append(regex_error(CONFIG_KEY_ERR, CONFIG_KEY_FMT, "key.name", "KEY_NAME", "key-name"))
    errs.extend(_no_dot_dirs(value))
    return errs


def _no_dot_dirs(value: str) -> list[str]:
    if value == ".":
        return ["must not be '.'"]
    if value == "..":
        return ["must not be '..'"]
    if value.startswith(".."):
        return ["must not start with '..'"]
    return []


def is_valid_port_num(port: Any) -> list[str]:
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        return ["must be between 1 and 65535, inclusive"]
    return []


def is_valid_port_name(name: str) -> list[str]:
    errs = []
    if len(name) > 15:
        errs.append("must be no more than 15 characters")
    if not _PORT_NAME_CHARSET.match(name):
        errs.append("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    if not _HAS_LETTER.search(name):
        errs.append("must contain at least one letter (a-z)")
    if "--" in name:
        errs.append("must not contain consecutive hyphens")
    if name.startswith("-") or name.endswith("-"):
        errs.append("must not begin or end with a hyphen")
    return errs


def is_path_segment_name(name: str, prefix: bool = False) -> list[str]:
    """Names that only have to be usable as one URL path segment (RBAC objects)."""
    errs = []
    if not prefix and name in (".", ".."):
        errs.append(f"may not be '{name}'")
    for bad in ("/", "%"):
        if bad in name:
            errs.append(f"may not contain '{bad}'")
    return errs


def _mask_trailing_dash(name: str) -> str:
    """generateName prefixes may end in '-': validate them as if it were a letter."""
    if len(name) > 1 and name.endswith("-"):
        return name[:-2] + "a"
    return name


def name_is_dns_subdomain(name: str, prefix: bool) -> list[str]:
    return is_dns1123_subdomain(_mask_trailing_dash(name) if prefix else name)


def name_is_dns_label(name: str, prefix: bool) -> list[str]:
    return is_dns1123_label(_mask_trailing_dash(name) if prefix else name)


def name_is_dns1035_label(name: str, prefix: bool) -> list[str]:
    return is_dns1035_label(_mask_trailing_dash(name) if prefix else name)


def name_is_path_segment(name: str, prefix: bool) -> list[str]:
    return is_path_segment_name(name, prefix)


# -- labels, annotations, selectors --------------------------------------------


def validate_labels(labels: Any, path: str) -> list[Cause]:
    if labels is None:
        return []
    if not isinstance(labels, Mapping):
        return [invalid(path, labels, "must be a map of string keys to string values")]
    causes = []
    for key, value in labels.items():
        causes.extend(invalid(path, key, msg) for msg in is_qualified_name(key))
        if not isinstance(value, str):
            causes.append(invalid(path, value, "must be a string"))
            continue
        causes.extend(invalid(path, value, msg) for msg in is_label_value(value))
    return causes


def validate_annotations(annotations: Any, path: str) -> list[Cause]:
    if annotations is None:
        return []
    if not isinstance(annotations, Mapping):
        return [invalid(path, annotations, "must be a map of string keys to string values")]
    causes = []
    total = 0
    for key, value in annotations.items():
        causes.extend(invalid(path, key, msg) for msg in is_qualified_name(key.lower()))
        total += len(key.encode()) + len(str(value).encode())
    if total > TOTAL_ANNOTATION_SIZE_LIMIT:
        causes.append(too_long(path, TOTAL_ANNOTATION_SIZE_LIMIT))
    return causes


LABEL_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def validate_label_selector(selector: Any, path: str) -> list[Cause]:
    if selector is None:
        return []
    causes = validate_labels(selector.get("matchLabels"), f"{path}.matchLabels")
    for i, req in enumerate(selector.get("matchExpressions") or []):
        rpath = f"{path}.matchExpressions[{i}]"
        op = req.get("operator", "")
        values = req.get("values") or []
        if op in ("In", "NotIn"):
            if not values:
                causes.append(required(f"{rpath}.values", "must be specified when `operator` is 'In' or 'NotIn'"))
        elif op in ("Exists", "DoesNotExist"):
            if values:
                causes.append(
                    forbidden(f"{rpath}.values", "may not be specified when `operator` is 'Exists' or 'DoesNotExist'")
                )
        else:
            causes.append(invalid(f"{rpath}.operator", op, "not a valid selector operator"))
        causes.extend(invalid(f"{rpath}.key", req.get("key", ""), m) for m in is_qualified_name(req.get("key", "")))
    return causes


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str] | None) -> bool:
    """Whether a metav1.LabelSelector matches a label set (an empty selector matches everything)."""
    if not selector:
        return True
    labels = labels or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for req in selector.get("matchExpressions") or []:
        key, op, values = req.get("key"), req.get("operator"), req.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


# -- object meta -----------------------------------------------------------------

STANDARD_FINALIZERS = ("kubernetes", "orphan", "foregroundDeletion")


def validate_finalizer_name(name: str, path: str) -> list[Cause]:
    return [invalid(path, name, msg) for msg in is_qualified_name(name)]


def validate_finalizers(finalizers: Any, path: str) -> list[Cause]:
    if not finalizers:
        return []
    causes = []
    for name in finalizers:
        causes.extend(validate_finalizer_name(name, path))
    if "orphan" in finalizers and "foregroundDeletion" in finalizers:
        causes.append(invalid(path, finalizers, "finalizer orphan and foregroundDeletion cannot be both set"))
    return causes


def validate_owner_references(refs: Any, path: str) -> list[Cause]:
    if not refs:
        return []
    causes = []
    controllers = []
    for ref in refs:
        api_version = ref.get("apiVersion", "")
        if not api_version or not api_version.rpartition("/")[2]:
            causes.append(invalid(f"{path}.apiVersion", api_version, "version must not be empty"))
        if not ref.get("kind"):
            causes.append(invalid(f"{path}.kind", ref.get("kind", ""), "kind must not be empty"))
        if not ref.get("name"):
            causes.append(invalid(f"{path}.name", ref.get("name", ""), "name must not be empty"))
        if not ref.get("uid"):
            causes.append(invalid(f"{path}.uid", ref.get("uid", ""), "uid must not be empty"))
        if ref.get("controller"):
            controllers.append(f"{ref.get('kind', '')}/{ref.get('name', '')}")
    if len(controllers) > 1:
        causes.append(
            invalid(
                path,
                refs,
                "Only one reference can have Controller set to true. Found \"true\" in references for "
                + " and ".join(controllers),
            )
        )
    return causes


def validate_object_meta(
    meta: Mapping[str, Any] | None,
    namespaced: bool,
    name_fn: NameValidator = name_is_dns_subdomain,
    path: str = "metadata",
) -> list[Cause]:
    """Upstream's ValidateObjectMetaAccessor: name/generateName, namespace, labels, annotations, owners, finalizers."""
    meta = meta or {}
    causes: list[Cause] = []
    name = meta.get("name") or ""
    generate_name = meta.get("generateName") or ""
    if generate_name:
        causes.extend(invalid(f"{path}.generateName", generate_name, m) for m in name_fn(generate_name, True))
    if not name:
        causes.append(required(f"{path}.name", "name or generateName is required"))
    else:
        causes.extend(invalid(f"{path}.name", name, m) for m in name_fn(name, False))
    namespace = meta.get("namespace") or ""
    if namespaced:
        if not namespace:
            causes.append(required(f"{path}.namespace"))
        else:
            causes.extend(invalid(f"{path}.namespace", namespace, m) for m in is_dns1123_label(namespace))
    elif namespace:
        causes.append(forbidden(f"{path}.namespace", "not allowed on this type"))
    generation = meta.get("generation")
    if isinstance(generation, int) and generation < 0:
        causes.append(invalid(f"{path}.generation", generation, "must be greater than or equal to 0"))
    causes.extend(validate_labels(meta.get("labels"), f"{path}.labels"))
    causes.extend(validate_annotations(meta.get("annotations"), f"{path}.annotations"))
    causes.extend(validate_owner_references(meta.get("ownerReferences"), f"{path}.ownerReferences"))
    causes.extend(validate_finalizers(meta.get("finalizers"), f"{path}.finalizers"))
    return causes


def validate_object_meta_update(
    new: Mapping[str, Any] | None, old: Mapping[str, Any] | None, path: str = "metadata"
) -> list[Cause]:
    """Upstream's ValidateObjectMetaAccessorUpdate: identity fields never change; the rest stays valid."""
    new, old = new or {}, old or {}
    causes: list[Cause] = []
    for key in ("name", "namespace", "uid", "creationTimestamp"):
        causes.extend(validate_immutable(new.get(key) or "", old.get(key) or "", f"{path}.{key}"))
    if not old.get("deletionTimestamp") and new.get("deletionTimestamp"):
        causes.append(
            invalid(f"{path}.deletionTimestamp", new["deletionTimestamp"],
                    "field is immutable; may only be changed via deletion")
        )
    if old.get("deletionGracePeriodSeconds") is None and new.get("deletionGracePeriodSeconds") is not None:
        causes.append(
            invalid(f"{path}.deletionGracePeriodSeconds", new["deletionGracePeriodSeconds"],
                    "field is immutable; may only be changed via deletion")
        )
    generation = new.get("generation")
    if isinstance(generation, int) and generation < 0:
        causes.append(invalid(f"{path}.generation", generation, "must be greater than or equal to 0"))
    causes.extend(validate_labels(new.get("labels"), f"{path}.labels"))
    causes.extend(validate_annotations(new.get("annotations"), f"{path}.annotations"))
    causes.extend(validate_owner_references(new.get("ownerReferences"), f"{path}.ownerReferences"))
    causes.extend(validate_finalizers(new.get("finalizers"), f"{path}.finalizers"))
    return causes


def validate_immutable(new: Any, old: Any, path: str) -> list[Cause]:
    if new != old:
        return [invalid(path, new, FIELD_IMMUTABLE)]
    return []


def validate_nonnegative(value: Any, path: str) -> list[Cause]:
    if isinstance(value, int | float) and not isinstance(value, bool) and value < 0:
        return [invalid(path, value, "must be greater than or equal to 0")]
    return []


# -- quantities -------------------------------------------------------------------

def validate_quantity(value: Any, path: str) -> list[Cause]:
    """A non-negative, parseable quantity (upstream's ValidateResourceQuantityValue)."""
    try:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise ValueError(QUANTITY_ERR)
        amount = parse_quantity(value)
    except ValueError as exc:
        return [invalid(path, value, str(exc))]
    if amount < 0:
        return [invalid(path, value, "must be greater than or equal to 0")]
    return []
