"""A radix tree over token ids whose nodes carry device and host KV slot indices.

Modelled on SGLang's `RadixCache` / `HiRadixCache` tree: a node's key is a run of token
ids, its `device_value` the device-pool slots holding that run's KV (None once evicted
from the device), its `host_value` the host-pool slots of its backup (None until written
through). Lock references pin a node and its ancestors against eviction while a request
uses them or a copy is in flight; eviction is least-recently-used over unlocked leaves.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

_node_ids = itertools.count()


@dataclass(eq=False)
class TreeNode:
    key: tuple[int, ...] = ()
    parent: TreeNode | None = None
    children: dict[int, TreeNode] = field(default_factory=dict)
    device_value: torch.Tensor | None = None
    host_value: torch.Tensor | None = None
    lock_ref: int = 0
    hit_count: int = 0
    last_access: int = 0
    id: int = field(default_factory=lambda: next(_node_ids))

    @property
    def evicted(self) -> bool:
        """On the host only: its device slots were freed after a backup."""
        return self.device_value is None

    @property
    def backuped(self) -> bool:
        return self.host_value is not None


@dataclass(frozen=True)
class MatchResult:
    """What a prefix match found.

    `device_indices` are the device slots of the longest matched prefix that is on the
    device; `last_device_node` ends it. Past it, `host_hit_length` more tokens are
    matched on the host only, ending at `last_host_node` (== last_device_node when 0).
    """

    device_indices: torch.Tensor
    last_device_node: TreeNode
    last_host_node: TreeNode
    host_hit_length: int


@dataclass(frozen=True)
class InsertResult:
    node: TreeNode  # the node that ends the inserted key
    duplicate_slots: torch.Tensor  # caller's slots for a prefix already on the device


class RadixTree:
    def __init__(self) -> None:
        self.root = TreeNode()
        self.root.lock_ref = 1  # the root is never evicted
        self._clock = itertools.count(1)
        self.device_tokens = 0  # tokens whose KV lives in the device pool
        self.host_tokens = 0  # tokens backed up in the host pool

    # -- lookup -------------------------------------------------------------
    def match_prefix(self, key: tuple[int, ...]) -> MatchResult:
        node, matched = self.root, 0
        device_parts: list[torch.Tensor] = []
        last_device = self.root
        host_hit = 0
        now = next(self._clock)
        while matched < len(key):
            child = node.children.get(key[matched])
            if child is None:
                break
            shared = _common_prefix_length(child.key, key[matched:])
            if shared < len(child.key):
                child = self._split(child, shared)
            child.last_access = now
            child.hit_count += 1
            if child.evicted:
                host_hit += len(child.key)
            elif host_hit == 0:
                device_parts.append(child.device_value)
                last_device = child
            node, matched = child, matched + shared
        return MatchResult(_cat(device_parts), last_device, node if host_hit else last_device, host_hit)

    # -- mutation -----------------------------------------------------------
    def insert(self, key: tuple[int, ...], device_value: torch.Tensor) -> InsertResult:
        """Insert `key` with device slots for all of it.

        Where a prefix is already on the device the tree keeps its own slots and hands
        the caller's back as `duplicate_slots`, for the caller to free.
        """
        node, matched = self.root, 0
        now = next(self._clock)
        duplicates: list[torch.Tensor] = []
        while matched < len(key):
            child = node.children.get(key[matched])
            if child is None:
                leaf = TreeNode(key=key[matched:], parent=node, last_access=now)
                leaf.device_value = device_value[matched:].clone()
                node.children[key[matched]] = leaf
                self.device_tokens += len(leaf.key)
                return InsertResult(leaf, _cat(duplicates))
            shared = _common_prefix_length(child.key, key[matched:])
            if shared < len(child.key):
                child = self._split(child, shared)
            child.last_access = now
            part = device_value[matched : matched + shared]
            if child.evicted:
                child.device_value = part.clone()  # reuse the new slots for a host-only node
                self.device_tokens += len(child.key)
            else:
                duplicates.append(part)
            node, matched = child, matched + shared
        return InsertResult(node, _cat(duplicates))

    def _split(self, child: TreeNode, at: int) -> TreeNode:
        """Split `child` so that a new node holds its first `at` tokens; returns it."""
        parent = child.parent
        assert parent is not None
        head = TreeNode(
            key=child.key[:at],
            parent=parent,
            lock_ref=child.lock_ref,
            hit_count=child.hit_count,
            last_access=child.last_access,
        )
        if child.device_value is not None:
            head.device_value = child.device_value[:at]
            child.device_value = child.device_value[at:]
        if child.host_value is not None:
            head.host_value = child.host_value[:at]
            child.host_value = child.host_value[at:]
        child.key = child.key[at:]
        child.parent = head
        head.children[child.key[0]] = child
        parent.children[head.key[0]] = head
        return head

    # -- locks --------------------------------------------------------------
    def inc_lock_ref(self, node: TreeNode) -> None:
        while node is not self.root:
            node.lock_ref += 1
            node = node.parent  # type: ignore[assignment]

    def dec_lock_ref(self, node: TreeNode) -> None:
        path = self.path_to(node)
        if any(n.lock_ref <= 0 for n in path):  # refuse before changing anything
            raise ValueError(f"lock_ref underflow on the path to node {node.id}")
        for n in path:
            n.lock_ref -= 1

    # -- eviction -----------------------------------------------------------
    def evictable_device_leaves(self) -> list[TreeNode]:
        """Unlocked nodes on the device none of whose children are on the device."""
        return self._nodes_where(_is_device_leaf)

    def evict_device(self, num_tokens: int) -> tuple[list[torch.Tensor], list[TreeNode]]:
        """Free at least `num_tokens` device slots, least recently used first.

        A node backed up on the host keeps living there (evicted); one that is not is
        deleted. Returns the freed slot tensors and the nodes that were deleted.
        """
        deleted: list[TreeNode] = []

        def evict(node: TreeNode) -> torch.Tensor:
            value, node.device_value = node.device_value, None
            self.device_tokens -= len(node.key)
            if not node.backuped and not node.children:
                self._delete(node)
                deleted.append(node)
            assert value is not None
            return value

        return self._evict_lru(self.evictable_device_leaves(), num_tokens, evict, _is_device_leaf), deleted

    def evict_host(self, num_tokens: int) -> list[torch.Tensor]:
        """Free at least `num_tokens` host slots from unlocked, device-evicted host leaves."""

        def evict(node: TreeNode) -> torch.Tensor:
            value, node.host_value = node.host_value, None
            self.host_tokens -= len(node.key)
            self._delete(node)
            assert value is not None
            return value

        return self._evict_lru(self._nodes_where(_is_host_leaf), num_tokens, evict, _is_host_leaf)

    def _evict_lru(
        self,
        leaves: list[TreeNode],
        num_tokens: int,
        evict: Callable[[TreeNode], torch.Tensor],
        is_leaf: Callable[[TreeNode], bool],
    ) -> list[torch.Tensor]:
        """Evict least recently used leaves until `num_tokens` are freed; a parent that
        becomes a leaf joins the candidates."""
        heap = [(n.last_access, n.id, n) for n in leaves]
        heapq.heapify(heap)
        freed: list[torch.Tensor] = []
        total = 0
        while total < num_tokens and heap:
            node = heapq.heappop(heap)[2]
            parent = node.parent
            freed.append(evict(node))
            total += len(node.key)
            if parent is not None and parent is not self.root and is_leaf(parent):
                heapq.heappush(heap, (parent.last_access, parent.id, parent))
        return freed

    def _nodes_where(self, predicate: Callable[[TreeNode], bool]) -> list[TreeNode]:
        found = []
        stack = [self.root]
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            if node is not self.root and predicate(node):
                found.append(node)
        return found

    def _delete(self, node: TreeNode) -> None:
        parent = node.parent
        assert parent is not None and not node.children
        del parent.children[node.key[0]]
        node.parent = None

    def record_backup(self, node: TreeNode, host_value: torch.Tensor) -> None:
        node.host_value = host_value
        self.host_tokens += len(node.key)

    def record_load_back(self, node: TreeNode, device_value: torch.Tensor) -> None:
        node.device_value = device_value
        self.device_tokens += len(node.key)

    def path_to(self, node: TreeNode) -> list[TreeNode]:
        """Nodes from just below the root down to `node`."""
        path = []
        while node is not self.root and node is not None:
            path.append(node)
            node = node.parent  # type: ignore[assignment]
        return path[::-1]


def _common_prefix_length(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _is_device_leaf(node: TreeNode) -> bool:
    """Evictable from the device: unlocked, on it, no child on it, and able to go cleanly
    (backed up, so it lives on in the host, or childless, so it is deleted)."""
    return (
        not node.evicted
        and node.lock_ref == 0
        and (node.backuped or not node.children)
        and all(c.evicted for c in node.children.values())
    )


def _is_host_leaf(node: TreeNode) -> bool:
    return not node.children and node.lock_ref == 0 and node.evicted and node.backuped


def _cat(parts: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat(parts) if parts else torch.empty(0, dtype=torch.int64)
