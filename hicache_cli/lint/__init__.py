"""`hicache lint`: the HiCache leak's shape found in source, with the standard library's `ast`.

An asynchronous Work (isend, irecv, batch_isend_irecv, a collective with async_op=True) kept
in a list or an attribute that nothing ever waits stays alive forever on gloo; polling
`is_completed()` does not free it. Nothing here imports torch, rich or typer, and nothing
the linted code does is run: files are parsed, never imported.

  names.py     what a module's names stand for: its imports, its functions and classes
  apis.py      what calls mean: which create Works, store, read back, wait, or do neither
  scopes.py    which names a scope binds, what `self` is, how a name resolves to a place
  flow.py      where each Work goes in one module: the flow graph and what was done to its places
  analyze.py   builds a module's flow graph in one walk over its statements
  rules.py     the rules (HC001 ...) as small classes in one registry
  suppress.py  `# hicache: ignore[HC001]` comments
  targets.py   files, directories and SGLang specs -> the files to read, and bad input
  engine.py    lint files and targets: the public entry points, returning a LintResult
  findings.py  Finding, InputProblem, LintResult
  formats/     one module per output format (text, json, sarif, github)
"""
