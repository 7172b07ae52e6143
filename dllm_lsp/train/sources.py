"""Find source files on this machine together with the license that lets us train on them.

Three kinds of folder are understood: a Python standard library (PSF), a site-packages
folder (each distribution's metadata names its license) and an npm node_modules tree (each
package.json does). Files whose license is not permissive are skipped, never guessed.
"""
from __future__ import annotations

import json
import re
import sys
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from .licenses import classify, from_expression, from_text

LANGUAGES = {".py": "python", ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript"}
# The benchmark must never leak into training, whatever package happens to carry it.
EXCLUDED_NAME = re.compile(r"human[-_]?eval", re.IGNORECASE)


@dataclass(frozen=True)
class SourceFile:
    path: Path
    language: str
    license: str
    origin: str        # "stdlib", or the distribution / npm package name


def default_folders() -> list[Path]:
    """The running Python's standard library and site-packages, plus global npm packages if present."""
    folders = [Path(sysconfig.get_paths()["stdlib"])]
    for key in ("purelib", "platlib"):
        p = Path(sysconfig.get_paths()[key])
        if p not in folders:
            folders.append(p)
    for npm_root in (Path(sys.prefix) / "lib" / "node_modules", Path("/usr/lib/node_modules"),
                     Path("/usr/local/lib/node_modules")):
        if npm_root.is_dir() and npm_root not in folders:
            folders.append(npm_root)
    return [f for f in folders if f.is_dir()]


def is_stdlib(folder: Path) -> bool:
    return (folder / "os.py").is_file() and (folder / "abc.py").is_file() and (folder / "collections").is_dir()


def is_site_packages(folder: Path) -> bool:
    return any(folder.glob("*.dist-info")) or any(folder.glob("*.egg-info"))


def is_node_modules(folder: Path) -> bool:
    return folder.name == "node_modules" or (folder / "package.json").is_file()


def language_of(path: Path) -> str | None:
    if path.name.endswith((".min.js", ".bundle.js")):
        return None
    return LANGUAGES.get(path.suffix)


def stdlib_files(folder: Path) -> Iterator[SourceFile]:
    for path in sorted(folder.rglob("*.py")):
        rel = path.relative_to(folder).parts
        if rel[0] in ("site-packages", "dist-packages") or EXCLUDED_NAME.search(str(path)):
            continue
        yield SourceFile(path, "python", "PSF-2.0", "stdlib")


def site_packages_files(folder: Path) -> Iterator[SourceFile]:
    for dist in sorted(metadata.distributions(path=[str(folder)]), key=lambda d: d.metadata["Name"] or ""):
        name = dist.metadata["Name"] or "?"
        if EXCLUDED_NAME.search(name):
            continue
        meta = dist.metadata
        spdx = classify(meta.get("License-Expression"), meta.get("License"), meta.get_all("Classifier") or [])
        if spdx is None or not dist.files:
            continue
        for rel in dist.files:
            path = Path(dist.locate_file(rel))
            lang = language_of(path)
            if lang is None or EXCLUDED_NAME.search(str(rel)) or not path.is_file():
                continue
            yield SourceFile(path, lang, spdx, name)


def npm_license(package_json: Path) -> str | None:
    try:
        data = json.loads(package_json.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    lic = data.get("license")
    if isinstance(lic, dict):
        lic = lic.get("type")
    if lic is None and isinstance(data.get("licenses"), list) and data["licenses"]:
        first = data["licenses"][0]
        lic = first.get("type") if isinstance(first, dict) else first
    if not isinstance(lic, str):
        return None
    return from_expression(lic) or from_text(lic)


def node_modules_files(folder: Path) -> Iterator[SourceFile]:
    """Every package.json marks a package; its files (minus nested packages) take its license."""
    for package_json in sorted(folder.rglob("package.json")):
        pkg_dir = package_json.parent
        if EXCLUDED_NAME.search(str(pkg_dir)):
            continue
        spdx = npm_license(package_json)
        if spdx is None:
            continue
        for path in sorted(pkg_dir.rglob("*")):
            lang = language_of(path)
            if lang is None or not path.is_file():
                continue
            inner = path.relative_to(pkg_dir).parts[:-1]
            # Files of a nested package (own package.json or node_modules) are listed with that package.
            if "node_modules" in inner or any((pkg_dir.joinpath(*inner[: i + 1]) / "package.json").is_file()
                                              for i in range(len(inner))):
                continue
            yield SourceFile(path, lang, spdx, pkg_dir.name)


def files_in(folder: Path, assume_license: str | None = None) -> Iterator[SourceFile]:
    """Licensed source files of one folder; raises ValueError when its license cannot be told."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"corpus folder {folder} does not exist or is not a folder")
    if is_stdlib(folder):
        yield from stdlib_files(folder)
    elif is_site_packages(folder):
        yield from site_packages_files(folder)
    elif is_node_modules(folder):
        yield from node_modules_files(folder)
    elif assume_license:
        spdx = from_expression(assume_license)
        if spdx is None:
            raise ValueError(f"--assume-license {assume_license!r} is not a permissive license")
        for path in sorted(folder.rglob("*")):
            lang = language_of(path)
            if lang and path.is_file() and not EXCLUDED_NAME.search(str(path)):
                yield SourceFile(path, lang, spdx, folder.name)
    else:
        raise ValueError(
            f"cannot tell the license of {folder}: it is not a standard library, site-packages or "
            "node_modules folder; pass --assume-license SPDX if you know it is permissive"
        )
