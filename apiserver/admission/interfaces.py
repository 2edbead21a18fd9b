"""What an admission plugin is, as upstream's k8s.io/apiserver/pkg/admission has it: a plugin with a
name that handles some operations on some resources and mutates the object (MutationInterface),
validates it (ValidationInterface) or both.

The chain (chain.py) runs the mutating plugins before the object is defaulted and validated and
the validating ones after, just before it is stored, each phase in upstream's plugin order.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from services.api.catalog import Catalog, Resource
from services.auth.identity import UserInfo

if TYPE_CHECKING:
    from apiserver.storage.cache import WatchCache

Obj = dict[str, Any]

#: upstream's admission.Operation values
CREATE = "CREATE"
UPDATE = "UPDATE"
DELETE = "DELETE"
CONNECT = "CONNECT"
OPERATIONS = (CREATE, UPDATE, DELETE, CONNECT)


@dataclass(slots=True)
class Reinvocation:
    """Upstream's reinvocation context: a plugin asks for the mutating chain to run once more (a webhook
    changed the object, so the built-in plugins see it again), and keeps what it needs between the runs."""

    requested: bool = False
    #: the second run is under way
    again: bool = False
    memory: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Attributes:
    """One write as the plugins see it (upstream's admission.Attributes)."""

    resource: Resource
    operation: str
    #: the object written; on DELETE the object being deleted is `old`, as upstream's oldObject
    obj: Obj | None
    old: Obj | None = None
    subresource: str = ""
    dry_run: bool = False
    #: who writes (upstream's GetUserInfo); None for writes the server makes itself
    user: UserInfo | None = None
    reinvocation: Reinvocation = field(default_factory=Reinvocation)

    @property
    def name(self) -> str:
        meta = (self.obj if self.obj is not None else self.old or {}).get("metadata") or {}
        return meta.get("name") or meta.get("generateName") or ""

    @property
    def namespace(self) -> str:
        return ((self.obj if self.obj is not None else self.old or {}).get("metadata") or {}).get("namespace") or ""


@dataclass(frozen=True)
class PluginConfig:
    """What plugins are built from: upstream's plugin initializers (informers, here the watch cache)
    and the legacy flags some plugins read."""

    cache: WatchCache
    root: str = "/registry/"
    #: the served resources, custom ones included (webhooks' matchPolicy Equivalent finds peers here)
    catalog: Catalog | None = None
    #: DefaultTolerationSeconds: --default-not-ready-toleration-seconds, --default-unreachable-toleration-seconds
    not_ready_toleration_seconds: int = 300
    unreachable_toleration_seconds: int = 300
    #: --admission-control-config-file: each configured plugin's configuration object, by plugin name
    plugin_configs: Mapping[str, Any] = field(default_factory=dict)


class Plugin:
    """A named admission plugin; a subclass also derives from MutationInterface, ValidationInterface or both."""

    #: upstream's plugin name, the one --enable-admission-plugins takes
    name: ClassVar[str]
    #: the operations it acts on (upstream's admission.Handler)
    operations: ClassVar[frozenset[str]] = frozenset({CREATE})
    #: the (group, plural) pairs it acts on; None for every resource
    resources: ClassVar[frozenset[tuple[str, str]] | None] = None
    #: the subresources it acts on; "" is the resource itself, None every subresource
    subresources: ClassVar[frozenset[str] | None] = frozenset({""})

    def __init__(self, config: PluginConfig) -> None:
        self.config = config

    def handles(self, res: Resource) -> bool:
        """Whether the plugin has anything to do with this resource; asked once per resource."""
        return self.resources is None or (res.group, res.plural) in self.resources


class MutationInterface(Plugin, ABC):
    """A plugin that may change the object before it is defaulted and validated."""

    @abstractmethod
    async def admit(self, a: Attributes) -> None:
        """Change `a.obj` in place, or raise a StatusError to refuse the write."""


class ValidationInterface(Plugin, ABC):
    """A plugin that may refuse the defaulted, valid object (or charge for it) but never changes it."""

    @abstractmethod
    async def validate(self, a: Attributes) -> None:
        """Raise a StatusError to refuse the write."""
