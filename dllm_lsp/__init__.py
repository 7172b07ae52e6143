__version__ = "0.1.0"


def _checkout_layout() -> None:
    """Make `dllm_lsp.kernels` and `dllm_lsp.shipped_models` importable from a checkout.

    pyproject's package-dir installs the top-level kernels/ and models/ inside the package. Run
    from the repository root (`python -m dllm_lsp`, what the editors' `python` setting runs), the
    checkout's own dllm_lsp/ comes first on sys.path, even when a copy was installed with
    `pip install .`, and it has no kernels/ inside: a last-resort finder maps the two names onto
    the checkout's folders (an installed or editable copy never reaches it).
    """
    import importlib.abc
    import importlib.util
    import sys
    from pathlib import Path

    package = Path(__file__).resolve().parent
    root = package.parent
    if (package / "kernels").is_dir() or not (root / "kernels" / "__init__.py").is_file():
        return
    folders = {f"{__name__}.kernels": root / "kernels", f"{__name__}.shipped_models": root / "models"}

    class CheckoutLayout(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            folder = folders.get(name)
            if folder is None or not (folder / "__init__.py").is_file():
                return None
            return importlib.util.spec_from_file_location(
                name, folder / "__init__.py", submodule_search_locations=[str(folder)])

    if not any(type(f).__name__ == "CheckoutLayout" for f in sys.meta_path):
        sys.meta_path.append(CheckoutLayout())


_checkout_layout()
