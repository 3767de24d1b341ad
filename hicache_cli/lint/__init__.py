"""`hicache lint`: the HiCache leak's shape found in source, with the standard library's `ast`.

An asynchronous Work (isend, irecv, batch_isend_irecv, a collective with async_op=True) kept
in a list or an attribute that nothing ever waits stays alive forever on gloo; polling
`is_completed()` does not free it. Nothing here imports torch, rich or typer, and nothing
the linted code does is run: files are parsed, never imported.

  engine.py      lint files and targets: the public entry points, returning a LintResult
  targets.py     files, directories and SGLang specs -> the files to read, and bad input
  config.py      wrapper modules and [tool.hicache.lint]; gitdiff.py: --diff's changed lines
  program.py     one program: modules, names resolved across them, class hierarchies
  modules.py     what one module defines, from its top level (the index names resolve through)
  analysis.py    which modules are walked, in rounds, and the solved graph
  build.py       the module walker: statements and scopes, one walk per module, with its mixins
                 naming.py (names, places, functions as values), exprs.py (expressions),
                 allocations.py (containers made, put into, read out of), calls.py (calls),
                 drains.py (HC002's loops), mutations.py (HC003's in-place changes)
  scopes.py      which names a scope binds, what `self` is, a loop's own variables
  apis.py        what calls mean: which create Works, store, read back, wait
  graph.py       the flow graph: places, objects, edges by kind, facts, deferred operations
  link.py        calls into other modules resolved; attribute places of a hierarchy joined
  dispatch.py    what the classes a value may hold decide: fields, methods, ProcessGroups
  containers.py  what the containers and functions a value may hold decide (points-to)
  solve.py       the graph's questions, each one linear pass: waited, kept, polled, factories
  rules.py       the rules (HC001 ...) as small classes in one registry
  suppress.py    `# hicache: ignore[HC001]` comments
  findings.py    Finding, InputProblem, Followed, LintResult
  formats/       one module per output format (text, json, sarif, github)
"""
