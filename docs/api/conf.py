"""Sphinx configuration of the API reference, built from the docstrings of
the installed package (``tests/test_api_docs.py`` builds it; by hand:
``python -m sphinx -b html docs/api build/api``)."""
project = "Slash for Python"
extensions = ["sphinx.ext.autodoc"]
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
exclude_patterns = ["_build"]
html_theme = "alabaster"
