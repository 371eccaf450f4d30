"""Software stacks: what a framework changes on the same hardware (:class:`Stack`), their
bundled presets and loader. ``simulate(..., stack=load_stack("deepspeed-0.3-zero3"))``."""

from simulator.stacks.loader import load_stack, stack_presets
from simulator.stacks.spec import MEGATRON_CORE, Stack

__all__ = ["MEGATRON_CORE", "Stack", "load_stack", "stack_presets"]
