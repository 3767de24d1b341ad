"""`hicache lint`: the HiCache leak's shape found in source, with the standard library's `ast`.

An asynchronous Work (isend, irecv, batch_isend_irecv, a collective with async_op=True) kept
in a list or an attribute that nothing ever waits stays alive forever on gloo; polling
`is_completed()` does not free it. Nothing here imports torch, rich or typer, and nothing
the linted code does is run: files are parsed, never imported.

What to read, and what is returned:
  targets.py    files, directories and SGLang specs -> the files to read, and bad input
  config.py     what the lint is told: wrapper modules (--wrapper, [tool.hicache.lint])
  gitdiff.py    --diff REF: the lines changed since a git ref
  engine.py     lint files and targets: the public entry points, returning a LintResult
  findings.py   Finding, InputProblem, Followed, LintResult

One program, as one flow graph:
  modules.py    what one module defines, from its top level (the index names resolve through)
  program.py    the program's modules, names across modules, class hierarchies
  apis.py       what calls mean: which create Works, store, read back, wait, or do neither
  graph.py      the flow graph: places, edges, and what was done to each place (facts)
  analysis.py   which modules are walked, in rounds, and the solved graph

One walk per module (build.py), and what it asks:
  build.py      walk a module's statements once, in every scope, adding to the graph
  scopes.py     which names a scope binds, what `self` is, how a name resolves to a place
  naming.py     what a name or a dotted path stands for; which place `x.attr` is
  exprs.py      what a value may hold: the nodes it reads from, or the origin it creates
  allocations.py  containers made, put into, read out of (objects by where they are made)
  calls.py      where a call's arguments and result go: this module, another, or unseen code
  drains.py     loops that wait every Work of a container (HC002)
  mutations.py  tensors changed after a dropped isend of them (HC003)

Linking, solving, judging:
  link.py       what the walks left to the program: attributes of one hierarchy, calls across modules
  dispatch.py   which classes a value may be an instance of, and the fields and methods that decides
  containers.py what the containers and functions a value may hold decide (points-to)
  solve.py      every question in one breadth-first pass over the graph (linear in its size)
  rules.py      the rules (HC001 ...) as small classes in one registry
  suppress.py   `# hicache: ignore[HC001]` comments
  formats/      one module per output format (text, json, sarif, github)
"""
