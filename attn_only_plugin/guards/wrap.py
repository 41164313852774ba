"""wrap_once: how the guards and the repairs (../fairseq_fixes.py) hook into fairseq's functions.

Here, below every guard, so that the guards and fairseq_fixes.py import it one way; it imports nothing.
"""


def wrap_once(owner, name: str, make_wrapper, stored: bool = False) -> None:
    """owner.name = make_wrapper(original), unless that was done already (the plugin can be imported
    more than once in a process). The wrapper, or the function inside the staticmethod/classmethod
    it returns, is marked so that the next call sees it. stored=True hands make_wrapper the
    attribute as stored in owner.__dict__ (a classmethod object) instead of as looked up."""
    if getattr(getattr(owner, name), "_attn_only_wrapped", False):
        return
    wrapper = make_wrapper(vars(owner)[name] if stored else getattr(owner, name))
    getattr(wrapper, "__func__", wrapper)._attn_only_wrapped = True
    setattr(owner, name, wrapper)
