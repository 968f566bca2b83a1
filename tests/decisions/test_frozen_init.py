"""``quick_init``: the same objects as the dataclass's own ``__init__``, built quicker, or a refusal at import."""

from __future__ import annotations

import importlib
import inspect
import pickle
from dataclasses import MISSING, FrozenInstanceError, InitVar, dataclass, field, fields, replace

import pytest

from autoscaler.core.frozen_init import _GENERATED, generated_init, quick_init


@quick_init
@dataclass(frozen=True, slots=True)
class _Sample:
    name: str
    count: int = 3
    tags: tuple[str, ...] = field(default_factory=lambda: ("a", "b"))
    extra: dict[str, int] = field(default_factory=dict)
    key: str = field(default="", init=False, compare=False)  # worked out in __post_init__
    seen: list[int] = field(default_factory=list, init=False, compare=False)
    fixed: int = field(default=7, init=False)

    def __post_init__(self) -> None:
        if self.count < 0:
            raise ValueError("count must not be negative")
        object.__setattr__(self, "key", f"{self.name}/{self.count}")


def _by_generated(cls: type, *args: object, **kwargs: object) -> object:
    obj = object.__new__(cls)
    generated_init(cls)(obj, *args, **kwargs)
    return obj


def _slots(obj: object) -> dict[str, object]:
    return {f.name: getattr(obj, f.name) for f in fields(obj)}  # type: ignore[arg-type]


@pytest.mark.parametrize("args,kwargs", [
    (("x",), {}),
    (("x", 5), {}),
    (("x",), {"tags": ("z",)}),
    (("x", 0, ("q",), {"k": 1}), {}),
    ((), {"name": "y", "extra": {"a": 2}}),
])
def test_the_same_object_as_the_generated_init(args: tuple[object, ...], kwargs: dict[str, object]) -> None:
    quick = _Sample(*args, **kwargs)  # type: ignore[arg-type]
    slow = _by_generated(_Sample, *args, **kwargs)
    assert _slots(quick) == _slots(slow)
    assert quick == slow and hash(quick.tags) == hash(slow.tags)  # type: ignore[attr-defined]
    assert quick.key == slow.key != ""  # type: ignore[attr-defined]
    assert quick.fixed == 7


def test_each_default_factory_is_called_per_object() -> None:
    a, b = _Sample("a"), _Sample("b")
    assert a.extra == {} and a.extra is not b.extra
    assert a.seen == [] and a.seen is not b.seen


def test_post_init_still_validates_and_the_object_stays_frozen() -> None:
    with pytest.raises(ValueError, match="negative"):
        _Sample("x", -1)
    s = _Sample("x")
    with pytest.raises(FrozenInstanceError):
        s.count = 4  # type: ignore[misc]
    with pytest.raises(TypeError):
        _Sample()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        _Sample("x", 1, (), {}, "too many")  # type: ignore[call-arg]
    assert replace(s, count=9).key == "x/9"
    assert pickle.loads(pickle.dumps(_Sample("p", 2, ("t",)))) == _Sample("p", 2, ("t",))


def test_it_refuses_what_it_could_get_wrong() -> None:
    @dataclass(frozen=True)
    class NoSlots:
        a: int

    @dataclass(slots=True)
    class NotFrozen:
        a: int

    @dataclass(frozen=True, slots=True, kw_only=True)
    class KwOnly:
        a: int

    @dataclass(frozen=True, slots=True)
    class WithInitVar:
        a: int
        b: InitVar[int] = 0

    class Plain:
        pass

    for cls, why in ((NoSlots, "no slots"), (NotFrozen, "not frozen"), (KwOnly, "keyword-only"),
                     (WithInitVar, "not its fields"), (Plain, "not a dataclass"), (_Sample, "already")):
        with pytest.raises(TypeError, match=why):
            quick_init(cls)


_MODULES = ["autoscaler.core.snapshot", "autoscaler.core.policy.scaling", "autoscaler.core.policy.behavior",
            "autoscaler.core.policy.packing", "autoscaler.core.policy.stall", "autoscaler.core.policy.admission",
            "simulator.utilization", "simulator.workload"]


def _decorated() -> list[type]:
    for m in _MODULES:
        importlib.import_module(m)
    return [cls for cls in _GENERATED if cls.__module__ in _MODULES]


def test_every_class_given_it_keeps_its_signature() -> None:
    """Each project class with the quicker ``__init__`` takes the very parameters, in order and with
    the same defaults, that its dataclass ``__init__`` took (a default factory's marker aside)."""
    classes = _decorated()
    assert len(classes) >= 30  # the snapshot's, the policies' and the simulator's records
    for cls in classes:
        new = inspect.signature(cls.__init__).parameters
        old = inspect.signature(generated_init(cls)).parameters
        assert list(new) == list(old), cls
        by_name = {f.name: f for f in fields(cls)}
        for name, p in old.items():
            if name == "self":
                continue
            f = by_name[name]
            if p.default is inspect.Parameter.empty:
                assert new[name].default is inspect.Parameter.empty, (cls, name)
            elif f.default_factory is not MISSING:
                assert repr(new[name].default) == "<factory>", (cls, name)
            else:
                assert new[name].default is p.default, (cls, name)


def test_real_records_come_out_equal() -> None:
    """Records of the snapshot built both ways: the same fields, worked-out ones included."""
    from autoscaler.core.policy.scaling import GroupHistory
    from autoscaler.core.snapshot import GpuState, NodeState, PodSetSpec, WorkloadState, frozen_map
    gpus = tuple(GpuState(uuid=f"GPU-{i}", node="n1", index=i, model="H100", healthy=True, health_reason="",
                          utilization=0.5, utilization_source="gpu_util", pod=None) for i in range(2))
    cases: list[tuple[type, dict[str, object]]] = [
        (NodeState, {"name": "n1", "gpu_allocatable": 2, "gpu_requested": 1, "gpus": gpus}),
        (WorkloadState, {"namespace": "team-a", "name": "w", "uid": "u", "resource_version": "3",
                         "local_queue": "lq", "cluster_queue": "cq", "created_at": 1.0,
                         "pod_sets": (PodSetSpec("main", 2, frozen_map({"nvidia.com/gpu": 4})),)}),
        (GroupHistory, {}),
    ]
    for cls, kw in cases:
        quick, slow = cls(**kw), _by_generated(cls, **kw)
        assert _slots(quick) == _slots(slow), cls
    wl = WorkloadState(**cases[1][1])  # type: ignore[arg-type]
    assert wl.key == "team-a/w" and wl.gpu_demand == 8  # worked out in __post_init__
