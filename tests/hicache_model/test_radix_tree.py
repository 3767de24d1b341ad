"""RadixTree: prefix matching, splitting, insertion, lock references, eviction and accounting."""

from __future__ import annotations

import pytest
import torch

from hicache_model.radix_tree import RadixTree, TreeNode


def slots(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


def as_list(t: torch.Tensor | None) -> list[int] | None:
    return None if t is None else t.tolist()


def all_nodes(tree: RadixTree) -> list[TreeNode]:
    found, stack = [], list(tree.root.children.values())
    while stack:
        node = stack.pop()
        found.append(node)
        stack.extend(node.children.values())
    return found


def counted_tokens(tree: RadixTree) -> tuple[int, int]:
    """(device, host) tokens found by walking the tree, to compare with its running counters."""
    nodes = all_nodes(tree)
    device = sum(len(n.key) for n in nodes if n.device_value is not None)
    host = sum(len(n.key) for n in nodes if n.host_value is not None)
    return device, host


def assert_accounting(tree: RadixTree) -> None:
    assert (tree.device_tokens, tree.host_tokens) == counted_tokens(tree)


def two_branches(tree: RadixTree) -> tuple[TreeNode, TreeNode, TreeNode]:
    """(1,2,3,4) and (1,2,5,6): a shared head (1,2) on slots 0,1 with children (3,4) and (5,6)."""
    a = tree.insert((1, 2, 3, 4), slots(0, 1, 2, 3)).node
    b = tree.insert((1, 2, 5, 6), slots(9, 9, 4, 5)).node
    head = a.parent
    assert head is not None and head is b.parent and head.key == (1, 2)
    return head, a, b


# -- match_prefix -------------------------------------------------------------
def test_match_on_empty_tree_finds_nothing() -> None:
    tree = RadixTree()
    match = tree.match_prefix((1, 2, 3))
    assert match.device_indices.numel() == 0
    assert match.device_indices.dtype == torch.int64
    assert match.last_device_node is tree.root
    assert match.last_host_node is tree.root
    assert match.host_hit_length == 0


def test_full_match_returns_all_device_slots() -> None:
    tree = RadixTree()
    leaf = tree.insert((1, 2, 3, 4), slots(10, 11, 12, 13)).node
    for query in ((1, 2, 3, 4), (1, 2, 3, 4, 99)):
        match = tree.match_prefix(query)
        assert as_list(match.device_indices) == [10, 11, 12, 13]
        assert match.last_device_node is leaf
        assert match.last_host_node is leaf
        assert match.host_hit_length == 0


def test_partial_match_splits_the_node_at_the_divergence() -> None:
    tree = RadixTree()
    leaf = tree.insert((1, 2, 3, 4), slots(10, 11, 12, 13)).node
    match = tree.match_prefix((1, 2, 7))
    head = match.last_device_node
    assert as_list(match.device_indices) == [10, 11]
    assert head.key == (1, 2)
    assert tree.root.children[1] is head
    assert head.children[3] is leaf and leaf.key == (3, 4) and leaf.parent is head


def test_match_of_unknown_first_token_stays_at_root() -> None:
    tree = RadixTree()
    tree.insert((1, 2), slots(0, 1))
    match = tree.match_prefix((5, 1, 2))
    assert match.device_indices.numel() == 0
    assert match.last_device_node is tree.root


def test_match_counts_hits_on_the_matched_path() -> None:
    tree = RadixTree()
    head, a, b = two_branches(tree)
    tree.match_prefix((1, 2, 3, 4))
    inner = tree.match_prefix((1, 2, 3)).last_device_node  # splits a into (3,) and (4,)
    assert inner.key == (3,) and a.key == (4,)
    assert (head.hit_count, inner.hit_count, a.hit_count, b.hit_count) == (2, 2, 1, 0)


def test_split_keeps_device_host_values_and_lock_refs() -> None:
    tree = RadixTree()
    leaf = tree.insert((1, 2, 3, 4), slots(10, 11, 12, 13)).node
    tree.record_backup(leaf, slots(20, 21, 22, 23))
    tree.inc_lock_ref(leaf)

    head = tree.match_prefix((1, 2, 9)).last_device_node

    assert (head.key, as_list(head.device_value), as_list(head.host_value)) == ((1, 2), [10, 11], [20, 21])
    assert (leaf.key, as_list(leaf.device_value), as_list(leaf.host_value)) == ((3, 4), [12, 13], [22, 23])
    assert head.parent is tree.root and leaf.parent is head
    assert head.lock_ref == leaf.lock_ref == 1
    assert (tree.device_tokens, tree.host_tokens) == (4, 4)
    tree.dec_lock_ref(leaf)  # the lock taken before the split is released through the new head
    assert head.lock_ref == leaf.lock_ref == 0
    assert_accounting(tree)


def test_split_of_an_evicted_node_keeps_it_host_only() -> None:
    tree = RadixTree()
    leaf = tree.insert((1, 2, 3, 4), slots(10, 11, 12, 13)).node
    tree.record_backup(leaf, slots(20, 21, 22, 23))
    tree.evict_device(4)
    match = tree.match_prefix((1, 2, 9))
    head = match.last_host_node
    assert head.key == (1, 2) and head.evicted and as_list(head.host_value) == [20, 21]
    assert leaf.evicted and as_list(leaf.host_value) == [22, 23]
    assert match.host_hit_length == 2
    assert_accounting(tree)


# -- insert ---------------------------------------------------------------------
def test_insert_into_empty_tree_creates_one_leaf() -> None:
    tree = RadixTree()
    result = tree.insert((1, 2, 3), slots(0, 1, 2))
    assert result.node.key == (1, 2, 3) and result.node.parent is tree.root
    assert as_list(result.node.device_value) == [0, 1, 2]
    assert result.duplicate_slots.numel() == 0
    assert tree.device_tokens == 3


def test_insert_hands_back_caller_slots_for_a_prefix_already_on_device() -> None:
    tree = RadixTree()
    tree.insert((1, 2, 3), slots(0, 1, 2))
    result = tree.insert((1, 2, 3, 4, 5), slots(7, 8, 9, 10, 11))
    assert as_list(result.duplicate_slots) == [7, 8, 9]
    assert result.node.key == (4, 5) and as_list(result.node.device_value) == [10, 11]
    assert tree.device_tokens == 5
    assert_accounting(tree)


def test_insert_of_a_shorter_key_splits_and_keeps_the_tree_slots() -> None:
    tree = RadixTree()
    tree.insert((1, 2, 3, 4), slots(0, 1, 2, 3))
    result = tree.insert((1, 2), slots(5, 6))
    assert result.node.key == (1, 2)
    assert as_list(result.node.device_value) == [0, 1]
    assert as_list(result.duplicate_slots) == [5, 6]
    assert tree.device_tokens == 4


def test_insert_reuses_new_slots_for_a_host_only_node() -> None:
    tree = RadixTree()
    node = tree.insert((1, 2), slots(0, 1)).node
    tree.record_backup(node, slots(5, 6))
    tree.evict_device(2)
    assert node.evicted and tree.device_tokens == 0

    result = tree.insert((1, 2, 3), slots(7, 8, 9))

    assert result.duplicate_slots.numel() == 0
    assert as_list(node.device_value) == [7, 8] and as_list(node.host_value) == [5, 6]
    assert result.node.parent is node and as_list(result.node.device_value) == [9]
    assert (tree.device_tokens, tree.host_tokens) == (3, 2)
    assert_accounting(tree)


# -- lock references ------------------------------------------------------------
def test_lock_refs_go_up_the_path_and_not_into_siblings() -> None:
    tree = RadixTree()
    head, a, b = two_branches(tree)
    tree.inc_lock_ref(a)
    assert (head.lock_ref, a.lock_ref, b.lock_ref) == (1, 1, 0)
    tree.inc_lock_ref(b)
    assert (head.lock_ref, a.lock_ref, b.lock_ref) == (2, 1, 1)
    tree.dec_lock_ref(a)
    assert (head.lock_ref, a.lock_ref, b.lock_ref) == (1, 0, 1)
    tree.dec_lock_ref(b)
    assert (head.lock_ref, a.lock_ref, b.lock_ref) == (0, 0, 0)
    assert tree.root.lock_ref == 1  # the root's own pin is never touched


def test_lock_ref_underflow_raises_value_error() -> None:
    tree = RadixTree()
    _, a, _ = two_branches(tree)
    tree.inc_lock_ref(a)
    tree.dec_lock_ref(a)
    with pytest.raises(ValueError, match="underflow"):
        tree.dec_lock_ref(a)


def test_lock_and_unlock_of_the_root_are_no_ops() -> None:
    tree = RadixTree()
    tree.inc_lock_ref(tree.root)
    tree.dec_lock_ref(tree.root)
    tree.dec_lock_ref(tree.root)
    assert tree.root.lock_ref == 1


# -- device eviction ------------------------------------------------------------
def test_evict_device_takes_least_recently_used_first() -> None:
    tree = RadixTree()
    a = tree.insert((1, 1), slots(0, 1)).node
    b = tree.insert((2, 2), slots(2, 3)).node
    c = tree.insert((3, 3), slots(4, 5)).node
    tree.match_prefix((1, 1))  # a becomes the most recently used

    order = []
    for _ in range(3):
        freed, deleted = tree.evict_device(1)
        assert len(freed) == len(deleted) == 1
        order.append(deleted[0])
    assert order == [b, c, a]
    assert tree.root.children == {} and tree.device_tokens == 0


def test_evict_device_frees_at_least_what_was_asked() -> None:
    tree = RadixTree()
    tree.insert((1, 1, 1), slots(0, 1, 2))
    tree.insert((2, 2, 2), slots(3, 4, 5))
    freed, _ = tree.evict_device(4)  # one node is not enough
    assert sum(len(f) for f in freed) == 6
    assert tree.device_tokens == 0


def test_evict_device_never_evicts_locked_nodes_or_their_ancestors() -> None:
    tree = RadixTree()
    head, a, b = two_branches(tree)
    other = tree.insert((7, 7), slots(6, 7)).node
    tree.inc_lock_ref(a)

    freed, deleted = tree.evict_device(100)

    assert sorted(sum((f.tolist() for f in freed), [])) == [4, 5, 6, 7]
    assert set(deleted) == {b, other}
    assert as_list(a.device_value) == [2, 3] and as_list(head.device_value) == [0, 1]
    assert tree.device_tokens == 4
    assert_accounting(tree)


def test_evict_device_keeps_backed_up_nodes_on_the_host_and_deletes_the_rest() -> None:
    tree = RadixTree()
    backed = tree.insert((1, 2), slots(0, 1)).node
    tree.record_backup(backed, slots(7, 8))
    plain = tree.insert((3, 4), slots(2, 3)).node

    freed, deleted = tree.evict_device(4)

    assert deleted == [plain]
    assert 3 not in tree.root.children and plain.parent is None
    assert tree.root.children[1] is backed
    assert backed.evicted and backed.device_value is None and as_list(backed.host_value) == [7, 8]
    assert sorted(sum((f.tolist() for f in freed), [])) == [0, 1, 2, 3]
    assert (tree.device_tokens, tree.host_tokens) == (0, 2)
    assert_accounting(tree)


def test_evict_device_moves_up_to_a_parent_once_its_children_are_gone() -> None:
    tree = RadixTree()
    head, a, b = two_branches(tree)
    freed, deleted = tree.evict_device(6)
    assert set(deleted) == {head, a, b}
    assert deleted[-1] is head  # a parent only becomes a leaf after its children
    assert sum(len(f) for f in freed) == 6
    assert tree.root.children == {}


def test_evict_device_on_an_empty_tree_frees_nothing() -> None:
    tree = RadixTree()
    assert tree.evict_device(10) == ([], [])


def test_evict_device_leaves_no_node_that_is_neither_on_device_nor_on_host() -> None:
    tree = RadixTree()
    head, a, b = two_branches(tree)
    tree.record_backup(a, slots(20, 21))
    tree.record_backup(b, slots(22, 23))  # the children are backed up, their parent is not

    tree.evict_device(6)

    nowhere = [n.key for n in all_nodes(tree) if n.device_value is None and n.host_value is None]
    assert nowhere == []
    # A host hit must be loadable: every host-hit token needs a host slot.
    assert tree.match_prefix((1, 2, 3, 4)).host_hit_length <= 2


# -- host eviction --------------------------------------------------------------
def test_evict_host_frees_least_recently_used_host_only_leaves() -> None:
    tree = RadixTree()
    a = tree.insert((1, 2), slots(0, 1)).node
    b = tree.insert((3, 4), slots(2, 3)).node
    tree.record_backup(a, slots(7, 8))
    tree.record_backup(b, slots(9, 10))
    tree.evict_device(4)
    tree.match_prefix((3, 4))  # b is now the most recently used

    freed = tree.evict_host(1)

    assert [f.tolist() for f in freed] == [[7, 8]]
    assert a.parent is None and 1 not in tree.root.children
    assert tree.root.children[3] is b
    assert tree.host_tokens == 2
    assert_accounting(tree)


def test_evict_host_skips_locked_nodes_and_nodes_still_on_device() -> None:
    tree = RadixTree()
    locked = tree.insert((1, 2), slots(0, 1)).node
    on_device = tree.insert((3, 4), slots(2, 3)).node
    tree.record_backup(locked, slots(7, 8))
    tree.record_backup(on_device, slots(9, 10))
    tree.evict_device(2)  # the LRU one, `locked`, leaves the device
    assert locked.evicted and not on_device.evicted
    tree.inc_lock_ref(locked)

    assert tree.evict_host(100) == []
    assert tree.host_tokens == 4


def test_evict_host_moves_up_to_a_host_only_parent() -> None:
    tree = RadixTree()
    leaf = tree.insert((1, 2, 3, 4), slots(0, 1, 2, 3)).node
    tree.record_backup(leaf, slots(20, 21, 22, 23))
    head = tree.match_prefix((1, 2)).last_device_node  # split: both halves backed up
    tree.evict_device(4)
    assert head.evicted and leaf.evicted

    freed = tree.evict_host(4)

    assert sorted(sum((f.tolist() for f in freed), [])) == [20, 21, 22, 23]
    assert tree.root.children == {} and tree.host_tokens == 0


# -- host hits ------------------------------------------------------------------
def test_match_reports_a_host_hit_past_the_device_prefix() -> None:
    tree = RadixTree()
    head, a, b = two_branches(tree)
    tree.record_backup(a, slots(20, 21))
    tree.inc_lock_ref(b)  # keeps b and the shared head on the device
    tree.evict_device(2)
    assert a.evicted and not head.evicted

    match = tree.match_prefix((1, 2, 3, 4, 9))

    assert as_list(match.device_indices) == [0, 1]
    assert match.last_device_node is head
    assert match.last_host_node is a
    assert match.host_hit_length == 2


def test_match_of_a_fully_evicted_prefix_is_all_host_hit() -> None:
    tree = RadixTree()
    leaf = tree.insert((1, 2, 3), slots(0, 1, 2)).node
    tree.record_backup(leaf, slots(5, 6, 7))
    tree.evict_device(3)

    match = tree.match_prefix((1, 2, 3))

    assert match.device_indices.numel() == 0
    assert match.last_device_node is tree.root
    assert match.last_host_node is leaf
    assert match.host_hit_length == 3


# -- accounting and paths -------------------------------------------------------
def test_token_counters_follow_every_mutation() -> None:
    tree = RadixTree()
    head, a, b = two_branches(tree)
    assert (tree.device_tokens, tree.host_tokens) == (6, 0)
    tree.record_backup(a, slots(20, 21))
    tree.record_backup(head, slots(22, 23))
    assert_accounting(tree)
    tree.evict_device(6)
    assert (tree.device_tokens, tree.host_tokens) == (0, 4)
    assert_accounting(tree)
    tree.record_load_back(head, slots(30, 31))
    assert (tree.device_tokens, tree.host_tokens) == (2, 4)
    assert_accounting(tree)
    tree.evict_host(2)
    assert (tree.device_tokens, tree.host_tokens) == (2, 2)
    assert_accounting(tree)


def test_path_to_lists_nodes_from_below_the_root() -> None:
    tree = RadixTree()
    head, a, _ = two_branches(tree)
    assert tree.path_to(a) == [head, a]
    assert tree.path_to(tree.root) == []
