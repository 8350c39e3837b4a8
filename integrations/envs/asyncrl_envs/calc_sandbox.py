"""The calculator tool's sandboxed evaluator (run by tasks/toolenv's Sandbox).

Reads one arithmetic expression on stdin, prints its value on stdout, or an
error line "error: ..." and exit status 2. Before it reads the untrusted
input it limits itself (resource.setrlimit): CPU seconds and address space
from argv, no file writes (RLIMIT_FSIZE 0), few descriptors, no new
processes (RLIMIT_NPROC 0, where the kernel applies it); it blocks network
by design -- the socket module is removed before evaluation and the
evaluator only walks an AST of numbers and + - * / // % ** and unary minus
(no names, calls or attributes), so no code of the model's runs at all.
Network namespaces (an empty one when the parent is root) are the
parent's job. Standard library only.

    python3 -I -S calc_sandbox.py CPU_SECONDS MEMORY_BYTES < expr
"""

import ast
import operator
import resource
import sys

OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
       ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}


def limit(cpu, mem):
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (8, 8))
    try:
        resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
    except (ValueError, OSError):
        pass


def evaluate(node):
    if isinstance(node, ast.Expression):
        return evaluate(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = evaluate(node.operand)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in OPS:
        return OPS[type(node.op)](evaluate(node.left), evaluate(node.right))
    raise ValueError("only numbers and + - * / // % ** are allowed, not " + type(node).__name__)


def main():
    cpu, mem = int(sys.argv[1]), int(sys.argv[2])
    limit(cpu, mem)
    sys.modules["socket"] = None  # refuse network by design
    expr = sys.stdin.read(4096).strip()
    try:
        v = evaluate(ast.parse(expr, mode="eval"))
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        print(v)
    except (ValueError, SyntaxError, ZeroDivisionError, OverflowError, RecursionError, MemoryError, TypeError) as e:
        print("error: %s" % (e or type(e).__name__))
        sys.exit(2)


if __name__ == "__main__":
    main()
