"""bbob_lib.py — the BBOB functions and the held-out benchmark's problems
for Python, from the same C code our bench links (bench/search/bbob.c,
docs/search.md "Held-out benchmark: BBOB"): it is compiled once into a
shared object (default build/bbob/libbbob.so, rebuilt when bbob.c or
bbob.h is newer; $HF_BBOB_SO names another) and loaded with ctypes, so the
Optuna side evaluates exactly the function ours does.

  cases(half)            -> [Case], half "tune", "heldout" or "all"
  Case.name, .heldout, .budget, .space (the "hyperparameters" dict, in
  parameter order), Case.regret(values)  values: {name: value}
"""
import ctypes, json, math, os, subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SRC = [os.path.join(HERE, "bbob.c"), os.path.join(HERE, "bbob.h")]


def so_path():
    return os.environ.get("HF_BBOB_SO") or os.path.join(ROOT, "build", "bbob", "libbbob.so")


def build():
    """Compile bbob.c into the shared object when it is missing or stale
    (the same -O2 as the project's release build, no fast-math)."""
    so = so_path()
    if os.path.exists(so) and all(os.path.getmtime(so) >= os.path.getmtime(s) for s in SRC):
        return so
    os.makedirs(os.path.dirname(so), exist_ok=True)
    tmp = "%s.%d.tmp" % (so, os.getpid())
    subprocess.run([os.environ.get("CC", "cc"), "-std=c11", "-O2", "-shared", "-fPIC", "-o", tmp, SRC[0], "-lm"],
                   check=True)
    os.replace(tmp, so)
    return so


_lib = None


def lib():
    global _lib
    if _lib is None:
        L = ctypes.CDLL(build())
        L.bbob_suite_count.restype = ctypes.c_int
        L.bbob_case_size.restype = ctypes.c_size_t
        L.bbob_suite_case.argtypes = [ctypes.c_int, ctypes.c_void_p]
        L.bbob_case_space.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
        L.bbob_case_regret.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_double)]
        L.bbob_case_regret.restype = ctypes.c_double
        _lib = L
    return _lib


class Case:
    def __init__(self, k):
        L = lib()
        self._buf = ctypes.create_string_buffer(L.bbob_case_size())
        if L.bbob_suite_case(k, self._buf) != 0:
            raise IndexError(k)
        sp = ctypes.create_string_buffer(8192)
        if L.bbob_case_space(self._buf, sp, 8192) < 0:
            raise ValueError("space of case %d does not fit" % k)
        self.space = json.loads(sp.value.decode())     # dicts keep the parameter order
        self.names = list(self.space)
        # the struct's leading fields: name[48], kind, fid, dim, instance, heldout, budget, nparam
        raw = self._buf.raw
        self.name = raw[:48].split(b"\0")[0].decode()
        ints = [int.from_bytes(raw[48 + 4 * i:52 + 4 * i], "little", signed=True) for i in range(7)]
        self.kind, self.fid, self.dim, self.instance, self.heldout, self.budget, self.nparam = ints
        self._v = (ctypes.c_double * len(self.names))()

    def regret(self, values):
        """values: {name: value}; categories by their string, inactive
        parameters absent."""
        for j, n in enumerate(self.names):
            x = values.get(n)
            p = self.space[n]
            if x is None:
                self._v[j] = math.nan
            elif p["type"] == "categorical":
                self._v[j] = p["values"].index(x)
            else:
                self._v[j] = float(x)
        return lib().bbob_case_regret(self._buf, self._v)


def cases(half="heldout", names=None):
    out = []
    for k in range(lib().bbob_suite_count()):
        c = Case(k)
        if (half == "tune" and c.heldout) or (half == "heldout" and not c.heldout):
            continue
        if names and c.name not in names:
            continue
        out.append(c)
    return out
