"""The informer's local cache: objects keyed by "namespace/name" with secondary indexes,
so controllers read from memory instead of asking the apiserver.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

Obj = dict[str, Any]
IndexFunc = Callable[[Obj], list[str]]

NAMESPACE_INDEX = "namespace"
NODE_NAME_INDEX = "spec.nodeName"
OWNER_UID_INDEX = "ownerUID"
LABEL_INDEX = "label"


def meta_namespace_key(obj: Obj) -> str:
    """"namespace/name", or "name" for cluster-scoped objects, like client-go's MetaNamespaceKeyFunc."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name', '')}" if ns else meta.get("name", "")


def split_key(key: str) -> tuple[str, str]:
    """(namespace, name); namespace is "" for cluster-scoped keys."""
    ns, _, name = key.rpartition("/")
    return ns, name


def index_by_namespace(obj: Obj) -> list[str]:
    return [(obj.get("metadata") or {}).get("namespace") or ""]


def index_by_node_name(obj: Obj) -> list[str]:
    node = (obj.get("spec") or {}).get("nodeName")
    return [node] if node else []


def index_by_owner_uid(obj: Obj) -> list[str]:
    return [ref["uid"] for ref in (obj.get("metadata") or {}).get("ownerReferences") or [] if ref.get("uid")]


def index_by_labels(obj: Obj) -> list[str]:
    """One "key=value" entry per label, so `by_index(LABEL_INDEX, "app=web")` finds matching objects."""
    return [f"{k}={v}" for k, v in ((obj.get("metadata") or {}).get("labels") or {}).items()]


BUILTIN_INDEXERS: dict[str, IndexFunc] = {
    NAMESPACE_INDEX: index_by_namespace,
    NODE_NAME_INDEX: index_by_node_name,
    OWNER_UID_INDEX: index_by_owner_uid,
    LABEL_INDEX: index_by_labels,
}


class Store:
    """A keyed object cache with named indexes kept in step on every write."""

    def __init__(
        self,
        key_func: Callable[[Obj], str] = meta_namespace_key,
        indexers: Mapping[str, IndexFunc] | None = None,
    ) -> None:
        self.key_func = key_func
        self._items: dict[str, Obj] = {}
        self._indexers: dict[str, IndexFunc] = {}
        self._indices: dict[str, dict[str, set[str]]] = {}
        self.add_indexers(indexers if indexers is not None else {NAMESPACE_INDEX: index_by_namespace})

    def add_indexers(self, indexers: Mapping[str, IndexFunc]) -> None:
        """Add indexes, computing them over what is already stored."""
        for name, func in indexers.items():
            if name in self._indexers:
                if self._indexers[name] is not func:
                    raise ValueError(f"indexer conflict: {name}")
                continue
            self._indexers[name] = func
            self._indices[name] = {}
            for key, obj in self._items.items():
                for value in func(obj):
                    self._indices[name].setdefault(value, set()).add(key)

    def _unindex(self, key: str, obj: Obj) -> None:
        for name, func in self._indexers.items():
            index = self._indices[name]
            for value in func(obj):
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[value]

    def _index(self, key: str, obj: Obj) -> None:
        for name, func in self._indexers.items():
            index = self._indices[name]
            for value in func(obj):
                index.setdefault(value, set()).add(key)

    def add(self, obj: Obj) -> Obj | None:
        """Store `obj`, returning the object it replaced, if any.

        Most updates (status changes) leave every index value as it was; those indexes are not touched.
        """
        key = self.key_func(obj)
        old = self._items.get(key)
        self._items[key] = obj
        if old is None:
            self._index(key, obj)
            return None
        indices = self._indices
        for name, func in self._indexers.items():
            values = func(obj)
            old_values = func(old)
            if values == old_values:
                continue
            index = indices[name]
            for value in old_values:
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[value]
            for value in values:
                index.setdefault(value, set()).add(key)
        return old

    update = add

    def delete(self, obj: Obj) -> Obj | None:
        return self.delete_key(self.key_func(obj))

    def delete_key(self, key: str) -> Obj | None:
        old = self._items.pop(key, None)
        if old is not None:
            self._unindex(key, old)
        return old

    def get(self, obj: Obj) -> Obj | None:
        return self._items.get(self.key_func(obj))

    def get_by_key(self, key: str) -> Obj | None:
        return self._items.get(key)

    def get_by_name(self, namespace: str | None, name: str) -> Obj | None:
        return self._items.get(f"{namespace}/{name}" if namespace else name)

    def list(self) -> list[Obj]:
        return list(self._items.values())

    def list_keys(self) -> list[str]:
        return list(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def replace(self, objs: Iterable[Obj]) -> None:
        """Swap the whole content for a fresh list, rebuilding every index."""
        self._items = {self.key_func(o): o for o in objs}
        self._indices = {name: {} for name in self._indexers}
        for key, obj in self._items.items():
            self._index(key, obj)

    def index_keys(self, index_name: str, value: str) -> list[str]:
        if index_name not in self._indices:
            raise KeyError(f"index {index_name} does not exist")
        return sorted(self._indices[index_name].get(value, ()))

    def by_index(self, index_name: str, value: str, *, ordered: bool = True) -> list[Obj]:
        """Objects with `value` in the index, by key; `ordered=False` skips the sort, for callers that
        scan thousands of objects and do not care about their order."""
        if ordered:
            return [self._items[k] for k in self.index_keys(index_name, value)]
        if index_name not in self._indices:
            raise KeyError(f"index {index_name} does not exist")
        items = self._items
        return [items[k] for k in self._indices[index_name].get(value, ())]

    def index_values(self, index_name: str) -> list[str]:
        """Every value that currently has objects in the index."""
        return list(self._indices[index_name])

    def index(self, index_name: str, obj: Obj) -> list[Obj]:
        """Objects sharing any index value with `obj` (client-go's Indexer.Index)."""
        func = self._indexers[index_name]
        keys: set[str] = set()
        for value in func(obj):
            keys |= self._indices[index_name].get(value, set())
        return [self._items[k] for k in sorted(keys)]

    def by_label(self, key: str, value: str) -> list[Obj]:
        return self.by_index(LABEL_INDEX, f"{key}={value}")

    def in_namespace(self, namespace: str) -> list[Obj]:
        return self.by_index(NAMESPACE_INDEX, namespace)
