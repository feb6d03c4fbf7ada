from crag_bench.fanoutqa import leaf_owners, leaf_questions, load_split


def test_split_parts_share_no_leaf_with_held_out_questions() -> None:
    split = load_split()
    owners = leaf_owners()
    allowed = set(split["train"]) | set(split["dev"])
    for part in ("train", "dev"):
        ids = set(split[part])
        leaves = leaf_questions(split[part])
        assert leaves, part
        assert all(owners[leaf.id] <= ids for leaf in leaves)
    shared = [leaf for leaf, tops in owners.items() if len(tops) > 1 and not tops <= allowed]
    assert shared, "FanOutQA has leaves shared across top-level questions"
    train = {leaf.id for leaf in leaf_questions(split["train"])}
    assert not train & set(shared)
    assert len(leaf_questions(split["train"], exclusive=False)) > len(train)
