"""Names, for the module walker: what a name or a dotted path stands for (a local, a function or
class of this module, another module's name left for the program to resolve, torch.distributed's
API), and which place `x.attr` is."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from hicache_cli.lint.apis import COLLECTIVES, P2P_METHODS, PG_CLASSES, PG_FACTORIES, PROCESS_GROUP
from hicache_cli.lint.config import DIST
from hicache_cli.lint.graph import ATTR, CALL, FIELD, FUNCTION, GLOBAL, INSTANCE, LOCAL, RETURN, FieldAccess, Nodes
from hicache_cli.lint.modules import dotted
from hicache_cli.lint.program import ClassRef, External, FunctionRef

DIST_PREFIX = DIST + "."

if TYPE_CHECKING:
    from hicache_cli.lint.build import ModuleWalker


class Naming:
    """Mixed into ModuleWalker: resolving names and attribute places."""

    def name_key(self: ModuleWalker, name: str) -> tuple:
        key = self.scope.node_for(name)
        if key[0] == GLOBAL and self.scope.kind != "class":
            imported = self.scope.lookup_import(name) or self.info.imports.get(name)
            if imported is not None and self.program.is_internal(imported):
                return (GLOBAL, -1, imported)  # another module's name: one place once resolved
        return key

    def symbol(self: ModuleWalker, expr: ast.expr) -> tuple | None:
        """What a callee written as a name or a dotted path is (None: a value, called)."""
        if isinstance(expr, ast.Name):
            return self._name_symbol(expr.id)
        if not isinstance(expr, ast.Attribute):
            return None
        parts: list[str] = []
        root: ast.expr = expr
        while isinstance(root, ast.Attribute):
            parts.append(root.attr)
            root = root.value
        if not isinstance(root, ast.Name):
            return None
        parts.reverse()
        base = self._name_symbol(root.id)
        if base is None:
            return None
        kind = base[0]
        if kind == "ext":
            return ("ext", self.program.config.canonical(".".join([base[1], *parts])))
        if kind == "dotted":
            return ("dotted", ".".join([base[1], *parts]))
        if kind == "in":
            return ("in", base[1], (*base[2], *parts))
        if kind == "own_class" and len(parts) == 1:
            method = self.program.method(base[1], parts[0])
            if method is not None and method.mid == self.mid:
                return ("own_method", method.info)
            return ("method", base[1], parts[0])
        return None

    def _name_symbol(self: ModuleWalker, name: str) -> tuple | None:
        scope = self.scope
        if scope.function(name) is not None:
            return ("closure", name)
        imported = scope.lookup_import(name)
        if imported is None:
            if scope.is_local(name):
                return None
            info = self.info
            if name in info.functions:
                return ("own_func", info.functions[name])
            if name in info.classes:
                return ("own_class", ClassRef(self.mid, name))
            imported = info.imports.get(name) or info.aliases.get(name)
            if imported is None:
                if name in info.names or name in scope.locals:
                    return None
                if any(self.program.is_internal(star) for star in info.stars):
                    return ("in", self.mid, (name,))
                for star in info.stars:
                    if self.program.config.canonical(star) == DIST or star.startswith(DIST_PREFIX):
                        return ("ext", f"{DIST}.{name}")
                return ("builtin", name)
        if self.program.is_internal(imported):
            return ("dotted", imported)
        return ("ext", self.program.config.canonical(imported))

    def function_value(self: ModuleWalker, expr: ast.Name | ast.Attribute) -> Nodes | None:
        """A function named as a value (`p2p_func = _batched if batch else _plain`, `fn =
        self._send`, `op = dist.isend`): its token, with the place the name also is (None: no
        function, or not one the analysis can tell). Calls of what holds it follow the token."""
        if isinstance(expr, ast.Name):
            symbol = self._name_symbol(expr.id)
            place = self.n(self.name_key(expr.id))
        elif (owner := self._bound_method(expr)) is not None:
            return frozenset({self.attr_node(expr), owner})
        elif (value := self._property(expr)) is not None:
            return frozenset({self.attr_node(expr), value})
        else:
            symbol = self.symbol(expr) if not self._is_value(expr) else None
            place = -1  # the attribute's place, made once a token is
        if symbol is None:
            return None
        kind = symbol[0]
        if kind == "own_func":
            key, named = (FUNCTION, self.mid, symbol[1].qualname), FunctionRef(self.mid, symbol[1])
        elif kind == "closure":
            found = self.scope.function(symbol[1])
            assert found is not None
            key, named = (FUNCTION, self.mid, found[1].qualname), FunctionRef(self.mid, found[1])
        elif kind in ("dotted", "in"):
            key, named = (FUNCTION, symbol), symbol
        elif kind == "ext" and symbol[1].startswith(DIST_PREFIX):
            api = symbol[1][len(DIST_PREFIX) :]
            if api not in P2P_METHODS and api not in COLLECTIVES:
                return None
            key, named = (FUNCTION, "api", api), ("api", api)
        else:
            return None
        token = self.n(key)
        self.g.functions.setdefault(token, named)
        if kind == "ext":
            return frozenset({token})
        if place == -1:
            assert isinstance(expr, ast.Attribute)
            place = self.attr_node(expr)
        return frozenset({token, place})

    def _own_method(self: ModuleWalker, expr: ast.expr) -> FunctionRef | None:
        if not (isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name)):
            return None
        owner = self.scope.self_scope(expr.value.id)
        if owner is None or not isinstance(owner.cls, ClassRef):
            return None
        return self.program.method(owner.cls, expr.attr)

    def _property(self: ModuleWalker, expr: ast.Attribute) -> int | None:
        """`self.parent` where `parent` is a @property of self's class: what it returns (read as
        a call of it, so its return goes to this read, not to code outside the program)."""
        method = self._own_method(expr)
        if method is None or not method.info.getter:
            return None
        read = self.n((CALL, "property", self.mid, expr.lineno, expr.col_offset))
        self.g.link([self.n((RETURN, method.mid, method.info.qualname))], read, self.g.returns)
        if method.info.positional:
            self.g.link(
                self.ev(expr.value),
                self.n((LOCAL, method.mid, method.info.qualname, method.info.positional[0])),
                self.g.params,
            )
        return read

    def _bound_method(self: ModuleWalker, expr: ast.expr) -> int | None:
        """`self._send` where `_send` is a method of self's class: a bound method's token."""
        method = self._own_method(expr)
        if method is None or method.info.getter:
            return None
        token = self.n((FUNCTION, "bound", method.mid, method.info.qualname))
        self.g.functions.setdefault(token, ("bound", method))
        return token

    def process_group(self: ModuleWalker) -> Nodes:
        """What stands for any torch.distributed ProcessGroup: an instance of torch's class."""
        return frozenset({self.n((INSTANCE, External(PROCESS_GROUP)))})

    def annotated(self: ModuleWalker, annotation: ast.expr, node: int) -> None:
        """A place annotated with a ProcessGroup holds one (`pg: ProcessGroup`, `self._pg:
        Optional[BaseProcessGroup] = pg`); with a class of the program, one the program decides
        is a ProcessGroup once its bases are known (dispatch.py)."""
        if node < 0 or not isinstance(annotation, ast.Name | ast.Attribute):
            return
        symbol = self.symbol(annotation)
        if symbol is None:
            return
        if symbol[0] == "ext" and symbol[1] in PG_CLASSES:
            self.g.link(self.process_group(), node)
        elif symbol[0] in ("own_class", "dotted", "in"):
            key = symbol[1] if symbol[0] == "own_class" else ("sym", symbol)
            self.g.typed.append((node, key))

    def pg_value(self: ModuleWalker, expr: ast.Attribute) -> Nodes | None:
        """`dist.group.WORLD`: a ProcessGroup named by torch.distributed."""
        symbol = self.symbol(expr) if not self._is_value(expr) else None
        if symbol is not None and symbol[0] == "ext" and symbol[1] in PG_FACTORIES:
            return self.process_group()
        return None

    def class_key(self: ModuleWalker, expr: ast.expr) -> tuple | ClassRef | None:
        """The class a constructor call or an annotation names, as far as this module can tell."""
        symbol = self.symbol(expr) if isinstance(expr, ast.Name | ast.Attribute) else None
        if symbol is None:
            return None
        if symbol[0] == "own_class":
            return symbol[1]
        if symbol[0] in ("dotted", "in"):
            return ("sym", symbol)
        return None

    def api_named(self: ModuleWalker, expr: ast.expr) -> str | None:
        """`dist.isend` (under any import) -> `isend`; None for anything not torch.distributed's."""
        symbol = self.symbol(expr) if isinstance(expr, ast.Name | ast.Attribute) else None
        if symbol is not None and symbol[0] == "ext" and symbol[1].startswith(DIST_PREFIX):
            return symbol[1][len(DIST_PREFIX) :]
        return None

    def attr_key(self: ModuleWalker, receiver: ast.expr, attr: str) -> tuple | None:
        """The place `receiver.attr` is when this module can tell: per class hierarchy when the
        receiver's class is known (self, a class, a local made by a constructor or annotated), per
        module for a module. None for a value of a class not known here (a field access)."""
        scope = self.scope
        if isinstance(receiver, ast.Name):
            owner = scope.self_scope(receiver.id)
            if owner is not None and owner.cls is not None:
                return (ATTR, owner.cls, attr)
            if scope.is_local(receiver.id):
                typed = scope.type_of(receiver.id)
                return (ATTR, typed, attr) if typed is not None else None
            symbol = self._name_symbol(receiver.id)
            if symbol is not None:
                if symbol[0] == "own_class":
                    return (ATTR, symbol[1], attr)
                if symbol[0] in ("dotted", "in"):
                    return (ATTR, ("sym", symbol), attr)  # a class or a module elsewhere: linked later
        elif isinstance(receiver, ast.Attribute) and dotted(receiver) is not None:
            symbol = self.symbol(receiver)
            if symbol is not None and symbol[0] in ("dotted", "in"):
                return (ATTR, ("sym", symbol), attr)
        return None

    def attr_node(self: ModuleWalker, node: ast.Attribute) -> int:
        """The node of `x.a`: its place, or a field access the solver resolves by x's classes."""
        key = self.attr_key(node.value, node.attr)
        if key is not None:
            return self.n(key)
        access = self.n((FIELD, len(self.g.fields)))
        self.g.fields.append(FieldAccess(access, tuple(self.ev(node.value)), node.attr))
        return access

    def _is_value(self: ModuleWalker, expr: ast.expr) -> bool:
        """Whether an expression is a value (a local, an object) rather than a class or module path."""
        root = expr
        while isinstance(root, ast.Attribute):
            root = root.value
        return not isinstance(root, ast.Name) or self._name_symbol(root.id) is None

    def is_self(self: ModuleWalker, expr: ast.expr) -> bool:
        return self.scope.is_self(expr)

    # --- expressions --------------------------------------------------------------------------
