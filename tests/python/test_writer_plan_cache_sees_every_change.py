"""The writer's plan cache (writer._match against the trace writer._leaves made) takes a
state dict for the one it planned only when its plan would be the same: the same keys
in the same order and nesting, the same leaf kinds, dtypes, shapes and devices. Each
change a plan depends on is seen; values, and objects' contents, are not plan. And the
leaves it returns are DCP's, in DCP's order (traverse_state_dict's), with the same
flattened keys (flatten_state_dict's mappings)."""
import torch
from torch.distributed.checkpoint._nested_dict import flatten_state_dict

import common
from libshard.writer import _leaves, _match


def sd():
    return {"model": {"a.w": torch.zeros(4, 3), "b": torch.ones(5, dtype=torch.bfloat16)},
            "optim": {"state": {0: {"step": torch.tensor(3.0), "m": torch.zeros(4, 3)}},
                      "param_groups": [{"lr": 0.1, "params": [0]}]},
            "step": 7, "names": ["x", "y"]}


def main():
    trace = []
    base = sd()
    leaves = _leaves(base, trace)
    flat, mappings = flatten_state_dict(base)
    assert [".".join(map(str, p)) for p, _v in leaves] == list(flat), \
        f"leaves {[p for p, _v in leaves]} are not DCP's {list(flat)}"
    assert all(mappings[".".join(map(str, p))] == p for p, _v in leaves), "paths differ"
    same = _match(sd(), trace)
    assert same is not None and len(same) == len(leaves), "the same structure was not matched"
    v = sd()
    v["model"]["a.w"].add_(1)
    v["step"] = 8
    v["optim"]["param_groups"][0]["lr"] = 0.5
    assert _match(v, trace) is not None, "new values were taken for a new plan"

    def changed(why, edit):
        s = sd()
        edit(s)
        assert _match(s, trace) is None, f"{why}: not seen"

    changed("a shape", lambda s: s["model"].__setitem__("a.w", torch.zeros(4, 4)))
    changed("a dtype", lambda s: s["model"].__setitem__("b", torch.ones(5)))
    changed("a key renamed", lambda s: s["model"].__setitem__("c", s["model"].pop("b")))
    changed("a key added", lambda s: s["model"].__setitem__("z", torch.zeros(1)))
    changed("a key removed", lambda s: s["model"].pop("b"))
    changed("keys reordered", lambda s: s.__setitem__("model", dict(reversed(s["model"].items()))))
    changed("a tensor became an object", lambda s: s["model"].__setitem__("b", 1.0))
    changed("an object became a tensor", lambda s: s.__setitem__("step", torch.tensor(7)))
    changed("a list grew", lambda s: s["optim"]["param_groups"].append({"lr": 0.2}))
    changed("a nested key", lambda s: s["optim"]["state"].__setitem__(1, {"m": torch.zeros(1)}))
    changed("a top-level key added", lambda s: s.__setitem__("extra", torch.zeros(2)))
    changed("a 0-d tensor's shape", lambda s: s["optim"]["state"][0].__setitem__(
        "step", torch.tensor([3.0])))
    print("plan cache: every change a plan depends on is seen; values are not")


if __name__ == "__main__":
    common.main(main)
