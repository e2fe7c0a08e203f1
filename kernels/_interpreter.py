"""A speed-up for Triton's CPU interpreter (tests and dry runs only; no effect on compiled kernels).

Triton 3.x's interpreter re-patches ``triton.language`` (``inspect.getmembers`` over the whole
module, about 2 ms) on every call of a ``@triton.jit`` helper inside a kernel, although the launch
already patched the same module objects; with the score-tile and projection helpers that is more
than half of the interpreted time. :func:`skip_repatching` makes a nested call skip the patch when
every language module it sees is already patched for the running launch. The patching itself is
unchanged, so results are identical (the kernel tests check them); if Triton's internals move, it
does nothing.
"""

from __future__ import annotations

import inspect

_installed = False


def skip_repatching() -> bool:
    """Install the shortcut (idempotent). Returns whether it is active."""
    global _installed
    if _installed:
        return True
    try:
        # optional: triton may be missing (then there is nothing to speed up)
        import triton.language as tl
        import triton.runtime.interpreter as interp  # optional, as above
    except Exception:  # noqa: BLE001 - no triton: nothing to speed up
        return False
    original = getattr(interp, "_patch_lang", None)
    if original is None:
        return False
    active: set[int] = set()

    class _Nothing:
        def restore(self) -> None:
            pass

    def patch_lang(fn):
        langs = {id(v) for v in fn.__globals__.values() if inspect.ismodule(v) and v in (tl, tl.core)}
        if active and langs <= active:
            return _Nothing()
        outermost = not active
        scope = original(fn)
        active.update(langs)
        if outermost:  # the launch's own scope: forget what is patched when it restores
            restore = scope.restore

            def restore_and_forget() -> None:
                active.clear()
                restore()

            scope.restore = restore_and_forget
        return scope

    interp._patch_lang = patch_lang
    _installed = True
    return True
