"""certificates.k8s.io/v1 CertificateSigningRequest: upstream's strategies for the main resource and its
`status` and `approval` subresources, its validation, and the signer checks of the CertificateApproval
and CertificateSigning admission plugins (which verbs on `signers` a write needs).

The requester's username, uid, groups and extra are the apiserver's to set at create; the spec never
changes afterwards. Approved and Denied conditions are written through `approval` only and never
removed; the certificate is written through `status` only, once, and only onto an approved request.
"""

from __future__ import annotations

import base64
import binascii
import copy
import re
from typing import Any

from cryptography import x509

from apiserver.registry.base import MetaStrategy, get
from apiserver.registry.strategy import Cause, Obj
from services.api import errors
from services.api import validation as v
from services.api.meta import now_rfc3339
from services.auth.identity import UserInfo

GROUP = "certificates.k8s.io"
SIGNERS = "signers"
APPROVED, DENIED, FAILED = "Approved", "Denied", "Failed"
#: upstream's KeyUsage values
USAGES = (
    "signing", "digital signature", "content commitment", "key encipherment", "key agreement", "data encipherment",
    "cert sign", "crl sign", "encipher only", "decipher only", "any", "server auth", "client auth", "code signing",
    "email protection", "s/mime", "ipsec end system", "ipsec tunnel", "ipsec user", "timestamping", "ocsp signing",
    "microsoft sgc", "netscape sgc",
)
MIN_EXPIRATION_SECONDS = 600
KUBE_APISERVER_CLIENT = "kubernetes.io/kube-apiserver-client"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_PATH = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----\r?\n(.*?)-----END \1-----", re.S)
_SIGNER_FORM = "must be a fully qualified domain and path of the form 'example.com/signer-name'"


def decode_bytes(value: Any) -> bytes | None:
    """A []byte field as JSON carries it (base64), or None when it is not valid base64."""
    if not isinstance(value, str):
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None


def parse_request(pem: bytes) -> x509.CertificateSigningRequest:
    """The CSR of a `CERTIFICATE REQUEST` PEM block; ValueError says what is wrong, as upstream's ParseCSR."""
    block = _PEM_BLOCK.search(pem)
    if block is None or block.group(1) != b"CERTIFICATE REQUEST":
        raise ValueError("PEM block type must be CERTIFICATE REQUEST")
    return x509.load_pem_x509_csr(block.group(0))


def request_of(csr: Obj) -> x509.CertificateSigningRequest:
    """The parsed spec.request of a stored CSR (validation already accepted it)."""
    return parse_request(decode_bytes(get(csr, "spec", "request")) or b"")


def signer_name_errors(name: str) -> list[str]:
    """Upstream's ValidateSignerName: `<DNS-1123 subdomain>/<path>`, at most 571 characters in all."""
    domain, sep, path = name.partition("/")
    if not sep or not domain or not path:
        return [_SIGNER_FORM]
    out = []
    labels = domain.split(".")
    if len(labels) < 2 or len(domain) > 253 or not all(_DNS_LABEL.match(label) for label in labels):
        out.append("should be a domain with at least two segments separated by dots, as a valid DNS-1123 "
                   "subdomain")
    if "/" in path or not _PATH.match(path):
        out.append("validating path: must be a valid path segment, of letters, digits, '-', '_' and '.'")
    if len(path) > 316:
        out.append("validating path: may not be more than 316 characters")
    return out


def conditions(csr: Obj) -> list[Obj]:
    return [c for c in get(csr, "status", "conditions", default=[]) if isinstance(c, dict)]


def has_condition(csr: Obj, ctype: str) -> bool:
    return any(c.get("type") == ctype and c.get("status", "True") == "True" for c in conditions(csr))


def _pem_certificates(data: bytes) -> bool:
    """Whether data is one or more PEM CERTIFICATE blocks, each a parseable certificate."""
    blocks = _PEM_BLOCK.findall(data)
    if not blocks or any(kind != b"CERTIFICATE" for kind, _ in blocks):
        return False
    try:
        x509.load_pem_x509_certificates(data)
    except ValueError:
        return False
    return True


def _spec_causes(spec: Any) -> list[Cause]:
    if not isinstance(spec, dict):
        return [errors.cause("spec.request", "Required value", "FieldValueRequired")]
    out: list[Cause] = []
    raw = decode_bytes(spec.get("request"))
    if not spec.get("request"):
        out.append(errors.cause("spec.request", "Required value", "FieldValueRequired"))
    elif raw is None:
        out.append(errors.cause("spec.request", "Invalid value: \"<binary>\": must be base64", "FieldValueInvalid"))
    else:
        try:
            if not parse_request(raw).is_signature_valid:
                raise ValueError("x509: ECDSA verification failure")
        except ValueError as exc:
            out.append(errors.cause("spec.request", f"Invalid value: []byte{{...}}: {exc}", "FieldValueInvalid"))
    usages = spec.get("usages")
    if not usages:
        out.append(errors.cause("spec.usages", "Required value", "FieldValueRequired"))
    else:
        seen: set[str] = set()
        for i, usage in enumerate(usages):
            path = f"spec.usages[{i}]"
            if usage not in USAGES:
                supported = ", ".join(f'"{u}"' for u in USAGES)
                out.append(errors.cause(path, f'Unsupported value: "{usage}": supported values: {supported}',
                                        "FieldValueNotSupported"))
            elif usage in seen:
                out.append(errors.cause(path, f'Duplicate value: "{usage}"', "FieldValueDuplicate"))
            seen.add(usage)
    signer = spec.get("signerName") or ""
    if not signer:
        out.append(errors.cause("spec.signerName", "Required value", "FieldValueRequired"))
    else:
        for message in signer_name_errors(signer):
            out.append(errors.cause("spec.signerName", f'Invalid value: "{signer}": {message}', "FieldValueInvalid"))
    expiration = spec.get("expirationSeconds")
    if expiration is not None and (not isinstance(expiration, int) or expiration < MIN_EXPIRATION_SECONDS):
        out.append(errors.cause("spec.expirationSeconds", f"Invalid value: {expiration}: may not specify a duration "
                                "less than 600 seconds (10 minutes)", "FieldValueInvalid"))
    return out


def _status_causes(csr: Obj) -> list[Cause]:
    out: list[Cause] = []
    seen: set[str] = set()
    for i, cond in enumerate(conditions(csr)):
        path = f"status.conditions[{i}]"
        ctype = cond.get("type") or ""
        if not ctype:
            out.append(errors.cause(f"{path}.type", "Required value", "FieldValueRequired"))
        status = cond.get("status") or ""
        if ctype in (APPROVED, DENIED):
            if status != "True":
                out.append(errors.cause(f"{path}.status", f'Unsupported value: "{status}": supported values: '
                                        '"True"', "FieldValueNotSupported"))
        elif status not in ("True", "False", "Unknown"):
            out.append(errors.cause(f"{path}.status", f'Unsupported value: "{status}": supported values: "False", '
                                    '"True", "Unknown"', "FieldValueNotSupported"))
        if ctype in (APPROVED, DENIED, FAILED) and ctype in seen:
            out.append(errors.cause(f"{path}.type", f'Duplicate value: "{ctype}"', "FieldValueDuplicate"))
        seen.add(ctype)
    if APPROVED in seen and DENIED in seen:
        out.append(errors.cause("status.conditions", "Invalid value: \"...\": Approved and Denied conditions are "
                                "mutually exclusive", "FieldValueInvalid"))
    certificate = get(csr, "status", "certificate")
    if certificate:
        data = decode_bytes(certificate)
        if data is None or not _pem_certificates(data):
            out.append(errors.cause("status.certificate", "Invalid value: \"<certificate data>\": must contain at "
                                    "least one CERTIFICATE PEM block and only CERTIFICATE PEM blocks",
                                    "FieldValueInvalid"))
        elif DENIED in seen or has_condition(csr, FAILED):
            out.append(errors.cause("status.certificate", "Forbidden: certificate cannot be set on a Denied or "
                                    "Failed request", "FieldValueForbidden"))
        elif APPROVED not in seen:
            out.append(errors.cause("status.certificate", "Forbidden: certificate can only be set on an Approved "
                                    "request", "FieldValueForbidden"))
    return out


def _kept_conditions(new: Obj, old: Obj) -> list[Cause]:
    """Approved and Denied, once there, stay; a set certificate never changes."""
    out: list[Cause] = []
    for ctype in (APPROVED, DENIED):
        if has_condition(old, ctype) and not has_condition(new, ctype):
            out.append(errors.cause("status.conditions", f"Forbidden: updates may not remove a condition of type "
                                    f'"{ctype}"', "FieldValueForbidden"))
    before = get(old, "status", "certificate")
    if before and get(new, "status", "certificate") != before:
        out.append(errors.cause("status.certificate", "Forbidden: updates may not modify existing certificate "
                                "content", "FieldValueForbidden"))
    return out


def _stamp_conditions(new: Obj, old: Obj | None) -> None:
    """Upstream's populateConditionTimestamps: a new or changed condition gets now as its times."""
    now = now_rfc3339()
    previous = {c.get("type"): c for c in conditions(old)} if old is not None else {}
    for cond in conditions(new):
        if not cond.get("status"):
            cond["status"] = "True"
        before = previous.get(cond.get("type"))
        if not cond.get("lastUpdateTime"):
            cond["lastUpdateTime"] = now
        if not cond.get("lastTransitionTime"):
            same = before is not None and before.get("status") == cond.get("status")
            cond["lastTransitionTime"] = (before.get("lastTransitionTime") if same else None) or now


def _keep_approval(new: Obj, old: Obj) -> None:
    """new's conditions with its Approved and Denied ones replaced by old's: those are approval's."""
    kept = [c for c in conditions(old) if c.get("type") in (APPROVED, DENIED)]
    merged = kept + [c for c in conditions(new) if c.get("type") not in (APPROVED, DENIED)]
    status = new.get("status")
    if not isinstance(status, dict):
        status = new["status"] = {}
    if merged:
        status["conditions"] = merged
    else:
        status.pop("conditions", None)
    if not status:
        new.pop("status", None)


class CertificateSigningRequestStrategy(MetaStrategy):
    """The main resource: spec set once at create (the requester's identity by the server), status not here."""

    #: upstream does not care what requests are called (kubelets name theirs node-csr-<base64url digest>);
    #: a name only has to fit in a URL path
    name_fn = staticmethod(v.name_is_path_segment)

    def defaults(self, obj: Obj) -> None:
        for cond in conditions(obj):
            if not cond.get("status"):
                cond["status"] = "True"

    def prepare_for_create(self, obj: Obj) -> None:
        obj.pop("status", None)

    def set_requester(self, obj: Obj, user: UserInfo | None) -> None:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return
        for key in ("username", "uid", "groups", "extra"):
            spec.pop(key, None)
        if user is None:
            return
        spec["username"] = user.name
        if user.uid:
            spec["uid"] = user.uid
        if user.groups:
            spec["groups"] = list(user.groups)
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra.items()}

    def validate_spec(self, obj: Obj) -> list[Cause]:
        return _spec_causes(obj.get("spec")) + _status_causes(obj)

    def prepare_for_update(self, new: Obj, old: Obj) -> None:
        new["spec"] = copy.deepcopy(old.get("spec"))
        if "status" in old:
            new["status"] = copy.deepcopy(old["status"])
        else:
            new.pop("status", None)

    def validate_spec_update(self, new: Obj, old: Obj) -> list[Cause]:
        return []

    def prepare_for_status_update(self, new: Obj, old: Obj) -> None:
        """status: the certificate and the other conditions; Approved and Denied stay as they were."""
        super().prepare_for_status_update(new, old)
        _keep_approval(new, old)
        _stamp_conditions(new, old)

    def validate_status_update(self, new: Obj, old: Obj) -> list[Cause]:
        return _status_causes(new) + _kept_conditions(new, old)

    def prepare_for_approval_update(self, new: Obj, old: Obj) -> None:
        """approval: only the conditions; spec and certificate stay as they were."""
        super().prepare_for_status_update(new, old)
        status = new.get("status") if isinstance(new.get("status"), dict) else {}
        certificate = get(old, "status", "certificate")
        if certificate:
            status["certificate"] = certificate
        else:
            status.pop("certificate", None)
        if status:
            new["status"] = status
        else:
            new.pop("status", None)
        _stamp_conditions(new, old)

    def validate_approval_update(self, new: Obj, old: Obj) -> list[Cause]:
        return _status_causes(new) + _kept_conditions(new, old)

    def field_set(self, obj: Obj) -> dict[str, str]:
        fields = super().field_set(obj)
        fields["spec.signerName"] = get(obj, "spec", "signerName", default="")
        return fields


def subject_restriction(csr: Obj) -> str:
    """Upstream's CertificateSubjectRestriction admission: why a new request is refused, or "". Nobody gets
    a system:masters client certificate from the built-in client signer."""
    if get(csr, "spec", "signerName") != KUBE_APISERVER_CLIENT:
        return ""
    try:
        request = request_of(csr)
    except ValueError:
        return ""
    organizations = request.subject.get_attributes_for_oid(x509.oid.NameOID.ORGANIZATION_NAME)
    if any(a.value == "system:masters" for a in organizations):
        return f"use of {KUBE_APISERVER_CLIENT} signer with system:masters group is not allowed"
    return ""


def signer_verb(subresource: str, new: Obj, old: Obj | None) -> str:
    """The verb on `signers` a subresource write needs, or "": every approval write needs `approve`
    (CertificateApproval), a status write that changes the certificate `sign` (CertificateSigning)."""
    if old is None:
        return ""
    if subresource == "approval":
        return "approve"
    if subresource == "status":
        certificate = get(new, "status", "certificate")
        return "sign" if certificate and certificate != get(old, "status", "certificate") else ""
    return ""


def signer_names(signer: str) -> list[str]:
    """The resource names a signer permission may be granted on: the signer and its domain's wildcard."""
    domain = signer.partition("/")[0]
    return [signer, f"{domain}/*"]
