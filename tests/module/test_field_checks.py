"""A field annotated with a module type refuses, at construction, a config (a
forgotten ``.init(device)``) and a module of another type, naming the fix; other
annotations and values are left alone."""

from __future__ import annotations

from typing import Optional

import pytest

from ember import Device, Module
from ember.errors import ModuleError
from ember.nn import Gelu, Linear, LinearConfig, Relu
from ember.nn.transformer import TransformerEncoderConfig


class Head(Module):
    proj: Linear
    act: Relu
    extra: Linear | None = None
    blocks: list[Linear] = ()
    named: dict[str, Linear] = None
    anything: Module = None
    note: str = ""

    def forward(self, x):
        return self.act(self.proj(x))


def linear():
    return LinearConfig(2, 2).init(Device.flex())


def test_a_config_instead_of_its_module_names_init():
    with pytest.raises(ModuleError, match=r"field 'proj' is a Linear but got a LinearConfig.*\.init\(device\)"):
        Head(proj=LinearConfig(2, 2), act=Relu())
    with pytest.raises(ModuleError, match=r"'extra' is a Linear"):
        Head(proj=linear(), act=Relu(), extra=LinearConfig(2, 2))
    with pytest.raises(ModuleError, match=r"'blocks\[1\]' is a Linear but got a LinearConfig"):
        Head(proj=linear(), act=Relu(), blocks=[linear(), LinearConfig(2, 2)])
    with pytest.raises(ModuleError, match=r"'named\['b'\]'"):
        Head(proj=linear(), act=Relu(), named={"a": linear(), "b": LinearConfig(2, 2)})
    with pytest.raises(ModuleError, match=r"'anything' is a Module but got a LinearConfig"):
        Head(proj=linear(), act=Relu(), anything=LinearConfig(2, 2))


def test_a_module_of_another_type_names_the_declared_one():
    with pytest.raises(ModuleError, match=r"'act' is declared as Relu but got a Gelu.*`act: Module`"):
        Head(proj=linear(), act=Gelu())
    with pytest.raises(ModuleError, match=r"'blocks\[0\]' is declared as Linear but got a Relu"):
        Head(proj=linear(), act=Relu(), blocks=[Relu()])


def test_right_values_and_unchecked_fields_pass():
    head = Head(
        proj=linear(), act=Relu(), extra=None, blocks=[linear()], named={"a": linear()}, anything=Gelu(), note="x"
    )
    assert head.num_params() == 18
    TransformerEncoderConfig(8, 16, 2, 2).init(Device.flex())  # the library's own modules build


def test_hand_written_init_is_checked_too():
    class Custom(Module):
        layer: Linear

        def __init__(self, layer):
            self.layer = layer

    assert Custom(linear()).layer.d_input == 2
    with pytest.raises(ModuleError, match="'layer' is a Linear but got a LinearConfig"):
        Custom(LinearConfig(2, 2))


def test_unresolvable_and_typing_forms():
    class Loose(Module):
        a: Optional[Linear] = None  # noqa: UP045 - the typing form is checked as well
        b: NotDefinedAnywhere = None  # noqa: F821 - unresolvable: not checked

    with pytest.raises(ModuleError, match="'a' is a Linear"):
        Loose(a=LinearConfig(2, 2))
    assert Loose(b=LinearConfig(2, 2)).b is not None
