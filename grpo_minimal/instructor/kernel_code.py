"""The judge's side in the learner's kernel: not imported, but run there as a cell (its text is
``judge.KERNEL_CODE``) once the notebook has run, so that its names live among the notebook's.
Every import is inside a function: a name imported at the top would replace a notebook's own.

``__grpo_judge__`` answers one request of the judge (describe names, call a function, apply a
package helper beside it) and writes the answer as data (``__grpo_encode__``, then
``__grpo_write__``: safetensors for the tensors, JSON for the rest, nothing the judge unpickles);
an instrument of a check that stays in the judge reaches the learner's function as an
``__GrpoInstrument__``.
"""


def __grpo_encode__(x, depth=0):
    """A value as data: plain Python values, tensors and tagged dicts (``__grpo_write__``)."""
    import dataclasses
    import fractions

    import torch

    if depth > 30:
        return {"__grpo__": "opaque", "type": type(x).__name__, "repr": "(too deeply nested)"}
    if x is None or type(x) in (bool, int, float, str):
        return x
    if x is Ellipsis:
        return {"__grpo__": "ellipsis"}
    if isinstance(x, fractions.Fraction):
        return {"__grpo__": "fraction", "n": int(x.numerator), "d": int(x.denominator)}
    for kind in (bool, int, float, str):  # numpy's float64, an int subclass, ...
        if isinstance(x, kind):
            return kind(x)
    if isinstance(x, torch.nn.Module):
        state = {k: v.detach().clone() for k, v in x.state_dict().items()}
        return {"__grpo__": "module", "state": state}
    if isinstance(x, torch.Tensor):
        return (
            torch.Tensor(x.detach().clone()) if type(x) is not torch.Tensor else x.detach().clone()
        )
    if isinstance(x, (list, tuple)):
        items = [__grpo_encode__(v, depth + 1) for v in x]
        return items if isinstance(x, list) else tuple(items)
    if isinstance(x, dict) and all(type(k) in (str, int) for k in x):
        return {k: __grpo_encode__(v, depth + 1) for k, v in x.items()}
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        kind = type(x)
        return {
            "__grpo__": "dataclass",
            "type": f"{kind.__module__}.{kind.__qualname__}",
            "fields": {
                f.name: __grpo_encode__(getattr(x, f.name), depth + 1)
                for f in dataclasses.fields(x)
            },
        }
    try:
        text = repr(x)[:300]
    except Exception:
        text = "?"
    return {"__grpo__": "opaque", "type": type(x).__name__, "repr": text}


def __grpo_write__(value, path):
    """``value`` (``__grpo_encode__``'s) as a safetensors file: its tensors by key, everything
    else as JSON in the file's metadata (the judge reads it with ``judge.read_exchange``)."""
    import json
    import os

    import torch
    from safetensors.torch import save

    tensors = {}
    storable = {
        torch.bool,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
    }

    def plain(x):
        if isinstance(x, torch.Tensor):
            if x.dtype not in storable or x.layout != torch.strided:
                return {"__grpo__": "opaque", "type": "Tensor", "repr": f"a {x.dtype} tensor"}
            key = f"t{len(tensors)}"
            tensors[key] = torch.Tensor(x).detach().contiguous().clone()
            return {"__grpo__": "tensor", "key": key}
        if isinstance(x, tuple):
            return {"__grpo__": "tuple", "items": [plain(v) for v in x]}
        if isinstance(x, list):
            return [plain(v) for v in x]
        if isinstance(x, dict):
            if all(type(k) is str for k in x):
                return {k: plain(v) for k, v in x.items()}
            return {"__grpo__": "pairs", "items": [[k, plain(v)] for k, v in x.items()]}
        return x

    data = save(tensors, metadata={"structure": json.dumps(plain(value))})
    with open(path + ".tmp", "wb") as handle:
        handle.write(data)
    os.rename(path + ".tmp", path)


class __GrpoInstrument__:
    """A check's instrument (a policy that counts its generate calls, a reward that records what
    it scored) lent to the learner's function: it stays in the judge, which counts; each call of
    one of its ``methods`` here is a request to the judge, answered through the exchange folder."""

    def __init__(self, folder, key, kind, methods):
        self._where = (folder, key, kind, tuple(methods))

    def __getattr__(self, name):
        if "_where" not in self.__dict__:  # a copy being built (copy.deepcopy asks first)
            raise AttributeError(name)
        folder, key, kind, methods = self.__dict__["_where"]
        if name in methods and name != "__call__":
            return lambda *args, **kwargs: self._ask(name, args, kwargs)
        raise AttributeError(f"the check's {kind} offers {', '.join(methods)}, not {name!r}")

    def __call__(self, *args, **kwargs):
        if "__call__" not in self._where[3]:
            raise TypeError(f"the check's {self._where[2]} is not callable")
        return self._ask("__call__", args, kwargs)

    def __repr__(self):
        return f"<the check's {self._where[2]}>"

    def _ask(self, method, args, kwargs):
        import os
        import time

        import torch

        folder, key, kind, _ = self._where
        number = next(__grpo_calls__)
        request, answer = f"{folder}/call-{number}.pt", f"{folder}/call-{number}.answer"
        __grpo_write__(
            {
                "key": key,
                "method": method,
                "args": __grpo_encode__(list(args)),
                "kwargs": __grpo_encode__(dict(kwargs)),
            },
            request,
        )
        deadline, pause = time.monotonic() + 600, 0.0002
        while not os.path.exists(answer):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the judge did not answer a call of the check's {kind}")
            time.sleep(pause)
            pause = min(2 * pause, 0.005)
        result = torch.load(answer, weights_only=False)
        os.unlink(answer)
        if "raised" in result:
            kind_name, message = result["raised"]
            import builtins

            error = getattr(builtins, kind_name, None)
            if not (isinstance(error, type) and issubclass(error, Exception)):
                error = RuntimeError
            raise error(message)
        return result["ok"]


__grpo_calls__ = __import__("itertools").count(1)


def __grpo_judge__(request_path, answer_path):
    """Defined in the learner's kernel after the notebook ran: answer one request of the judge."""
    import importlib

    import torch

    from grpo_minimal.labs.checking import raised

    encode = __grpo_encode__

    def lent(value):
        if isinstance(value, dict) and "__grpo_instrument__" in value:
            return __GrpoInstrument__(*value["__grpo_instrument__"])
        return value

    def answer_of(call):
        try:
            result = call()
        except BaseException as error:
            return {
                "raised": {
                    "types": [t.__name__ for t in type(error).__mro__],
                    "message": str(error)[:2000],
                    "text": raised(error)[:2000],
                }
            }
        return {"ok": encode(result)}

    request = torch.load(request_path, weights_only=False)
    space = globals()
    if request["op"] == "describe":
        answer = {}
        for name in request["names"]:
            value = space.get(name)
            if name not in space:
                answer[name] = ("missing",)
            elif callable(value) and not isinstance(value, (torch.nn.Module, type)):
                answer[name] = ("function",)
            else:
                answer[name] = ("value", encode(value))
    else:
        fn = space.get(request["name"])
        args = [lent(value) for value in request["args"]]
        kwargs = {key: lent(value) for key, value in request["kwargs"].items()}
        if request["op"] == "apply":
            module, name = request["helper"].split(":")
            helper = getattr(importlib.import_module(module), name)
            answer = answer_of(lambda: helper(fn, *args, **kwargs))
        else:
            answer = answer_of(lambda: fn(*args, **kwargs))
        answer["args"] = encode(list(args))
        answer["kwargs"] = encode(dict(kwargs))
    __grpo_write__(answer, answer_path)
