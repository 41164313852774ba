"""wrap_once: how the guards and the repairs (../fairseq_fixes.py) hook into fairseq's functions,
and PATCHES: every patch that importing the plugin made in this process (docs/install.md lists
each one; tests/test_patches.py compares the two).

Here, below every guard, so that the guards and fairseq_fixes.py import it one way; it imports nothing.
"""

PATCHES: list = []  # "module.Owner.name" of each patch made, in the order made, once each


def patch_name(owner, name: str) -> str:
    """'fairseq.tasks.fairseq_task.FairseqTask.build_generator': owner (a class or a module) and name."""
    qualname = getattr(owner, "__qualname__", None)  # a class; a module has none
    return f"{owner.__module__}.{qualname}.{name}" if qualname else f"{owner.__name__}.{name}"


def record(target: str) -> None:
    """Note a patch made otherwise than by wrap_once (a replaced function, a hook, a setting)."""
    if target not in PATCHES:
        PATCHES.append(target)


def wrap_once(owner, name: str, make_wrapper, stored: bool = False) -> None:
    """owner.name = make_wrapper(original), unless that was done already (the plugin can be imported
    more than once in a process). The wrapper, or the function inside the staticmethod/classmethod
    it returns, is marked so that the next call sees it. stored=True hands make_wrapper the
    attribute as stored in owner.__dict__ (a classmethod object) instead of as looked up."""
    record(patch_name(owner, name))
    if getattr(getattr(owner, name), "_attn_only_wrapped", False):
        return
    wrapper = make_wrapper(vars(owner)[name] if stored else getattr(owner, name))
    getattr(wrapper, "__func__", wrapper)._attn_only_wrapped = True
    setattr(owner, name, wrapper)
