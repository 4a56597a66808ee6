"""The libcst side: building fixes and applying them losslessly (encoding, comments, layout kept).

Findings come from the `ast` analysis; a file is parsed with libcst only when a finding in it has
a fix to build or apply, and where only what each fix is gets reported (the text report), only
the statements around its findings (`partial`). `context.CstContext` locates each finding's libcst
node by position, `apply` applies the replacements and the imports they need,
`cst_index`/`cst_names` answer what fix builders ask about imports and names.
"""
