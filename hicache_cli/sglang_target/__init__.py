"""`--target sglang`: run SGLang's own PP-sync methods, read from the user's SGLang at run time.

locate.py finds the source (an installed distribution, a checkout or file, or a release
wheel fetched into a local cache); extract.py takes the methods out of the class with
`ast`; resolve.py turns --target and --sglang-class into what the config records; bind.py
(rank side, torch) compiles them onto a holder object and drives them.
No SGLang code is part of hicache: it is read from the user's copy on every run.
"""
