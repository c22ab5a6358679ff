"""The compile child's head start on Inductor's vector-ISA lookup: its dry compiles run in threads of their own while
dynamo traces the first function (probe/torch_compile.py starts them right after import torch). Apart from the
compile checks because it is about threads in the probe's process, not about what a check asserts: the rules that
keep it safe (one check per ISA, no import in a thread) live here with it."""

from __future__ import annotations

import importlib
import threading

# What the vector-ISA checks import (traced per thread in the runtime image): Inductor's ISA modules, and the
# include and library paths of torch.utils.cpp_extension, which imports setuptools (see warm)
IMPORTED_FIRST = ("torch._inductor.codecache", "torch._inductor.cpp_builder", "torch._inductor.cpu_vec_isa",
                  "torch.utils.cpp_extension")


def warm():
    """Start Inductor's vector-ISA lookup in a thread, so that it overlaps dynamo's tracing of the first function
    instead of following it: the lookup (a g++ dry compile, a link and a dlopen per ISA the CPU reports, one after
    another) is the first link of the cold chain, and Inductor only asks for it once the traced graph is lowered.
    Each ISA's check (`bool(isa)`, cached per ISA) runs in a thread of its own, side by side: they are independent
    (each its own source, flags and output file); the lookup then takes their cached answers. Inductor's own call
    (pick_vec_isa looks `valid_vec_isa_list` up in its module) waits for all of it and takes the lookup's cached
    answer: the same checks, run once, earlier. A failed lookup is not cached: Inductor's call runs it again and fails
    as it would have. Never two checks of one ISA at once: AVX512's check changes its own flags while it tests bf16
    (round 10 saw a header built for another ISA's flags with two lookups at once).

    No thread here imports a module: everything the checks import is imported first, in this thread (IMPORTED_FIRST).
    Imports beside dynamo's are not safe: the checks import torch.utils.cpp_extension, whose setuptools puts its
    distutils finder at the head of sys.meta_path and takes it out again, in place, while the other thread's import
    walks that list; the walk then steps over the path finder and a module that is there is "not found" (CI, stop 35:
    ModuleNotFoundError for torch._functorch._aot_autograd.aot_autograd_result in compile.cpu_function). And two
    threads importing Inductor's circular modules at once can see them half-initialised."""
    try:
        for name in IMPORTED_FIRST:
            importlib.import_module(name)
        from torch._inductor import cpu_vec_isa
        lookup = cpu_vec_isa.valid_vec_isa_list
    except Exception:  # a torch without these modules (< 2.5): Inductor looks the ISA up itself, as before
        return None
    checks = [threading.Thread(target=_quietly, args=(bool, isa), name=f"vec-isa {isa}", daemon=True)
              for isa in isa_candidates(cpu_vec_isa)]

    def look_up():
        for check in checks:
            check.start()
        for check in checks:
            check.join()
        _quietly(lookup)

    thread = threading.Thread(target=look_up, name="vec-isa", daemon=True)
    thread.start()

    def after_the_thread():
        thread.join()
        return lookup()

    cpu_vec_isa.valid_vec_isa_list = after_the_thread
    return thread


def isa_candidates(cpu_vec_isa) -> list:
    """The ISAs Inductor's lookup dry-compiles on this CPU, as it picks them: on x86 each of its supported ISAs whose
    flags the CPU reports (torch.cpu's cpuid checks). [] elsewhere (one ISA on arm64, nothing to run side by side)
    and where this torch's Inductor lacks either name: its lookup then checks them one after another, as before."""
    try:
        reported = cpu_vec_isa.x86_isa_checker()
        return [isa for isa in cpu_vec_isa.supported_vec_isa_list
                if all(flag in reported for flag in str(isa).split())]
    except Exception:
        return []


def _quietly(fn, *args):
    """Run fn(*args); what it raises is raised again when Inductor asks (the compile checks then fail with it)."""
    try:
        fn(*args)
    except Exception:
        pass
