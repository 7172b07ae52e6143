"""Multi-site edits: several sites of a file masked together and filled in one denoising run.

holes.py (placeholders to fill), companion.py (the import a completion needs),
next_edits.py (sites related to the user's last change), sites.py (joint request and the
tree-sitter check of every fill), service.py (runs them on the model), node_types.py (the node
types each looks for). Text and trees: dllm_lsp.syntax. See docs/multisite.md.
"""
